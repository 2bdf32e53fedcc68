"""How visible the images still are after local DP: PSNR and SSIM against the originals.

Both use scikit-image (``peak_signal_noise_ratio`` and ``structural_similarity``) with
``data_range=1`` (images in [0, 1]; unclipped noisy images may leave that range, the range used
for the metric stays 1). Values are means over images, on a seeded subset for big sets.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from skimage.metrics import peak_signal_noise_ratio, structural_similarity

from dpcore.errors import DataError

#: SSIM window side skimage uses by default.
_SSIM_WIN = 7


def psnr(original01: np.ndarray, noisy01: np.ndarray) -> float:
    """PSNR in dB of one image (HWC) against its original, with data_range 1 (inf if equal)."""
    with np.errstate(divide="ignore"):
        return float(peak_signal_noise_ratio(
            np.asarray(original01, dtype=np.float64), np.asarray(noisy01, dtype=np.float64),
            data_range=1.0,
        ))


def ssim(original01: np.ndarray, noisy01: np.ndarray) -> float:
    """SSIM of one image (HWC) against its original, data_range 1 (channel_axis for RGB).

    The window is skimage's 7x7, shrunk to the largest odd side that fits smaller images;
    NaN for images under 3x3 pixels (SSIM is not defined there).
    """
    a = np.asarray(original01, dtype=np.float64)
    b = np.asarray(noisy01, dtype=np.float64)
    side = min(a.shape[0], a.shape[1])
    win = min(_SSIM_WIN, side if side % 2 else side - 1)
    if win < 3:
        return math.nan
    if a.shape[-1] == 1:
        return float(structural_similarity(a[..., 0], b[..., 0], data_range=1.0, win_size=win))
    return float(structural_similarity(a, b, data_range=1.0, win_size=win, channel_axis=-1))


def image_quality(
    original01: np.ndarray,
    noisy01: np.ndarray,
    *,
    max_images: int = 500,
    seed: int = 0,
) -> dict[str, Any]:
    """Mean PSNR (dB) and SSIM of perturbed images against their originals.

    Args:
        original01: NHWC originals in [0, 1].
        noisy01: NHWC perturbed images, same shape.
        max_images: use at most this many images, a seeded random subset when there are more.
        seed: seed of that subset.

    Returns:
        ``{"psnr_db", "ssim", "n_images", "subset"}`` (means over the images used; ``psnr_db``
        is inf if every image is unchanged).
    """
    if original01.shape != noisy01.shape or original01.ndim != 4:
        raise DataError(f"image_quality: originals {original01.shape} and perturbed "
                        f"{noisy01.shape} must be NHWC arrays of one shape")
    if max_images < 1:
        raise DataError(f"image_quality: max_images={max_images}; valid: an integer >= 1")
    n = len(original01)
    subset = n > max_images
    idx = (np.sort(np.random.default_rng(seed).choice(n, size=max_images, replace=False))
           if subset else np.arange(n))
    psnrs = [psnr(original01[i], noisy01[i]) for i in idx]
    ssims = [ssim(original01[i], noisy01[i]) for i in idx]
    return {
        "psnr_db": float(np.mean(psnrs)) if psnrs else math.nan,
        "ssim": float(np.mean(ssims)) if ssims else math.nan,
        "n_images": int(len(idx)),
        "subset": bool(subset),
    }
