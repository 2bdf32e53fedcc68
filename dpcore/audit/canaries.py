"""The canaries of a one-run audit: who is in, what enters training, and the scores.

Both kinds draw which of the M canaries are included (independently, probability 1/2) from a
generator seeded by :func:`canary_seed` of the run seed, so a run's canaries are the same on
both backends and are recorded by that seed.

* :class:`GradientCanaries` (white-box, DP-SGD): canary i is a per-example gradient of norm
  :data:`CANARY_NORM_MULTIPLE` x C whose own coordinate j of the neutral weight layout
  (:mod:`dpcore.weights`) is drawn at random (the record, :mod:`dpcore.audit.canary_records`,
  may also touch its output unit's bias). Each included canary joins the batches as the run
  samples its examples: under Poisson sampling it joins every step with the run's
  probability q; under shuffling it joins exactly one batch per epoch, the batch of a
  position drawn uniformly among the epoch's N example positions, so the audit tests the
  mechanism that ran. A sampled canary is one more per-example record, which the step engine
  clips, sums and noises with its real examples, in its own code (the ``canaries`` of
  :meth:`dpcore.stepengine.StepEngine.train_step`; a missing clip lets it through 100-fold).
  dpcore knows what an honest step adds for it (:func:`clipped_sum`), and the engine reports
  the noised sum at the canaries' coordinates every step, so the residuals
  (:mod:`dpcore.audit.per_step`) show whether the noise is fresh and whether each canary was
  clipped as an honest step clips it. Score of the one-run bound:
  how far the weight moved against the canary's gradient over training, w_0[j] - w_T[j].
* :class:`InputCanaries` (black-box, any recipe): canary i is a copy of a training image with
  a fixed wrong label; the included ones are appended to the training set. Score: the trained
  model's probability of that wrong label.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from dpcore.audit.canary_records import (
    CANARY_NORM_MULTIPLE,
    CanaryRecord,
    CanaryRecords,
    canary_records,
    clipped_sum,
)
from dpcore.audit.one_run import OneRunAudit, audit_scores
from dpcore.audit.per_step import CanaryTrace
from dpcore.errors import ConfigError

if TYPE_CHECKING:
    from dpcore.architectures import Architecture
    from dpcore.config import AuditCanarySpec
    from dpcore.data.dataset import Dataset
    from dpcore.sampling import BatchPlan

__all__ = ["CANARY_NORM_MULTIPLE", "GRADIENT_SCORE", "INPUT_SCORE", "GradientCanaries",
           "InputCanaries", "canary_seed", "inclusion"]

GRADIENT_SCORE = "movement of the weight against the canary gradient, w_0[j] - w_T[j]"
INPUT_SCORE = "trained model's probability of the canary's wrong label"


def canary_seed(seed: int) -> int:
    """Seed of a run's canary generator: a stream of its own, derived from the run seed."""
    return int(np.random.SeedSequence([int(seed), 0xCA4A2]).generate_state(1)[0])


def inclusion(m: int, rng: np.random.Generator) -> np.ndarray:
    """M independent fair coins: which canaries are included."""
    return rng.random(m) < 0.5


@dataclass
class GradientCanaries:
    """The gradient canaries of one run (see the module docstring).

    Attributes:
        keys: the neutral weight keys, in a fixed (sorted) order.
        shapes: their shapes.
        key_index, flat_index: canary i's coordinate is ``keys[key_index[i]]`` at flat
            position ``flat_index[i]``.
        included: which canaries are in.
        sampling: ``poisson`` or ``shuffle``, as the run samples its examples.
        sampling_rate: q, each included canary's chance to join a step (Poisson).
        steps_per_epoch: steps of one epoch (shuffle: one batch per epoch holds the canary).
        n_examples: N, the positions of a shuffled epoch.
        batch_size: B, positions per shuffled batch.
        records: canary i's per-example record (:mod:`dpcore.audit.canary_records`), of norm
            :data:`CANARY_NORM_MULTIPLE` C in the step's clip norm.
        clip_norm, clip_kind: the config's C and clip norm (``"l2"`` / ``"l1"``): what an
            honest step clips each record to.
        seed: the canary generator's seed.
        trace: what each step added at the canaries' coordinates (:class:`CanaryTrace`).
    """

    keys: list[str]
    shapes: dict[str, tuple[int, ...]]
    key_index: np.ndarray
    flat_index: np.ndarray
    included: np.ndarray
    sampling: str
    sampling_rate: float
    steps_per_epoch: int
    n_examples: int
    batch_size: int
    records: list[CanaryRecord]
    clip_norm: float
    clip_kind: str
    seed: int
    rng: np.random.Generator = dataclasses.field(repr=False, default_factory=np.random.default_rng)
    trace: CanaryTrace = dataclasses.field(repr=False, default=None)  # type: ignore[assignment]
    _step: int = dataclasses.field(default=0, repr=False)
    _batch_of: np.ndarray | None = dataclasses.field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.trace is None:
            self.trace = CanaryTrace.of(self.records, self.clip_norm, self.clip_kind)

    @classmethod
    def for_run(cls, spec: AuditCanarySpec, run_seed: int, shapes: Mapping[str, tuple[int, ...]],
                arch: Architecture, batches: BatchPlan, sampling: str, clip_norm: float,
                clip_kind: str = "l2") -> GradientCanaries:
        """Draw the coordinates and the inclusion of ``spec.count`` canaries.

        ``shapes``: the trained weights (neutral layout) of model ``arch``; ``batches`` and
        ``sampling`` are the run's (the canaries are sampled as its examples are);
        ``clip_norm`` and ``clip_kind``: the config's C and clip norm (each record's norm is
        :data:`CANARY_NORM_MULTIPLE` C in it; the step engine clips it as it clips its
        examples, with whatever clip norm its step runs: a ``no_clip`` fault clips nothing).

        Raises:
            ConfigError: more canaries than weight coordinates (each needs its own), or an
                unknown sampling.
        """
        if sampling not in ("poisson", "shuffle"):
            raise ConfigError(f"canary sampling={sampling!r} is not known; valid: poisson, "
                              "shuffle")
        keys = sorted(shapes)
        sizes = np.array([int(np.prod(shapes[k])) for k in keys], dtype=np.int64)
        total = int(sizes.sum())
        m = spec.count
        if m > total:
            raise ConfigError(
                f"audit_canaries.count={m} is more than the model's {total} weight "
                f"coordinates; valid for gradient canaries: 1..{total}")
        seed = canary_seed(run_seed)
        rng = np.random.default_rng(seed)
        included = inclusion(m, rng)
        coords = rng.choice(total, size=m, replace=False)
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        key_index = np.searchsorted(starts, coords, side="right") - 1
        flat_index = coords - starts[key_index]
        records = canary_records(arch, [keys[i] for i in key_index], flat_index,
                                 CANARY_NORM_MULTIPLE * float(clip_norm), clip_kind)
        return cls(keys=keys, shapes={k: tuple(shapes[k]) for k in keys}, key_index=key_index,
                   flat_index=flat_index, included=included, sampling=sampling,
                   sampling_rate=float(batches.sampling_rate),
                   steps_per_epoch=int(batches.steps_per_epoch),
                   n_examples=int(batches.n_examples),
                   batch_size=int(batches.expected_batch_size), records=records,
                   clip_norm=float(clip_norm), clip_kind=clip_kind, seed=seed, rng=rng)

    def sampled(self) -> np.ndarray:
        """Which canaries join this step (a boolean per canary), as the run samples: Poisson
        at rate q; shuffled, in the one batch of the epoch their drawn position falls in.
        Draws from the canary generator and counts the step: call it once per step, in
        order."""
        step, self._step = self._step, self._step + 1
        if self.sampling == "poisson":
            return self.included & (self.rng.random(len(self.included)) < self.sampling_rate)
        position = step % self.steps_per_epoch
        if position == 0 or self._batch_of is None:  # a new epoch: each canary's batch
            positions = self.rng.integers(0, self.n_examples, size=len(self.included))
            self._batch_of = positions // self.batch_size
        return self.included & (self._batch_of == position)

    def step_records(self) -> CanaryRecords | None:
        """The records of the canaries sampled in this step (:meth:`sampled`, in canary
        order), or None when none is; the trace keeps what an honest step adds for them.
        Call it exactly once per step, in order."""
        sampled = self.sampled()
        self.trace.sampled(sampled)
        if not sampled.any():
            return None
        return CanaryRecords.of([self.records[i] for i in np.flatnonzero(sampled)])

    def step_gradient(self) -> dict[str, np.ndarray] | None:
        """What an honest step adds for the canaries sampled now (:meth:`sampled`): their
        summed clipped gradients (neutral layout; only the keys they touch), or None when
        none is sampled. Draws and counts the step, as :meth:`step_records`."""
        sampled = self.sampled()
        if not sampled.any():
            return None
        out: dict[str, np.ndarray] = {}
        summed = clipped_sum([self.records[i] for i in np.flatnonzero(sampled)],
                             self.clip_norm, self.clip_kind)
        for key, entries in summed.items():
            flat = np.zeros(int(np.prod(self.shapes[key])), np.float32)
            for index, value in entries.items():
                flat[index] += value
            out[key] = flat.reshape(self.shapes[key])
        return out

    def coordinates(self) -> dict[str, np.ndarray]:
        """The canaries' own coordinates: neutral key -> flat indices, in canary order within
        each key (what the step engine reports after each step,
        :meth:`dpcore.stepengine.StepEngine.watch`)."""
        return self.trace.coordinates()

    def observed(self, values: Mapping[str, np.ndarray]) -> None:
        """The engine's report of this step's noised sum at :meth:`coordinates`."""
        self.trace.observed(values)

    def scores(self, initial: Mapping[str, np.ndarray], final: Mapping[str, np.ndarray]
               ) -> np.ndarray:
        """w_0[j] - w_T[j] for each canary's coordinate j (a canary pushes its weight down)."""
        out = np.empty(len(self.included), dtype=np.float64)
        for i, (ki, fi) in enumerate(zip(self.key_index, self.flat_index, strict=True)):
            key = self.keys[ki]
            out[i] = (float(np.ravel(initial[key])[fi]) - float(np.ravel(final[key])[fi]))
        return out

    def audit(self, spec: AuditCanarySpec, initial: Mapping[str, np.ndarray],
              final: Mapping[str, np.ndarray], delta: float) -> OneRunAudit:
        """The one-run audit of the trained weights."""
        return audit_scores(self.scores(initial, final), self.included, spec.k, delta,
                            guess_out=spec.guess_out, kind="gradient", seed=self.seed,
                            score=GRADIENT_SCORE)


@dataclass(frozen=True)
class InputCanaries:
    """The input canaries of one run: M training images, each with a fixed wrong label.

    Attributes:
        source_index: the training images they copy.
        labels: their wrong labels.
        included: which are appended to the training set.
        seed: the canary generator's seed.
    """

    source_index: np.ndarray
    labels: np.ndarray
    included: np.ndarray
    seed: int

    @classmethod
    def for_dataset(cls, spec: AuditCanarySpec, run_seed: int, dataset: Dataset
                    ) -> InputCanaries:
        """Draw the canaries of ``dataset``'s training set.

        Raises:
            ConfigError: a text data set (a mislabelled image has no meaning there), fewer
                than two classes, or more canaries than training examples.
        """
        if dataset.task != "image":
            raise ConfigError(
                f"audit_canaries.kind='input' needs an image data set; {dataset.name!r} is "
                f"{dataset.task}; valid there: no audit_canaries")
        n = len(dataset.x_train)
        m = spec.count
        if m > n:
            raise ConfigError(
                f"audit_canaries.count={m} is more than the {n} training examples of "
                f"{dataset.name!r}; valid for input canaries: 1..{n}")
        if dataset.n_classes < 2:
            raise ConfigError(f"input canaries need >= 2 classes; {dataset.name!r} has "
                              f"{dataset.n_classes}")
        seed = canary_seed(run_seed)
        rng = np.random.default_rng(seed)
        included = inclusion(m, rng)
        source = rng.choice(n, size=m, replace=False)
        shift = rng.integers(1, dataset.n_classes, size=m)
        labels = (np.asarray(dataset.y_train)[source] + shift) % dataset.n_classes
        return cls(source_index=source, labels=labels.astype(np.asarray(dataset.y_train).dtype),
                   included=included, seed=seed)

    def images(self, dataset: Dataset) -> np.ndarray:
        """The canary images (all M, in order)."""
        return np.asarray(dataset.x_train)[self.source_index]

    def training_set(self, dataset: Dataset) -> Dataset:
        """``dataset`` with the included canaries appended to its training split."""
        inc = self.included
        x = np.concatenate([dataset.x_train, self.images(dataset)[inc]])
        y = np.concatenate([dataset.y_train, self.labels[inc]])
        extra: dict[str, Any] = dict(dataset.extra)
        extra["audit_input_canaries"] = str(int(inc.sum()))
        changes: dict[str, Any] = {"x_train": x, "y_train": y, "extra": extra}
        if getattr(dataset, "groups_train", None) is not None:
            groups = np.asarray(dataset.groups_train)
            changes["groups_train"] = np.concatenate([groups, groups[self.source_index[inc]]])
        return dataclasses.replace(dataset, **changes)

    def audit(self, spec: AuditCanarySpec, proba: np.ndarray, delta: float) -> OneRunAudit:
        """The one-run audit from the trained model's probabilities [M, K] on the canaries."""
        scores = np.asarray(proba, np.float64)[np.arange(len(self.labels)), self.labels]
        return audit_scores(scores, self.included, spec.k, delta, guess_out=spec.guess_out,
                            kind="input", seed=self.seed, score=INPUT_SCORE)
