"""Input checks shared by the metric modules: shapes, ranges, label ranges.

Every check raises :class:`dpcore.errors.DataError` naming the argument, the bad value (or its
shape) and what would be valid.
"""

from __future__ import annotations

import numpy as np

from dpcore.errors import DataError

#: Slack allowed on [0, 1] range checks (float32 rounding of softmax / normalised maps).
RANGE_TOL = 1e-6


def as_proba(proba: np.ndarray, name: str = "proba") -> np.ndarray:
    """Return ``proba`` as a float64 array [N, K] (K >= 2) of finite values in [0, 1]."""
    arr = np.asarray(proba, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[1] < 2 or arr.shape[0] < 1:
        raise DataError(f"{name} must have shape [N, K] with N >= 1 and K >= 2; got {arr.shape}")
    check_unit_range(arr, name)
    return arr


def as_labels(y: np.ndarray, n: int, n_classes: int | None = None, name: str = "y") -> np.ndarray:
    """Return ``y`` as an int64 vector of length ``n`` with values in [0, n_classes)."""
    arr = np.asarray(y)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise DataError(f"{name} must be a vector of length {n}; got shape {arr.shape}")
    integral = np.issubdtype(arr.dtype, np.integer) or (
        np.issubdtype(arr.dtype, np.floating)
        and bool(np.all(np.isfinite(arr)))
        and bool(np.all(arr == np.round(arr)))
    )
    if not integral:
        raise DataError(f"{name} must hold integer class indices; got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    if n_classes is not None and arr.size and (arr.min() < 0 or arr.max() >= n_classes):
        bad = arr[(arr < 0) | (arr >= n_classes)][0]
        raise DataError(f"{name} holds class index {bad}; valid: 0..{n_classes - 1}")
    return arr


def check_unit_range(arr: np.ndarray, name: str) -> None:
    """Raise DataError unless every value of ``arr`` is finite and in [0, 1] (+- RANGE_TOL)."""
    if not np.all(np.isfinite(arr)):
        raise DataError(f"{name} holds non-finite values (NaN or inf); valid: finite in [0, 1]")
    if arr.size and (arr.min() < -RANGE_TOL or arr.max() > 1 + RANGE_TOL):
        raise DataError(
            f"{name} has values in [{arr.min():.6g}, {arr.max():.6g}]; valid: [0, 1]"
        )


def as_unit_vector(values: np.ndarray, name: str, n: int | None = None) -> np.ndarray:
    """Return ``values`` as a float64 vector (length ``n`` if given) with values in [0, 1]."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1 or (n is not None and arr.shape[0] != n) or arr.shape[0] < 1:
        want = f"length {n}" if n is not None else "length >= 1"
        raise DataError(f"{name} must be a vector of {want}; got shape {arr.shape}")
    check_unit_range(arr, name)
    return arr
