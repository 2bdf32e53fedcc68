"""The framework-neutral training driver shared by both backends.

A backend supplies a :class:`StepEngine`: something that performs one *logical* DP-SGD step
on a list of physical chunks, predicts class probabilities, and gets/sets its weights in the
neutral layout. Everything else lives here, written once: the seeded index batches
(:mod:`dpcore.sampling`), their optional per-example augmentation (:mod:`dpcore.augment`), the
physical chunking, the per-epoch loop and history, the EMA of the weights (kept in numpy),
divergence detection, evaluation, epsilon spent so far, timing and the progress bar.

The EMA costs one weight copy per step (``get_weights``): negligible for cnn4, about 45 MB
for resnet18, still small next to a DP step of that model.

The algorithm a step engine must run on one logical batch (the harmonised recipe: the table in
the README's "What it does"), described by a :class:`StepMechanism`:

1. per-example gradients of the cross-entropy loss, computed chunk by chunk;
2. each clipped to ``clip_norm`` in the flat norm ``clip_kind`` over all parameters
   (``"l2"`` Gaussian, ``"l1"`` Laplace, ``None`` non-private: no clipping), and summed;
3. noise ``noise_kind`` (``"gaussian"`` std / ``"laplace"`` scale = ``noise_scale``) added
   once to the sum, per coordinate;
4. divided by the *expected* batch size B = q N (never the actual size);
5. one optimizer step. An empty logical batch is a noise-only update.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from tqdm.auto import tqdm

from dpcore.accounting import PrivacyPlan, dpsgd_event, epsilon_pld, epsilon_rdp
from dpcore.augment import augment_batch, augment_rng, check_augment_data
from dpcore.config import AugmentSpec, PerfSpec, RunConfig
from dpcore.data.dataset import Dataset
from dpcore.data.images import as_float01
from dpcore.errors import ConfigError
from dpcore.mechanisms import get_mechanism
from dpcore.memory import PeakMemory, PeakMemoryWindow
from dpcore.recipes import step_divisor
from dpcore.sampling import batches_for, chunk_indices

if TYPE_CHECKING:
    from dpcore.frontcache import CachedInputs

#: Examples per forward pass when predicting (memory only; results do not depend on it).
PREDICT_BATCH_SIZE = 512

#: A physical chunk: model inputs (NHWC float32 images in [0, 1], or int token ids) and labels.
Chunk = tuple[np.ndarray, np.ndarray]

#: Called after every epoch with that epoch's history record; returning True stops training.
EpochCallback = Callable[[dict[str, Any]], bool | None]


@dataclass(frozen=True)
class StepMechanism:
    """How one logical batch's gradient is privatised (both backends obey it exactly).

    Attributes:
        clip_kind: ``"l2"`` (Gaussian DP-SGD), ``"l1"`` (Laplace DP-SGD) or ``None``
            (non-private: no per-example gradients, no clipping): the mechanism's
            :attr:`~dpcore.mechanisms.NoiseSampler.clip_norm`.
        clip_norm: C, the per-example bound in that norm.
        noise_kind: the name of the mechanism's :class:`~dpcore.mechanisms.NoiseSampler`
            (``"gaussian"``, ``"laplace"``; the key the backends look their step up by), or
            ``None`` (no noise).
        noise_scale: per-coordinate noise std (Gaussian) or scale b (Laplace), = sigma * C.
        noise_multiplier: sigma.
        expected_batch_size: B = q N, the divisor of the noised sum (unless the engine is
            handed another divisor, ``factors.normalisation``).
        microbatch_size: k, examples per clipped unit (``factors.microbatch_size``): the
            per-example gradients of k consecutive examples are averaged before clipping, as
            TF Privacy does with ``num_microbatches = batch / k``. 1 = per example.
    """

    clip_kind: str | None
    clip_norm: float
    noise_kind: str | None
    noise_scale: float
    noise_multiplier: float
    expected_batch_size: int
    microbatch_size: int = 1

    @property
    def private(self) -> bool:
        """True when gradients are clipped per example (DP-SGD)."""
        return self.clip_kind is not None


def step_mechanism(config: RunConfig, plan: PrivacyPlan) -> StepMechanism:
    """The :class:`StepMechanism` of a run: DP-SGD settings or the non-private step, broken
    as ``factors.fault`` says (:mod:`dpcore.audit.faults`; ``none`` for every honest run)."""
    from dpcore.audit.faults import apply_fault

    privacy = config.privacy
    batch = plan.batches.expected_batch_size
    sampler = get_mechanism(privacy.mechanism).sampler
    if sampler is None:
        return StepMechanism(None, math.inf, None, 0.0, 0.0, batch)
    # microbatch_size > 1 only where the mechanism allows it (dpcore.config refuses the rest)
    mechanism = StepMechanism(sampler.clip_norm, privacy.max_grad_norm, sampler.name,
                              plan.noise_multiplier * privacy.max_grad_norm,
                              plan.noise_multiplier, batch, config.factors.microbatch_size)
    return apply_fault(mechanism, config.factors.fault)  # factors.fault: audit checks only


class CanarySource(Protocol):
    """What the loop asks once per step for the audit's canaries
    (:class:`dpcore.audit.canaries.GradientCanaries`)."""

    def step_gradient(self) -> dict[str, np.ndarray] | None:
        """This step's summed clipped canary gradients (neutral layout), None if none."""


class NoiseSource(Protocol):
    """What the loop asks once per step for the shared noise (``privacy.noise_source:
    shared``, :class:`dpcore.shared_noise.SharedNoise`)."""

    def step_noise(self, step: int) -> dict[str, np.ndarray]:
        """The noise vector of optimizer step ``step`` (1-based), neutral layout."""


def add_neutral(a: Mapping[str, np.ndarray] | None, b: Mapping[str, np.ndarray] | None
                ) -> dict[str, np.ndarray] | None:
    """The key-wise sum of two neutral-layout vectors (a missing key is zeros), float32;
    None when both are None."""
    if a is None and b is None:
        return None
    out = {k: np.asarray(v, np.float32) for k, v in (a or {}).items()}
    for key, value in (b or {}).items():
        value = np.asarray(value, np.float32)
        out[key] = out[key] + value if key in out else value
    return out


class StepEngine(Protocol):
    """What a backend implements; the driver owns the rest of training."""

    def train_step(self, chunks: Sequence[Chunk], divisor: float | None = None,
                   extra: Mapping[str, np.ndarray] | None = None) -> float:
        """One logical step over ``chunks`` (possibly none: a noise-only update).

        ``divisor``: of the noised sum, default the expected batch size B; the driver passes
        one only when ``factors.normalisation`` is not ``expected``.

        ``extra``: a vector in the neutral weight layout (keys of ``get_weights``; a missing
        key is zeros) that the engine adds to the clipped sum *before* the noise, as one more
        already-clipped record: the canary hook of the one-run audit
        (:class:`dpcore.audit.canaries.GradientCanaries`), and the path of the shared noise
        (``privacy.noise_source: shared``, :mod:`dpcore.shared_noise`; the engine's own noise
        is then zero). The driver passes it only in a step where a canary is sampled or the
        noise is shared.

        Returns:
            The sum over the batch's examples of their cross-entropy loss (nats) at the
            weights before the update; 0.0 for an empty batch.
        """

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        """Softmax probabilities [N, K] of one batch of model inputs, with the current weights."""

    def predict_outputs(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(logits, softmax probabilities), both float32 [N, K], of one batch of model inputs
        from one forward pass; the probabilities are exactly :meth:`predict_proba`'s."""

    def get_weights(self) -> dict[str, np.ndarray]:
        """The model's current weights in the neutral layout (float32 copies)."""

    def set_weights(self, weights: Mapping[str, np.ndarray]) -> None:
        """Load neutral-layout weights into the model (optimizer state is untouched)."""

    def close(self) -> None:
        """Release what the engine attached to the model (hooks, per-example buffers,
        gradients); the model keeps its weights. :func:`dpcore.pipeline.fit` calls it once
        training ends, however it ends; the engine is not used afterwards."""


class WeightEma:
    """Exponential moving average of the weights, kept in numpy (framework-neutral).

    Starts at the initial weights; after step t, ``ema <- d_t * ema + (1 - d_t) * w_t`` with
    ``d_t = ema_decay_at(t, decay)``. Kept in float64 so that long averages do not drift.
    """

    def __init__(self, initial: Mapping[str, np.ndarray], decay: float) -> None:
        self.decay = float(decay)
        self.average = {k: np.asarray(v, dtype=np.float64).copy() for k, v in initial.items()}

    def update(self, weights: Mapping[str, np.ndarray], step: int) -> None:
        """Fold in the weights after optimizer step ``step`` (1-based)."""
        d = ema_decay_at(step, self.decay)
        for key, avg in self.average.items():
            avg *= d
            avg += (1.0 - d) * np.asarray(weights[key], dtype=np.float64)

    def weights(self) -> dict[str, np.ndarray]:
        """The averaged weights as float32 arrays."""
        return {k: v.astype(np.float32) for k, v in self.average.items()}


@contextmanager
def evaluation_weights(engine: StepEngine, ema: WeightEma | None) -> Iterator[None]:
    """Within the block the model holds the evaluation weights (the EMA, if any); the training
    weights are restored afterwards."""
    if ema is None:
        yield
        return
    raw = engine.get_weights()
    engine.set_weights(ema.weights())
    try:
        yield
    finally:
        engine.set_weights(raw)


def ema_decay_at(step: int, decay: float) -> float:
    """Decay of the EMA update after optimizer step ``step`` (1-based).

    ``min(decay, (1 + step) / (10 + step))``: the warm-up of TensorFlow's
    ``ExponentialMovingAverage(num_updates=step)``, so that early averages are not dominated by
    the initial weights. Both backends use it (the decision is made here, not in a backend).
    """
    if step < 1:
        raise ConfigError(f"EMA step={step} must be >= 1")
    return float(min(decay, (1.0 + step) / (10.0 + step)))


def epsilon_spent(plan: PrivacyPlan, steps: int) -> float | None:
    """Epsilon of the first ``steps`` steps by the shared accountant.

    The mechanism's calibration accountant: RDP for Gaussian DP-SGD (as the plan's
    calibration), PLD for Laplace (RDP has no subsampled Laplace bound); ``inf`` for a
    non-private run and ``None`` for local DP (stated by the LDP layer) or before the first
    step.
    """
    known = get_mechanism(plan.mechanism)
    if known.non_private:
        return math.inf
    if not known.noises_gradients or steps < 1:
        return None
    event = dpsgd_event(plan.mechanism, plan.noise_multiplier, plan.batches.sampling_rate, steps)
    if known.calibration_accountant == "pld":
        return epsilon_pld(event, plan.delta)
    return epsilon_rdp(event, plan.delta)


def model_inputs(x: np.ndarray, task: str) -> np.ndarray:
    """What the models take: float32 images in [0, 1] (NHWC), or int token ids unchanged."""
    return as_float01(x) if task == "image" else x


def predict_in_batches(
    predict: Callable[[np.ndarray], np.ndarray], x: np.ndarray, task: str = "image",
    batch_size: int = PREDICT_BATCH_SIZE,
) -> np.ndarray:
    """``predict`` over ``x`` in batches, converting each batch with :func:`model_inputs`."""
    return np.concatenate(_batches(predict, x, task, batch_size), axis=0)


def predict_outputs_in_batches(
    predict: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]], x: np.ndarray,
    task: str = "image", batch_size: int = PREDICT_BATCH_SIZE,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`predict_in_batches` of a ``predict`` returning (logits, probabilities) per
    batch (:meth:`StepEngine.predict_outputs`): both, each concatenated."""
    parts = _batches(predict, x, task, batch_size)
    return (np.concatenate([logits for logits, _ in parts], axis=0),
            np.concatenate([proba for _, proba in parts], axis=0))


def _batches(predict: Callable[[np.ndarray], Any], x: np.ndarray, task: str,
             batch_size: int) -> list[Any]:
    """``predict`` of each batch of ``x`` (converted by :func:`model_inputs`), in order."""
    if len(x) == 0:
        raise ConfigError("cannot predict on an empty array of inputs")
    return [predict(model_inputs(x[i:i + batch_size], task))
            for i in range(0, len(x), batch_size)]


def test_loss_and_accuracy(proba: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Mean cross-entropy (nats; probabilities floored at 1e-12) and top-1 accuracy."""
    if not np.isfinite(proba).all():
        return math.nan, math.nan
    picked = np.clip(proba[np.arange(len(y)), y], 1e-12, 1.0)
    return float(-np.mean(np.log(picked))), float(np.mean(np.argmax(proba, axis=1) == y))


@dataclass
class TrainingOutcome:
    """What the loop produced; :mod:`dpcore.runrecord` turns it into a RunResult.

    Attributes:
        status: ``finished`` or ``diverged``.
        history: one record per epoch (see :func:`run_training`).
        steps_completed: optimizer steps taken.
        examples_seen: training examples processed (sum of actual batch sizes).
        epoch_seconds: wall-clock training seconds of each epoch (evaluation excluded).
        eval_seconds: wall-clock seconds of each epoch's test evaluation.
        total_seconds: wall-clock seconds of the whole loop.
        test_proba: final test probabilities (evaluation weights), ``None`` if diverged.
        test_logits: the logits ``test_proba`` is the softmax of (same forward pass), ``None``
            if diverged.
        weights: the final evaluation weights (EMA when enabled), neutral layout.
        stopped_early: True if a callback stopped training.
        diverged_at_step: the step whose loss was NaN/inf, if any.
        peak_memory: peak resident set size of the loop (:mod:`dpcore.memory`).
    """

    status: str
    history: list[dict[str, Any]]
    steps_completed: int
    examples_seen: int
    epoch_seconds: list[float]
    eval_seconds: list[float]
    total_seconds: float
    test_proba: np.ndarray | None
    weights: dict[str, np.ndarray]
    stopped_early: bool = False
    diverged_at_step: int | None = None
    peak_memory: PeakMemory | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    test_logits: np.ndarray | None = None

    @property
    def examples_per_second(self) -> float | None:
        """Training throughput over the epochs' training time (evaluation excluded)."""
        seconds = sum(self.epoch_seconds)
        return self.examples_seen / seconds if seconds > 0 else None


def _progress_enabled(progress: bool) -> bool:
    return bool(progress) and sys.stderr.isatty()


def training_chunks(
    x_train: np.ndarray, y_train: np.ndarray, indices: np.ndarray, chunk_size: int | None,
    task: str, augment: AugmentSpec | None = None, seed: int = 0, step: int = 1,
) -> list[Chunk]:
    """The physical chunks of one logical batch, as the step engine takes them.

    Without ``augment`` each chunk is sliced from the training arrays directly. With it, the
    whole logical batch is augmented once (:func:`dpcore.augment.augment_batch`, generator
    :func:`dpcore.augment.augment_rng` of ``(seed, step)``) and then split into the same
    chunks, so the images do not depend on ``perf.physical_batch_size``.

    Args:
        x_train, y_train: the training arrays (images or cached features, and labels).
        indices: the batch's example indices (from the shared sampler).
        chunk_size: at most this many examples per chunk; ``None``: one chunk.
        task: ``image`` or ``text`` (:func:`model_inputs`).
        augment: the run's augmentation, or ``None`` for none.
        seed: the run seed (augmentation only).
        step: 1-based number of the optimizer step this batch is for (augmentation only).
    """
    if augment is None or not augment.active:
        return [(model_inputs(x_train[part], task), y_train[part])
                for part in chunk_indices(indices, chunk_size) if len(part)]
    x_batch = augment_batch(x_train[indices], augment, augment_rng(seed, step))
    y_batch = y_train[indices]
    return [(model_inputs(x_batch[part], task), y_batch[part])
            for part in chunk_indices(np.arange(len(indices)), chunk_size) if len(part)]


def run_training(
    config: RunConfig, dataset: Dataset, perf: PerfSpec, plan: PrivacyPlan, engine: StepEngine,
    *, progress: bool = True, callbacks: Sequence[EpochCallback] = (),
    inputs: CachedInputs | None = None, canaries: CanarySource | None = None,
    noise: NoiseSource | None = None,
) -> TrainingOutcome:
    """Train ``engine``'s model for ``plan.batches.steps`` logical steps.

    Batches are ``batches_for(plan.batches, config.privacy.sampling, config.seed)``; each is
    split into chunks of at most ``perf.physical_batch_size`` examples. An epoch is
    ``steps_per_epoch`` steps (the last one may be shorter). After each epoch the test set is
    evaluated and one history record is appended:

    ``{"epoch", "step", "loss" (mean train cross-entropy over the epoch's examples, nats),
    "examples" (training examples seen in the epoch), "test_loss", "test_accuracy"
    (fraction), "epsilon_spent" (shared accountant after ``step`` steps), "seconds" (training
    time of the epoch), "eval_seconds"}``.

    A NaN/inf training loss stops the run with status ``diverged`` (no exception).

    With ``config.augment``, each training batch is augmented per example before it is
    chunked (:func:`training_chunks`); the test evaluation always uses the clean images.

    Args:
        config: the run's configuration (sampling, seed, EMA decay).
        dataset: training and test arrays.
        perf: physical chunk size.
        plan: the resolved privacy plan (steps, q, noise multiplier, delta).
        engine: the backend's step engine.
        progress: show a tqdm bar per epoch (only when stderr is a terminal).
        callbacks: called with each epoch's record; a True return stops training.
        inputs: the model's fixed front end already applied to both splits
            (:mod:`dpcore.frontcache`): the engine's model is then the head, trained and
            evaluated on these features in place of the data set's images (same order).
            Not with ``config.augment`` (the features of augmented images change each step).
        canaries: the audit's gradient canaries: asked once per step for the (clipped) canary
            gradient, which the engine adds to the clipped sum before the noise (``extra``).
        noise: the shared noise (``privacy.noise_source: shared``): the vector of each step
            is added to the clipped sum with the canaries' (``extra``); the engine was built
            with its own noise off (:func:`dpcore.shared_noise.framework_mechanism`).

    Raises:
        ConfigError: augmentation of a text data set or with too much padding
            (:func:`dpcore.augment.check_augment_data`), or together with cached ``inputs``.
    """
    augment = config.augment if config.augment.active else None
    check_augment_data(config.augment, dataset)
    if augment is not None and inputs is not None:
        raise ConfigError(
            "augment is set but the run was handed cached front-end features: augmented "
            "images change in every step, so their features cannot be computed once; valid: "
            "no cached inputs (dpcore.frontcache.front_to_cache gives () for such a run)"
        )
    batches = plan.batches
    task = dataset.task
    x_train, y_train = dataset.x_train, dataset.y_train
    x_test = dataset.x_test
    if inputs is not None:
        x_train, x_test = inputs.x_train, inputs.x_test
    ema_decay = config.train.ema_decay
    n_epochs = math.ceil(batches.steps / batches.steps_per_epoch)
    history: list[dict[str, Any]] = []
    epoch_seconds: list[float] = []
    eval_seconds: list[float] = []
    status, diverged_at, stopped = "finished", None, False
    examples_total = 0
    memory = PeakMemoryWindow()
    loop_start = time.perf_counter()

    ema = None if ema_decay is None else WeightEma(engine.get_weights(), ema_decay)
    step = 0
    last_logits: np.ndarray | None = None
    last_proba: np.ndarray | None = None
    batch_iter = batches_for(batches, config.privacy.sampling, config.seed)
    factors = config.factors
    k = factors.microbatch_size
    # chunks hold whole microbatches (a batch of a multiple of k is split on k boundaries); the
    # last shuffled batch of an epoch, when N is no multiple of B, loses its < k leftover
    # examples (TF Privacy, which needs whole microbatches, drops the whole partial batch)
    chunk_size = None if perf.physical_batch_size is None else max(
        perf.physical_batch_size // k * k, k)
    for epoch in range(1, n_epochs + 1):
        epoch_steps = min(batches.steps_per_epoch, batches.steps - step)
        loss_sum, examples = 0.0, 0
        bar = tqdm(total=epoch_steps, desc=f"epoch {epoch}/{n_epochs}", unit="step",
                   disable=not _progress_enabled(progress), leave=True, file=sys.stderr,
                   dynamic_ncols=True)
        start = time.perf_counter()
        for _ in range(epoch_steps):
            indices = next(batch_iter)
            if k > 1:  # a partial last shuffled batch: drop what fills no whole microbatch
                indices = indices[: len(indices) // k * k]
            chunks = training_chunks(x_train, y_train, indices, chunk_size, task, augment,
                                     config.seed, step + 1)
            step_args: dict[str, Any] = {}
            if factors.normalisation != "expected":
                step_args["divisor"] = step_divisor(
                    factors.normalisation, batches.expected_batch_size, len(indices), k)
            extra = None if canaries is None else canaries.step_gradient()
            if noise is not None:
                extra = add_neutral(extra, noise.step_noise(step + 1))
            if extra is not None:
                step_args["extra"] = extra
            batch_loss = float(engine.train_step(chunks, **step_args))
            step += 1
            if ema is not None:
                ema.update(engine.get_weights(), step)
            loss_sum += batch_loss
            examples += len(indices)
            bar.update(1)
            if examples:
                bar.set_postfix(loss=f"{loss_sum / examples:.4f}", refresh=False)
            if not math.isfinite(batch_loss):
                status, diverged_at = "diverged", step
                break
        seconds = time.perf_counter() - start
        examples_total += examples
        epoch_seconds.append(seconds)
        record: dict[str, Any] = {
            "epoch": epoch, "step": step,
            "loss": loss_sum / examples if examples else math.nan,
            "examples": examples, "seconds": seconds,
            "epsilon_spent": epsilon_spent(plan, step),
        }
        if status == "diverged":
            record.update(test_loss=math.nan, test_accuracy=math.nan, eval_seconds=0.0)
            eval_seconds.append(0.0)
        else:
            eval_start = time.perf_counter()
            with evaluation_weights(engine, ema):
                last_logits, last_proba = predict_outputs_in_batches(
                    engine.predict_outputs, x_test, task)
            test_loss, test_acc = test_loss_and_accuracy(last_proba, dataset.y_test)
            eval_seconds.append(time.perf_counter() - eval_start)
            record.update(test_loss=test_loss, test_accuracy=test_acc,
                          eval_seconds=eval_seconds[-1])
            if not math.isfinite(test_loss):
                status, diverged_at = "diverged", step
        history.append(record)
        eps = record["epsilon_spent"]
        bar.set_postfix({  # a dict keeps this order (keyword arguments are sorted by tqdm)
            "loss": f"{record['loss']:.4f}", "acc": f"{record['test_accuracy']:.4f}",
            "eps": "n/a" if eps is None else f"{eps:.3g}"}, refresh=False)
        bar.close()
        if status == "diverged":
            break
        stop_requested = [bool(cb(dict(record))) for cb in callbacks]
        if any(stop_requested):
            stopped = step < batches.steps
            break

    if ema is not None:
        engine.set_weights(ema.weights())  # the model keeps its evaluation weights
    weights = engine.get_weights()
    # The last epoch's evaluation used the final evaluation weights: its probabilities are the
    # final ones.
    finished = status == "finished"
    return TrainingOutcome(
        status=status, history=history, steps_completed=step, examples_seen=examples_total,
        epoch_seconds=epoch_seconds, eval_seconds=eval_seconds,
        total_seconds=time.perf_counter() - loop_start,
        test_proba=last_proba if finished else None,
        test_logits=last_logits if finished else None,
        weights=weights, stopped_early=stopped, diverged_at_step=diverged_at,
        peak_memory=memory.peak(),
    )


class LibraryRunner(Protocol):
    """A library's own training loop, one epoch at a time (``recipe: library``).

    The backend builds it from the library's public API (``model.fit`` / an Opacus
    ``make_private`` loop); the driver below owns evaluation, history and timing, so both
    recipes report through the same metrics contract.
    """

    steps_per_epoch: int
    sampling_rate: float

    def train_epoch(self, epoch: int) -> tuple[float, int]:
        """Run epoch ``epoch`` (1-based) the library's way; returns (summed loss, examples)."""

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        """Softmax probabilities [N, K] of one batch of model inputs."""

    def predict_outputs(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(logits, softmax probabilities) of one batch from one forward pass (as
        :meth:`StepEngine.predict_outputs`)."""

    def get_weights(self) -> dict[str, np.ndarray]:
        """The model's current weights in the neutral layout."""


def library_epochs(plan: PrivacyPlan) -> int:
    """Whole library epochs a ``library`` run trains: ``ceil(train.epochs)`` (or the epochs
    that ``train.steps`` amount to); a library loop has no fractional epoch."""
    return max(1, math.ceil(plan.batches.steps / plan.batches.steps_per_epoch))


def run_library_training(
    dataset: Dataset, plan: PrivacyPlan, runner: LibraryRunner, *, n_epochs: int,
    callbacks: Sequence[EpochCallback] = (),
) -> TrainingOutcome:
    """Train with a library's own loop for ``n_epochs`` epochs, evaluating after each.

    History records have the keys of :func:`run_training`'s; ``epsilon_spent`` is the shared
    accountant's epsilon of the steps the library took at the library's sampling rate.
    """
    history: list[dict[str, Any]] = []
    epoch_seconds: list[float] = []
    eval_seconds: list[float] = []
    status, diverged_at, stopped = "finished", None, False
    examples_total, step = 0, 0
    last_logits: np.ndarray | None = None
    last_proba: np.ndarray | None = None
    as_run = dataclass_replace_rate(plan, runner.sampling_rate)
    memory = PeakMemoryWindow()
    loop_start = time.perf_counter()
    for epoch in range(1, n_epochs + 1):
        start = time.perf_counter()
        loss_sum, examples = runner.train_epoch(epoch)
        seconds = time.perf_counter() - start
        step += runner.steps_per_epoch
        examples_total += examples
        epoch_seconds.append(seconds)
        eval_start = time.perf_counter()
        last_logits, last_proba = predict_outputs_in_batches(
            runner.predict_outputs, dataset.x_test, dataset.task)
        test_loss, test_acc = test_loss_and_accuracy(last_proba, dataset.y_test)
        eval_seconds.append(time.perf_counter() - eval_start)
        record = {"epoch": epoch, "step": step,
                  "loss": loss_sum / examples if examples else math.nan,
                  "examples": examples, "seconds": seconds,
                  "epsilon_spent": epsilon_spent(as_run, step),
                  "test_loss": test_loss, "test_accuracy": test_acc,
                  "eval_seconds": eval_seconds[-1]}
        history.append(record)
        if not (math.isfinite(record["loss"]) and math.isfinite(test_loss)):
            status, diverged_at = "diverged", step
            break
        if any([bool(cb(dict(record))) for cb in callbacks]):
            stopped = epoch < n_epochs
            break
    return TrainingOutcome(
        status=status, history=history, steps_completed=step, examples_seen=examples_total,
        epoch_seconds=epoch_seconds, eval_seconds=eval_seconds,
        total_seconds=time.perf_counter() - loop_start,
        test_proba=last_proba if status == "finished" else None,
        test_logits=last_logits if status == "finished" else None,
        weights=runner.get_weights(), stopped_early=stopped, diverged_at_step=diverged_at,
        peak_memory=memory.peak(),
    )


def dataclass_replace_rate(plan: PrivacyPlan, sampling_rate: float) -> PrivacyPlan:
    """``plan`` with its batch plan's sampling rate replaced (the rate a library ran at)."""
    from dataclasses import replace

    return replace(plan, batches=replace(plan.batches, sampling_rate=sampling_rate))
