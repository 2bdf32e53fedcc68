"""Grad-CAM post-processing (dpcore.saliency) on hand-computed cases; no framework needed."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from dpcore.errors import ConfigError
from dpcore.saliency import (
    check_batch_size,
    check_images,
    is_constant,
    postprocess_cam,
    relu,
    resolve_targets,
    scale_to_unit,
    upsample_bilinear,
)

RAMP = np.array([[[0.0, 1.0], [2.0, 3.0]]])  # value = 2 * row + col


def test_relu_by_hand() -> None:
    np.testing.assert_array_equal(relu(np.array([[-2.0, 0.0], [0.5, -0.0]])),
                                  [[0.0, 0.0], [0.5, 0.0]])


def test_upsample_2x2_to_4x4_half_pixel_centres() -> None:
    # output pixel i samples (i + 0.5) / 2 - 0.5 = -0.25, 0.25, 0.75, 1.25 -> clamped to
    # 0, 0.25, 0.75, 1; the ramp is linear, so out = 2 * c[row] + c[col]
    c = np.array([0.0, 0.25, 0.75, 1.0])
    expected = 2.0 * c[:, None] + c[None, :]
    np.testing.assert_allclose(upsample_bilinear(RAMP, (4, 4))[0], expected, atol=1e-12)


def test_upsample_2x2_to_3x3() -> None:
    # (i + 0.5) * 2 / 3 - 0.5 = -1/6, 1/2, 7/6 -> clamped to 0, 1/2, 1
    c = np.array([0.0, 0.5, 1.0])
    np.testing.assert_allclose(upsample_bilinear(RAMP, (3, 3))[0],
                               2.0 * c[:, None] + c[None, :], atol=1e-12)


def test_upsample_non_square_and_per_map() -> None:
    maps = np.stack([RAMP[0], -RAMP[0]])
    out = upsample_bilinear(maps, (4, 2))  # rows upsampled, columns kept
    c = np.array([0.0, 0.25, 0.75, 1.0])
    expected = 2.0 * c[:, None] + np.array([0.0, 1.0])[None, :]
    np.testing.assert_allclose(out[0], expected, atol=1e-12)
    np.testing.assert_allclose(out[1], -expected, atol=1e-12)


def test_upsample_same_size_is_identity_and_1x1_is_constant() -> None:
    np.testing.assert_array_equal(upsample_bilinear(RAMP, (2, 2)), RAMP)
    np.testing.assert_array_equal(upsample_bilinear(np.full((1, 1, 1), 0.7), (5, 3)),
                                  np.full((1, 5, 3), 0.7))


@pytest.mark.parametrize("size", [(0, 4), (4,), (2.5, 4)])
def test_upsample_rejects_bad_sizes(size: tuple) -> None:
    with pytest.raises(ConfigError, match="size"):
        upsample_bilinear(RAMP, size)


def test_upsample_rejects_bad_maps() -> None:
    with pytest.raises(ConfigError, match=r"\[N, h, w\]"):
        upsample_bilinear(np.zeros((2, 2)), (4, 4))
    with pytest.raises(ConfigError, match="NaN"):
        upsample_bilinear(np.full((1, 2, 2), np.nan), (4, 4))


def test_scale_to_unit_min_max_per_map() -> None:
    maps = np.array([[[1.0, 3.0], [2.0, 5.0]], [[0.0, 0.0], [0.0, 2.0]]])
    out = scale_to_unit(maps)
    np.testing.assert_allclose(out[0], [[0.0, 0.5], [0.25, 1.0]])
    np.testing.assert_allclose(out[1], [[0.0, 0.0], [0.0, 1.0]])


@pytest.mark.parametrize("value", [0.0, 1.0, -3.0, 1e-30])
def test_constant_map_becomes_zeros(value: float) -> None:
    out = scale_to_unit(np.full((1, 3, 3), value))
    np.testing.assert_array_equal(out, np.zeros((1, 3, 3)))


def test_round_off_range_counts_as_constant() -> None:
    maps = np.full((1, 2, 2), 1000.0)
    maps[0, 0, 0] += 1e-5  # relative 1e-8: float round-off, not structure
    np.testing.assert_array_equal(scale_to_unit(maps), 0.0)


def test_postprocess_relu_then_scale() -> None:
    out = postprocess_cam(np.array([[[-1.0, 1.0], [0.0, 3.0]]]), (2, 2))
    assert out.dtype == np.float32
    np.testing.assert_allclose(out[0], [[0.0, 1.0 / 3.0], [0.0, 1.0]], rtol=1e-6)


def test_postprocess_upsamples_after_relu() -> None:
    # ReLU before upsampling: the -1 corner is 0 before interpolation, so the upsampled
    # map is the 2x2 -> 4x4 upsampling of [[0, 1], [0, 0]] scaled to [0, 1]
    out = postprocess_cam(np.array([[[-1.0, 1.0], [0.0, 0.0]]]), (4, 4))
    c = np.array([0.0, 0.25, 0.75, 1.0])
    expected = (1.0 - c[:, None]) * c[None, :]
    np.testing.assert_allclose(out[0], expected / expected.max(), atol=1e-7)


def test_postprocess_dead_and_constant_maps_are_zero() -> None:
    raw = np.stack([-np.ones((3, 3)), np.zeros((3, 3)), np.full((3, 3), 2.0)])
    out = postprocess_cam(raw, (6, 6))
    np.testing.assert_array_equal(out, 0.0)
    assert is_constant(out).all()


def test_postprocess_round_off_after_relu_is_zero() -> None:
    raw = -np.ones((1, 3, 3))
    raw[0, 1, 1] = 1e-9  # a positive speck relative 1e-9 to the map's scale
    np.testing.assert_array_equal(postprocess_cam(raw, (3, 3)), 0.0)


def test_is_constant() -> None:
    maps = np.zeros((3, 2, 2))
    maps[1, 0, 1] = 0.5
    maps[2] = 0.3
    np.testing.assert_array_equal(is_constant(maps), [True, False, True])


def test_check_images_converts_uint8_and_rejects_text_and_shapes() -> None:
    x = np.full((2, 4, 4, 1), 255, np.uint8)
    out = check_images(x, (4, 4, 1), "m")
    assert out.dtype == np.float32 and np.all(out == 1.0)
    with pytest.raises(ConfigError, match="image models only"):
        check_images(np.zeros((2, 40), np.int32), (40,), "textcnn")
    with pytest.raises(ConfigError, match=r"needs \[N, 4, 4, 1\]"):
        check_images(np.zeros((2, 4, 4, 3), np.float32), (4, 4, 1), "m")
    with pytest.raises(ConfigError, match="int64"):
        check_images(np.zeros((2, 4, 4, 1), np.int64), (4, 4, 1), "m")


def test_resolve_targets() -> None:
    def never() -> np.ndarray:
        raise AssertionError("predicted() must not be called when class_idx is given")

    np.testing.assert_array_equal(resolve_targets(None, 3, 5, lambda: np.array([4, 0, 1])),
                                  [4, 0, 1])
    np.testing.assert_array_equal(resolve_targets(2, 3, 5, never), [2, 2, 2])
    np.testing.assert_array_equal(resolve_targets(np.array([1, 0, 4]), 3, 5, never), [1, 0, 4])
    with pytest.raises(ConfigError, match=r"class_idx 5 is out of range; valid: 0..4"):
        resolve_targets(5, 3, 5, never)
    with pytest.raises(ConfigError, match="shape"):
        resolve_targets(np.array([1, 2]), 3, 5, never)
    with pytest.raises(ConfigError, match="dtype"):
        resolve_targets(np.array([1.0, 2.0, 0.0]), 3, 5, never)


@pytest.mark.parametrize("bad", [0, -1, 2.0, True])
def test_check_batch_size(bad: object) -> None:
    assert check_batch_size(8) == 8
    with pytest.raises(ConfigError, match="batch_size"):
        check_batch_size(bad)  # type: ignore[arg-type]


def test_saliency_module_loads_no_framework() -> None:
    code = (
        "import sys, dpcore.saliency; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'torch', 'keras')]; "
        "sys.exit(bool(bad))"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
