"""Seeded batch selection shared by both backends: the samplers emit index arrays.

Both frameworks train on exactly the same sequence of index batches for a given seed, which
removes the libraries' sampling differences (Opacus: Poisson; TF Privacy: shuffled batches).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from dpcore.errors import ConfigError


@dataclass(frozen=True)
class BatchPlan:
    """How many logical batches a run takes and at what sampling rate.

    Attributes:
        n_examples: training set size N.
        expected_batch_size: B (Poisson: expected size; shuffle: fixed size).
        sampling_rate: q in (0, 1] (B / N unless given apart from the batch size).
        steps: number of logical batches (optimizer steps).
        steps_per_epoch: ceil(N / B) for shuffle, round(1 / q) for Poisson.
    """

    n_examples: int
    expected_batch_size: int
    sampling_rate: float
    steps: int
    steps_per_epoch: int

    @property
    def epochs(self) -> float:
        """Expected passes over the data: steps * q."""
        return self.steps * self.sampling_rate


def plan_batches(
    n_examples: int, batch_size: int, *, epochs: float | None = None, steps: int | None = None,
    sampling: str = "poisson", sampling_rate: float | None = None,
) -> BatchPlan:
    """Derive q, steps and steps per epoch from a data set size and batch settings.

    ``sampling_rate`` is q when it is given apart from the batch size (``dpcompare epsilon
    --sampling-rate``), in (0, 1]; default B / N. Poisson sampling takes ``round(1 / q)``
    steps per epoch, shuffling ``ceil(N / B)``; ``epochs`` become ``ceil(epochs * steps per
    epoch)`` steps (at least 1). This is the one rule of a step count.

    Raises:
        ConfigError: if the batch is larger than the data set or the counts are invalid.
    """
    if n_examples < 1:
        raise ConfigError(f"the training set has {n_examples} examples; need at least 1")
    if batch_size < 1 or batch_size > n_examples:
        raise ConfigError(
            f"train.batch_size={batch_size} is not valid for a training set of {n_examples} "
            f"examples; valid: 1..{n_examples}"
        )
    if (epochs is None) == (steps is None):
        raise ConfigError("give exactly one of epochs and steps")
    q = batch_size / n_examples if sampling_rate is None else sampling_rate
    if not 0.0 < q <= 1.0:
        raise ConfigError(f"sampling rate q={q!r} is not valid; valid: (0, 1]")
    if sampling == "poisson":
        steps_per_epoch = max(1, round(1.0 / q))
    elif sampling == "shuffle":
        steps_per_epoch = math.ceil(n_examples / batch_size)
    else:
        raise ConfigError(f"privacy.sampling={sampling!r} is not known; valid: poisson, shuffle")
    if steps is None:
        assert epochs is not None
        if epochs <= 0:
            raise ConfigError(f"train.epochs={epochs!r} must be > 0")
        steps = max(1, math.ceil(epochs * steps_per_epoch - 1e-9))
    elif steps < 1:
        raise ConfigError(f"train.steps={steps!r} must be >= 1")
    return BatchPlan(n_examples, batch_size, q, int(steps), steps_per_epoch)


def poisson_batches(
    n_examples: int, sampling_rate: float, steps: int, seed: int, *, start_step: int = 0
) -> Iterator[np.ndarray]:
    """Yield ``steps`` index arrays; each example joins each batch independently with prob. q.

    Batch sizes vary (Binomial(N, q)) and a batch may be empty. Indices in a batch are sorted
    and never repeat. Batch ``t`` depends only on (seed, t), so a run resumed at ``start_step``
    sees the same batches it would have seen.
    """
    if not 0.0 < sampling_rate <= 1.0:
        raise ConfigError(f"sampling rate q={sampling_rate!r} is not valid; valid: (0, 1]")
    for step in range(start_step, steps):
        rng = np.random.default_rng([seed, step, 0x5A3])
        mask = rng.random(n_examples) < sampling_rate
        yield np.flatnonzero(mask).astype(np.int64)


def shuffled_batches(
    n_examples: int, batch_size: int, steps: int, seed: int, *, drop_last: bool = False,
    start_step: int = 0,
) -> Iterator[np.ndarray]:
    """Yield ``steps`` index arrays of shuffled fixed-size batches, a new permutation each epoch.

    With ``drop_last=False`` the last batch of an epoch may be smaller. Indices never repeat
    within a batch (nor within an epoch).
    """
    if batch_size < 1 or batch_size > n_examples:
        raise ConfigError(f"batch_size={batch_size} is not valid; valid: 1..{n_examples}")
    per_epoch = n_examples // batch_size if drop_last else math.ceil(n_examples / batch_size)
    for step in range(start_step, steps):
        epoch, position = divmod(step, per_epoch)
        order = np.random.default_rng([seed, epoch, 0x5F1]).permutation(n_examples)
        yield np.sort(order[position * batch_size:(position + 1) * batch_size]).astype(np.int64)


def batches_for(plan: BatchPlan, sampling: str, seed: int, *, start_step: int = 0
                ) -> Iterator[np.ndarray]:
    """The index batches of a :class:`BatchPlan` under ``poisson`` or ``shuffle`` sampling."""
    if sampling == "poisson":
        return poisson_batches(plan.n_examples, plan.sampling_rate, plan.steps, seed,
                               start_step=start_step)
    if sampling == "shuffle":
        return shuffled_batches(plan.n_examples, plan.expected_batch_size, plan.steps, seed,
                                start_step=start_step)
    raise ConfigError(f"privacy.sampling={sampling!r} is not known; valid: poisson, shuffle")


def chunk_indices(indices: np.ndarray, chunk_size: int | None) -> list[np.ndarray]:
    """Split one logical batch into physical chunks of at most ``chunk_size`` examples."""
    if chunk_size is None or len(indices) <= chunk_size:
        return [indices]
    return [indices[i:i + chunk_size] for i in range(0, len(indices), chunk_size)]
