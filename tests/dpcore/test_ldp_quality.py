"""PSNR / SSIM against hand-computed values, and the montage PNG."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dpcore.errors import DataError
from dpcore.ldp import LaplaceMechanism
from dpcore.ldp.montage import level_columns, save_montage
from dpcore.ldp.privatize import privatize_images
from dpcore.ldp.quality import image_quality, psnr, ssim


def test_psnr_hand_computed() -> None:
    original = np.zeros((8, 8, 1))
    noisy = np.full((8, 8, 1), 0.1)  # MSE 0.01 -> 10 log10(1 / 0.01) = 20 dB
    assert psnr(original, noisy) == pytest.approx(20.0)
    assert psnr(original, original) == math.inf


def test_ssim_identical_is_one_and_noise_lowers_it() -> None:
    rng = np.random.default_rng(0)
    gray = rng.random((8, 8, 1))
    rgb = rng.random((10, 10, 3))
    assert ssim(gray, gray) == pytest.approx(1.0)
    assert ssim(rgb, rgb) == pytest.approx(1.0)
    assert ssim(rgb, rgb + rng.normal(0, 0.3, rgb.shape)) < 0.9
    assert ssim(np.zeros((5, 5, 1)), np.zeros((5, 5, 1))) == pytest.approx(1.0)  # 5x5 window
    assert math.isnan(ssim(np.zeros((2, 2, 1)), np.zeros((2, 2, 1))))


def test_image_quality_means_and_seeded_subset() -> None:
    rng = np.random.default_rng(1)
    x = rng.random((30, 8, 8, 1)).astype(np.float32)
    noisy = privatize_images(x, LaplaceMechanism(0.1), 0, "train")
    full = image_quality(x, noisy, max_images=100)
    expected = np.mean([psnr(x[i], noisy[i]) for i in range(30)])
    assert full["psnr_db"] == pytest.approx(expected)
    assert full["n_images"] == 30 and not full["subset"]
    sub = image_quality(x, noisy, max_images=10, seed=2)
    assert sub["n_images"] == 10 and sub["subset"]
    assert sub == image_quality(x, noisy, max_images=10, seed=2)
    with pytest.raises(DataError, match="one shape"):
        image_quality(x, noisy[:5])


def test_montage_png(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    x = rng.random((3, 8, 8, 3)).astype(np.float32)
    mech = LaplaceMechanism(0.5)
    rows = np.array([0, 4, 9])
    columns = [("laplace b=0.5", privatize_images(x, mech, 0, "train", rows))]
    columns += level_columns(x, rows, "train", mech, 0, [1.0, 2.0])
    assert [c[0] for c in columns] == ["laplace b=0.5", "laplace b=1", "laplace b=2"]
    # same per-image generator: the b=1 column is twice the b=0.5 noise
    assert np.allclose(columns[1][1] - x, 2 * (columns[0][1] - x), atol=1e-5)
    path = save_montage(tmp_path / "sub" / "m.png", x, columns, title="t")
    with Image.open(path) as image:
        assert image.format == "PNG"
        width, height = image.size
    assert width > height  # 4 columns, 3 rows
    with pytest.raises(DataError, match="shape"):
        save_montage(tmp_path / "bad.png", x, [("bad", x[:2])])
