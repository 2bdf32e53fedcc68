"""Seeded train/test splits and seeded subsets (scikit-learn's stratified shuffle split), and
a keyed split whose every example's side depends on that example alone (:func:`keyed_split`).

Guarantees:

* Deterministic: the same labels, fraction and seed give the same indices on every run.
* Stratified when scikit-learn can stratify (every class has at least two members and each
  side gets at least one example per class); otherwise a seeded uniform random split.
* Returned indices are sorted, so a split keeps the source order of its examples.
"""

from __future__ import annotations

import hashlib
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


#: The key of :func:`keyed_split` when the caller gives none. Public: the split needs no
#: secret, only independence from the data (anyone may recompute which side an example is on).
DEFAULT_SPLIT_KEY = b"dpcompare validation split v1"


def keyed_split(x: np.ndarray, y: np.ndarray, test_fraction: float,
                key: bytes = DEFAULT_SPLIT_KEY) -> tuple[np.ndarray, np.ndarray]:
    """Split ``range(len(y))`` into sorted (train, test) index arrays by a keyed hash of each
    example: example i is on the test side iff BLAKE2b-64(key; label i, bytes of x[i]) / 2**64
    < ``test_fraction``.

    The guarantee a stratified shuffle cannot give: an example's side is a function of that
    example (its label and its bytes) and the key only, so adding or removing one example moves
    no other example to the other side. A private selection scored on a split of private data
    (Papernot & Steinke 2022) needs exactly this: each neighbouring data set then differs in
    one example on one side only. The sides' sizes are random (binomial about
    ``test_fraction * N``, not stratified); equal examples fall on one side. Written here by
    hand: scikit-learn's splitters all permute the whole index set.

    Args:
        x: the examples, shape (N, ...); hashed as their C-order bytes and dtype.
        y: integer labels, shape (N,).
        test_fraction: expected share of examples on the test side, in (0, 1).
        key: the hash key (at most 64 bytes; :data:`DEFAULT_SPLIT_KEY` by default).

    Raises:
        DataError: the fraction is outside (0, 1), ``x`` and ``y`` differ in length, or one
            side is empty.
    """
    if not 0.0 < test_fraction < 1.0:
        raise DataError(f"test_fraction={test_fraction!r} is out of range; valid: (0, 1)")
    if len(x) != len(y):
        raise DataError(f"keyed_split: {len(x)} examples but {len(y)} labels; valid: as many "
                        "labels as examples")
    threshold = test_fraction * 2.0**64
    labels = np.asarray(y).astype(np.int64)
    dtype = str(np.asarray(x).dtype).encode()
    on_test = np.empty(len(y), dtype=bool)
    for i in range(len(y)):
        digest = hashlib.blake2b(dtype + labels[i].tobytes()
                                 + np.ascontiguousarray(x[i]).tobytes(),
                                 digest_size=8, key=key).digest()
        on_test[i] = int.from_bytes(digest, "big") < threshold
    test = np.flatnonzero(on_test)
    train = np.flatnonzero(~on_test)
    if len(test) == 0 or len(train) == 0:
        raise DataError(f"keyed_split of {len(y)} example(s) at test_fraction={test_fraction:g} "
                        f"left a side empty ({len(train)} train, {len(test)} test); valid: more "
                        "examples or a fraction further from 0 and 1")
    return train, test


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
