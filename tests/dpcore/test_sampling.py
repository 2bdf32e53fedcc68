"""Seeded Poisson and shuffle sampling: sizes, determinism, no repeats."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpcore.errors import ConfigError
from dpcore.sampling import (
    batches_for,
    chunk_indices,
    plan_batches,
    poisson_batches,
    shuffled_batches,
)


def test_poisson_mean_batch_size_within_four_sigma() -> None:
    n, q, steps = 10_000, 0.01, 400
    sizes = np.array([len(b) for b in poisson_batches(n, q, steps, seed=7)])
    # The mean of `steps` Binomial(n, q) sizes has std sqrt(n q (1-q) / steps).
    sigma_of_mean = math.sqrt(n * q * (1 - q) / steps)
    assert abs(sizes.mean() - q * n) < 4 * sigma_of_mean
    # and the spread of single batches is binomial, not fixed
    assert sizes.std() > 0.5 * math.sqrt(n * q * (1 - q))


def test_poisson_same_seed_same_batches_and_other_seed_differs() -> None:
    a = list(poisson_batches(500, 0.1, 20, seed=1))
    b = list(poisson_batches(500, 0.1, 20, seed=1))
    c = list(poisson_batches(500, 0.1, 20, seed=2))
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))


def test_poisson_resume_gives_the_same_tail() -> None:
    full = list(poisson_batches(300, 0.05, 10, seed=3))
    tail = list(poisson_batches(300, 0.05, 10, seed=3, start_step=6))
    assert all(np.array_equal(x, y) for x, y in zip(full[6:], tail, strict=True))


def test_poisson_no_repeats_and_empty_batches_possible() -> None:
    batches = list(poisson_batches(20, 0.02, 200, seed=0))
    assert all(len(np.unique(b)) == len(b) for b in batches)
    assert any(len(b) == 0 for b in batches)
    assert all(b.dtype == np.int64 for b in batches)


def test_shuffle_covers_each_epoch_once_without_repeats() -> None:
    n, batch = 103, 10
    batches = list(shuffled_batches(n, batch, steps=2 * math.ceil(n / batch), seed=5))
    first_epoch = np.concatenate(batches[:11])
    assert sorted(first_epoch.tolist()) == list(range(n))
    assert all(len(np.unique(b)) == len(b) for b in batches)
    assert [len(b) for b in batches[:11]] == [10] * 10 + [3]
    again = list(shuffled_batches(n, batch, steps=22, seed=5))
    assert all(np.array_equal(x, y) for x, y in zip(batches, again, strict=True))
    # the second epoch is a new permutation
    assert not np.array_equal(batches[0], batches[11])


def test_plan_batches() -> None:
    plan = plan_batches(60000, 1024, epochs=15, sampling="poisson")
    assert plan.steps_per_epoch == 59
    assert plan.steps == 15 * 59
    assert plan.sampling_rate == pytest.approx(1024 / 60000)
    shuffle = plan_batches(100, 30, epochs=2, sampling="shuffle")
    assert shuffle.steps_per_epoch == 4 and shuffle.steps == 8
    assert plan_batches(100, 10, steps=7).steps == 7


@pytest.mark.parametrize("batch", [0, 101])
def test_batch_larger_than_data_is_rejected(batch: int) -> None:
    with pytest.raises(ConfigError, match=r"valid: 1\.\.100"):
        plan_batches(100, batch, epochs=1)


def test_batches_for_and_chunks() -> None:
    plan = plan_batches(50, 10, steps=3, sampling="shuffle")
    batches = list(batches_for(plan, "shuffle", seed=0))
    assert len(batches) == 3
    chunks = chunk_indices(np.arange(10), 4)
    assert [c.tolist() for c in chunks] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert len(chunk_indices(np.arange(3), None)) == 1
    with pytest.raises(ConfigError, match="sampling"):
        list(batches_for(plan, "weighted", seed=0))
