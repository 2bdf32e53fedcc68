"""dpcore.data.splits.keyed_split: each example's side depends on that example alone, so a
neighbouring data set (one example added or removed) moves no other example; deterministic,
about the asked fraction, and clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from dpcore.data.splits import keyed_split, stratified_split
from dpcore.errors import DataError


def _images(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, 6, 6, 1), dtype=np.uint8), rng.integers(0, 2, n)


def _test_side(x: np.ndarray, y: np.ndarray) -> set[bytes]:
    _, test = keyed_split(x, y, 0.2)
    return {x[i].tobytes() + bytes([int(y[i])]) for i in test}


def test_removing_or_adding_one_example_moves_no_other() -> None:
    x, y = _images(500)
    full = _test_side(x, y)
    for removed in (0, 137, 499):  # a test-side or a train-side example, first and last
        keep = np.arange(500) != removed
        mine = x[removed].tobytes() + bytes([int(y[removed])])
        assert _test_side(x[keep], y[keep]) == full - {mine}
    extra_x, extra_y = _images(1, seed=9)
    grown = _test_side(np.concatenate([x, extra_x]), np.concatenate([y, extra_y]))
    assert grown - {extra_x[0].tobytes() + bytes([int(extra_y[0])])} == full


def test_the_stratified_shuffle_lacks_that_property() -> None:
    """Why the private selection cannot use stratified_split: one removal reshuffles it."""
    x, y = _images(500)
    _, test = stratified_split(y, 0.2, 0)
    keep = np.arange(500) != 3
    _, test_after = stratified_split(y[keep], 0.2, 0)
    before = {x[i].tobytes() for i in test if i != 3}
    after = {x[keep][i].tobytes() for i in test_after}
    assert len(before ^ after) > 10


def test_split_is_deterministic_sorted_disjoint_and_near_the_fraction() -> None:
    x, y = _images(4000)
    train, test = keyed_split(x, y, 0.2)
    again = keyed_split(x.copy(), y.copy(), 0.2)
    assert np.array_equal(train, again[0]) and np.array_equal(test, again[1])
    assert np.all(np.diff(train) > 0) and np.all(np.diff(test) > 0)
    assert not set(train) & set(test) and len(train) + len(test) == 4000
    # binomial(4000, 0.2): std 25.3; 800 +- 4 std
    assert 700 < len(test) < 900
    other_key = keyed_split(x, y, 0.2, key=b"another key")[1]
    assert not np.array_equal(test, other_key)


def test_equal_examples_share_a_side_and_label_and_dtype_count() -> None:
    x, y = _images(400)
    x[:100] = 0  # 100 equal blank images: each label's copies fall on one side together
    _, test = keyed_split(x, y, 0.5)
    on_test = np.isin(np.arange(400), test)
    for label in (0, 1):
        copies = on_test[:100][y[:100] == label]
        assert copies.all() or not copies.any()
    # the same pixels as float32 are other bytes, hence other examples: other sides
    assert not np.array_equal(test, keyed_split(x.astype(np.float32), y, 0.5)[1])
    assert not np.array_equal(test, keyed_split(x, 1 - y, 0.5)[1])


@pytest.mark.parametrize(("fraction", "n", "message"), [
    (0.0, 10, "out of range"), (1.0, 10, "out of range"), (0.2, 1, "left a side empty")])
def test_bad_inputs_are_named(fraction: float, n: int, message: str) -> None:
    x, y = _images(n)
    with pytest.raises(DataError, match=message):
        keyed_split(x, y, fraction)
    with pytest.raises(DataError, match="as many labels"):
        keyed_split(x, y[:0] if n > 1 else np.zeros(3, int), 0.2)
