"""Chunks padded to their size class with zero-weight rows (dpcore.chunkpad)."""

from __future__ import annotations

import numpy as np
import pytest

from dpcore.chunkpad import pad_chunk, padded_size


def test_a_chunk_is_padded_to_its_size_class_with_zero_rows_of_weight_zero() -> None:
    x = np.arange(3 * 2 * 2, dtype=np.float32).reshape(3, 2, 2) + 1
    y = np.array([4, 5, 6], np.int64)
    size = padded_size(3, 16)
    assert size == 4  # 16 / 8 = 2: 3 rounds up to 4
    px, py, weights = pad_chunk(x, y, size)
    assert px.shape == (4, 2, 2) and px.dtype == x.dtype and py.dtype == y.dtype
    assert np.array_equal(px[:3], x) and not px[3].any()
    assert py.tolist() == [4, 5, 6, 0]
    assert weights.dtype == np.float32 and weights.tolist() == [1.0, 1.0, 1.0, 0.0]


def test_a_full_chunk_is_itself_with_weights_one() -> None:
    x, y = np.ones((16, 3), np.float32), np.zeros(16, np.int64)
    assert padded_size(16, 16) == 16
    px, py, weights = pad_chunk(x, y, 16)
    assert px is x and py is y and weights.tolist() == [1.0] * 16


def test_a_pad_size_below_the_chunk_is_refused_naming_both() -> None:
    with pytest.raises(ValueError, match="pad size 2 is smaller than the chunk of 3 examples"):
        pad_chunk(np.ones((3, 1)), np.zeros(3), 2)


def test_weighted_chunk_pads_and_weights_rows_by_class() -> None:
    """Padding rows keep weight 0 whatever their (zero) label's class weight; real rows get
    their class's weight; without padding or class weights the chunk is itself, weights 1."""
    from dpcore.chunkpad import weighted_chunk

    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    y = np.array([1, 0, 1])
    px, py, w = weighted_chunk(x, y, 5, (2.0, 0.5))
    assert px.shape == (5, 2) and list(py) == [1, 0, 1, 0, 0]
    np.testing.assert_array_equal(w, np.array([0.5, 2.0, 0.5, 0.0, 0.0], np.float32))
    assert w.dtype == np.float32
    same_x, same_y, ones = weighted_chunk(x, y, None, None)
    assert same_x is x and same_y is y
    np.testing.assert_array_equal(ones, np.ones(3, np.float32))
