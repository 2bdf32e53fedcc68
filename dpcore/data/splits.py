"""Seeded train/test splits and seeded subsets (scikit-learn's stratified shuffle split).

Guarantees:

* Deterministic: the same labels, fraction and seed give the same indices on every run.
* Stratified when scikit-learn can stratify (every class has at least two members and each
  side gets at least one example per class); otherwise a seeded uniform random split.
* Returned indices are sorted, so a split keeps the source order of its examples.
"""

from __future__ import annotations

import math

import numpy as np

from dpcore.errors import DataError

#: Test fraction of the data sets that have no official split (80/20).
DEFAULT_TEST_FRACTION = 0.2


def split_counts(n: int, test_fraction: float = DEFAULT_TEST_FRACTION) -> tuple[int, int]:
    """(train, test) sizes of a seeded split of ``n`` examples: test = ceil(fraction * n).

    Raises:
        DataError: if ``n`` < 2 or the fraction is outside (0, 1).
    """
    if not 0.0 < test_fraction < 1.0:
        raise DataError(f"test_fraction={test_fraction!r} is out of range; valid: (0, 1)")
    if n < 2:
        raise DataError(f"cannot split {n} example(s) into train and test; need at least 2")
    n_test = min(max(1, math.ceil(test_fraction * n)), n - 1)
    return n - n_test, n_test


def stratified_split(
    y: np.ndarray, test_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Seeded split of ``range(len(y))`` into sorted train and test index arrays.

    Args:
        y: integer labels, shape (N,).
        test_fraction: share of examples in the test split, in (0, 1); the test split holds
            ``ceil(test_fraction * N)`` examples.
        seed: the split seed (``DataSpec.split_seed``).
    """
    n_train, n_test = split_counts(len(y), test_fraction)
    return _pick(y, n_train, n_test, seed)


def subset_indices(y: np.ndarray, limit: int | None, seed: int) -> np.ndarray:
    """Sorted indices of a seeded (stratified where possible) subset of ``limit`` examples.

    ``None`` or a limit >= N keeps every example.
    """
    n = len(y)
    if limit is None or limit >= n:
        return np.arange(n)
    if limit < 1:
        raise DataError(f"limit={limit!r} is out of range; valid: an integer >= 1")
    keep, _ = _pick(y, limit, n - limit, seed)
    return keep


def _pick(y: np.ndarray, n_first: int, n_second: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.model_selection import train_test_split  # deferred: slow to import

    idx = np.arange(len(y))
    try:
        first, second = train_test_split(
            idx, train_size=n_first, test_size=n_second, stratify=y, random_state=seed
        )
    except ValueError:  # a class too small to stratify: fall back to a plain seeded split
        first, second = train_test_split(
            idx, train_size=n_first, test_size=n_second, random_state=seed
        )
    return np.sort(first), np.sort(second)
