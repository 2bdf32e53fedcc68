"""Chunks padded to a fixed size with zero-weight rows, so that a compiled step sees a few
shapes instead of one per Poisson batch size. Framework-neutral (numpy).

A padded chunk carries a weight per row: 1 for a real example, 0 for a padding row (zero
inputs, label 0). The engines multiply each example's loss by its weight (the plain step's
summed loss, the reported loss) and each example's clip factor by it (the DP steps), so a
padding row's gradient contributes exactly nothing and its loss is excluded; the real rows'
sums differ from the unpadded chunk's only in the order of float additions (the batch axis
of each reduction is longer), i.e. to float rounding.
"""

from __future__ import annotations

import numpy as np

from dpcore.class_weights import row_weights
from dpcore.fastroutes import size_class


def padded_size(n: int, physical: int | None) -> int:
    """The size a chunk of ``n`` examples is padded to: its size class
    (:func:`dpcore.fastroutes.size_class`)."""
    return size_class(n, physical)


def pad_chunk(x: np.ndarray, y: np.ndarray, size: int
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(x, y, weights)`` with ``size - len(y)`` zero rows appended to ``x`` and ``y``, and
    float32 weights 1 for the given rows, 0 for the appended ones.

    Raises:
        ValueError: ``size`` smaller than the chunk.
    """
    n = len(y)
    if size < n:
        raise ValueError(f"pad size {size} is smaller than the chunk of {n} examples")
    weights = np.zeros(size, np.float32)
    weights[:n] = 1.0
    if size == n:
        return x, y, weights
    pad_x = np.zeros((size - n, *x.shape[1:]), x.dtype)
    pad_y = np.zeros(size - n, y.dtype)
    return np.concatenate([x, pad_x]), np.concatenate([y, pad_y]), weights


def weighted_chunk(x: np.ndarray, y: np.ndarray, pad_to: int | None,
                   class_weights: tuple[float, ...] | None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(x, y, weights)`` of one chunk as the engines step it: padded to ``pad_to`` rows with
    zero-weight rows (:func:`pad_chunk`) when given, else itself with weights 1; each row's
    weight then times its class's weight (``class_weights``: the non-private step's
    ``train.class_weights``, :func:`dpcore.class_weights.row_weights`; None: unchanged)."""
    if pad_to is not None:
        x, y, weights = pad_chunk(x, y, pad_to)
    else:
        weights = np.ones(len(y), np.float32)
    return x, y, row_weights(class_weights, y, weights)
