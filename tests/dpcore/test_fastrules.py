"""The fast engines' shared part: Book-Keeping's cost rule."""

from __future__ import annotations

import pytest

from dpcore.fastrules import use_ghost_norm


@pytest.mark.parametrize(("t", "p", "d", "kind", "ghost"), [
    (1, 512, 32, "l2", True),      # a dense layer on a vector: 2 < p d
    (196, 64, 16, "l2", False),    # cnn4's conv1 on 28x28: 2 * 196^2 > 1024
    (25, 256, 32, "l2", True),     # cnn4's conv2: 1250 < 8192
    (32, 32, 64, "l2", False),     # the boundary: 2 T^2 = p d is not cheaper
    (31, 32, 64, "l2", True),
    (1, 512, 32, "l1", False),     # L1 norms have no ghost form
])
def test_the_ghost_norm_exactly_where_two_t_squared_is_below_p_d(
        t: int, p: int, d: int, kind: str, ghost: bool) -> None:
    assert use_ghost_norm(t, p, d, kind) is ghost
