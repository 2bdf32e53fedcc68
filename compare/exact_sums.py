"""Norms and correlations whose value does not depend on the machine that computes them.

A report must rebuild to the same bytes from its records on any machine. NumPy's ``dot``,
``linalg.norm`` and ``corrcoef`` go through BLAS, which splits a long sum over its threads, so
the last digits of a printed figure follow the machine's core count (OpenBLAS takes
``OMP_NUM_THREADS``): framework-equivalence's relative weight difference came out as
0.00036841042168722404 with two BLAS threads and 0.0003684104216872241 with one. These
functions sum with :func:`math.fsum`, which rounds the exact sum once: the same bits on any
machine, thread count or BLAS build. Hand-written because NumPy and SciPy offer no such
reduction (``scipy.stats.pearsonr`` also calls BLAS).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["exact_norm", "exact_pearson"]


def exact_norm(values: np.ndarray) -> float:
    """Euclidean norm of ``values`` (any shape, as float64): ``sqrt`` of the sum of the
    (rounded) squares, that sum exactly rounded."""
    flat = np.asarray(values, np.float64).ravel()
    return math.sqrt(math.fsum(np.square(flat)))


def exact_pearson(first: np.ndarray, second: np.ndarray) -> float:
    """Pearson correlation of two equally long arrays (flattened, as float64), every sum
    exactly rounded; NaN when either is constant."""
    a = np.asarray(first, np.float64).ravel()
    b = np.asarray(second, np.float64).ravel()
    if a.size != b.size:
        raise ValueError(f"arrays of {a.size} and {b.size} values; valid: equal sizes")
    a = a - math.fsum(a) / a.size
    b = b - math.fsum(b) / b.size
    spread = math.sqrt(math.fsum(np.square(a))) * math.sqrt(math.fsum(np.square(b)))
    if not spread > 0:
        return math.nan
    return min(1.0, max(-1.0, math.fsum(a * b) / spread))  # rounding may step past +-1
