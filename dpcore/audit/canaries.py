"""The canaries of a one-run audit: who is in, what enters training, and the scores.

Both kinds draw which of the M canaries are included (independently, probability 1/2) from a
generator seeded by :func:`canary_seed` of the run seed, so a run's canaries are the same on
both backends and are recorded by that seed.

* :class:`GradientCanaries` (white-box, harmonised DP-SGD): canary i is a per-example gradient
  of norm :data:`CANARY_NORM_MULTIPLE` x C along its own coordinate of the neutral weight
  layout (:mod:`dpcore.weights`). Each included canary joins the batches as the run samples
  its examples: under Poisson sampling it joins every step with the run's probability q;
  under shuffling it joins exactly one batch per epoch, the batch of a position drawn
  uniformly among the epoch's N example positions (the position of a shuffled example), so
  the audit tests the mechanism that ran. A sampled canary is clipped by the step's rule (scaled by
  C / max(norm, C), in the step's norm; a single coordinate has the same L1 and L2 norm) and
  is added to the clipped sum before the noise: dpcore computes that vector, each backend only
  adds it (the ``extra`` of :meth:`dpcore.trainloop.StepEngine.train_step`). Score: how far
  the weight moved against the canary's gradient over training, w_0[j] - w_T[j].
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

from dpcore.audit.one_run import OneRunAudit, audit_scores
from dpcore.errors import ConfigError

if TYPE_CHECKING:
    from dpcore.config import AuditCanarySpec
    from dpcore.data.dataset import Dataset
    from dpcore.sampling import BatchPlan
    from dpcore.stepengine import StepMechanism

#: A gradient canary's norm in units of the clip norm C: well above C, so that clipping is
#: what bounds it (a step that forgets to clip lets it through 100-fold).
CANARY_NORM_MULTIPLE = 100.0

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
        value: the clipped canary gradient's value along its coordinate.
        seed: the canary generator's seed.
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
    value: float
    seed: int
    rng: np.random.Generator = dataclasses.field(repr=False, default_factory=np.random.default_rng)
    _step: int = dataclasses.field(default=0, repr=False)
    _batch_of: np.ndarray | None = dataclasses.field(default=None, repr=False)

    @classmethod
    def for_run(cls, spec: AuditCanarySpec, run_seed: int, shapes: Mapping[str, tuple[int, ...]],
                mechanism: StepMechanism, batches: BatchPlan, sampling: str, clip_norm: float
                ) -> GradientCanaries:
        """Draw the coordinates and the inclusion of ``spec.count`` canaries.

        ``batches`` and ``sampling`` are the run's (the canaries are sampled as its examples
        are); ``clip_norm`` is the config's C (the canaries' norm is
        :data:`CANARY_NORM_MULTIPLE` C); ``mechanism`` is the step as it runs (a ``no_clip``
        fault clips nothing).

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
        norm = CANARY_NORM_MULTIPLE * float(clip_norm)
        value = norm * min(1.0, mechanism.clip_norm / max(norm, mechanism.clip_norm))
        return cls(keys=keys, shapes={k: tuple(shapes[k]) for k in keys}, key_index=key_index,
                   flat_index=coords - starts[key_index], included=included,
                   sampling=sampling, sampling_rate=float(batches.sampling_rate),
                   steps_per_epoch=int(batches.steps_per_epoch),
                   n_examples=int(batches.n_examples),
                   batch_size=int(batches.expected_batch_size), value=float(value), seed=seed,
                   rng=rng)

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

    def step_gradient(self) -> dict[str, np.ndarray] | None:
        """The summed clipped gradients of the canaries sampled in this step (neutral layout;
        only the keys they touch), or None when none is sampled (:meth:`sampled`: call it
        exactly once per step)."""
        sampled = self.sampled()
        if not sampled.any():
            return None
        out: dict[str, np.ndarray] = {}
        for i in np.flatnonzero(sampled):
            key = self.keys[self.key_index[i]]
            flat = out.setdefault(key, np.zeros(int(np.prod(self.shapes[key])), np.float32))
            flat[self.flat_index[i]] += self.value
        return {k: v.reshape(self.shapes[k]) for k, v in out.items()}

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
