"""One logical step of the harmonised recipe: the next seeded batch, cut into physical chunks,
its divisor and extra vector, and one ``StepEngine.train_step`` (:class:`LogicalSteps`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpcore.accounting import PrivacyPlan
from dpcore.audit.canary_records import CanaryRecords
from dpcore.augment import augment_batch, augment_rng
from dpcore.config import AugmentSpec, PerfSpec, RunConfig
from dpcore.predicting import model_inputs
from dpcore.recipes import step_divisor
from dpcore.sampling import batches_for, chunk_indices
from dpcore.stepengine import Chunk, StepEngine

#: The extra vector of step ``step`` (1-based) that the engine adds to the clipped sum before
#: the noise (see :meth:`dpcore.stepengine.StepEngine.train_step`), or None.
ExtraSource = Callable[[int], Mapping[str, np.ndarray] | None]

#: The audit's canary records of step ``step`` (1-based), which the engine clips with the
#: batch's examples (see :meth:`dpcore.stepengine.StepEngine.train_step`), or None.
CanarySourceFn = Callable[[int], CanaryRecords | None]


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
        task: ``image`` or ``text`` (:func:`dpcore.predicting.model_inputs`).
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


@dataclass
class LogicalSteps:
    """The logical batches of a run and how each becomes one engine step.

    Attributes:
        batches: the seeded index batches (:func:`dpcore.sampling.batches_for`), consumed one
            per step.
        x_train, y_train: the training arrays (images, or the cached front-end features).
        task: ``image`` or ``text``.
        chunk_size: examples per physical chunk (``perf.physical_batch_size`` rounded down to
            whole microbatches, at least one), or None for one chunk.
        microbatch_size: k (``factors.microbatch_size``).
        normalisation: ``factors.normalisation``.
        expected_batch_size: B = q N.
        augment: the run's augmentation, or None.
        seed: the run seed (augmentation).
    """

    batches: Iterator[np.ndarray]
    x_train: np.ndarray
    y_train: np.ndarray
    task: str
    chunk_size: int | None
    microbatch_size: int
    normalisation: str
    expected_batch_size: int
    augment: AugmentSpec | None
    seed: int

    @classmethod
    def of_run(cls, config: RunConfig, perf: PerfSpec, plan: PrivacyPlan, x_train: np.ndarray,
               y_train: np.ndarray, task: str) -> LogicalSteps:
        """The steps of ``config``'s run over ``x_train``/``y_train`` as ``plan`` sets them.

        Chunks hold whole microbatches (a batch of a multiple of k is split on k
        boundaries)."""
        k = config.factors.microbatch_size
        chunk_size = None if perf.physical_batch_size is None else max(
            perf.physical_batch_size // k * k, k)
        return cls(batches=batches_for(plan.batches, config.privacy.sampling, config.seed),
                   x_train=x_train, y_train=y_train, task=task, chunk_size=chunk_size,
                   microbatch_size=k, normalisation=config.factors.normalisation,
                   expected_batch_size=plan.batches.expected_batch_size,
                   augment=config.augment if config.augment.active else None,
                   seed=config.seed)

    def take(self, engine: StepEngine, step: int, extra: ExtraSource,
             canaries: CanarySourceFn | None = None) -> tuple[float, int]:
        """Optimizer step ``step`` (1-based): the next batch through ``engine.train_step``.

        With k > 1, the last shuffled batch of an epoch, when N is no multiple of B, loses its
        < k leftover examples (TF Privacy, which needs whole microbatches, drops the whole
        partial batch). The divisor is passed only when ``factors.normalisation`` is not
        ``expected``; ``extra(step)`` and ``canaries(step)`` only when they are not None
        (``canaries`` is asked once per step, after ``extra``).

        Returns:
            The batch's summed cross-entropy (nats) and its number of examples.
        """
        indices = next(self.batches)
        k = self.microbatch_size
        if k > 1:  # a partial last shuffled batch: drop what fills no whole microbatch
            indices = indices[: len(indices) // k * k]
        chunks = training_chunks(self.x_train, self.y_train, indices, self.chunk_size,
                                 self.task, self.augment, self.seed, step)
        step_args: dict[str, Any] = {}
        if self.normalisation != "expected":
            step_args["divisor"] = step_divisor(
                self.normalisation, self.expected_batch_size, len(indices), k)
        vector = extra(step)
        if vector is not None:
            step_args["extra"] = vector
        records = None if canaries is None else canaries(step)
        if records is not None:
            step_args["canaries"] = records
        return float(engine.train_step(chunks, **step_args)), len(indices)
