"""A PNG montage of a few images before and after local DP, at one or several noise levels.

Rows are sample images; the first column holds the originals, each further column one noise
level. Column headers name the level; every tile is titled with its PSNR (dB) against the
original. Tiles show values clipped to [0, 1] (display only; the data are not changed).
Drawn with matplotlib's object API (no pyplot state), written atomically.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from dpcore.errors import DataError
from dpcore.io import atomic_path
from dpcore.ldp.mechanisms import LdpMechanism
from dpcore.ldp.privatize import privatize_images
from dpcore.ldp.quality import psnr

_TILE_INCHES = 1.6


def level_columns(
    originals01: np.ndarray,
    indices: Sequence[int] | np.ndarray,
    split: str,
    mechanism: LdpMechanism,
    seed: int,
    levels: Sequence[float],
) -> list[tuple[str, np.ndarray]]:
    """Columns for other noise levels of ``mechanism`` (its :attr:`noise_param` set to each).

    Each image gets the same per-image Generator as in the privatised data set (same seed,
    split and index), so the columns differ only by the noise level.

    Returns:
        ``[(header, images01), ...]`` in the order of ``levels``.
    """
    columns = []
    for level in levels:
        variant = mechanism.with_noise_level(level)
        images = privatize_images(originals01, variant, seed, split, indices)
        columns.append((column_header(variant), images))
    return columns


def column_header(mechanism: LdpMechanism) -> str:
    """e.g. ``laplace b=1`` / ``gaussian sigma=0.5`` / ``dp_pix eps=1 (k=4, m=1)``."""
    level = mechanism.noise_level()
    if mechanism.name == "laplace":
        return f"laplace b={level:g}"
    if mechanism.name == "gaussian":
        return f"gaussian sigma={level:g}"
    params = mechanism.params()
    return f"{mechanism.name} eps={level:g} (k={params.get('k')}, m={params.get('m')})"


def save_montage(
    path: str | Path,
    originals01: np.ndarray,
    columns: Sequence[tuple[str, np.ndarray]],
    *,
    title: str | None = None,
) -> Path:
    """Draw originals and perturbed columns into one PNG.

    Args:
        path: destination ``.png`` (folder created if missing).
        originals01: NHWC originals in [0, 1], one row each.
        columns: ``(header, images)`` pairs, images of the same shape as ``originals01``.
        title: optional figure title.

    Returns:
        The path written.
    """
    originals01 = np.asarray(originals01)
    if originals01.ndim != 4 or len(originals01) == 0:
        raise DataError(f"montage: originals have shape {originals01.shape}; need NHWC, N >= 1")
    for header, images in columns:
        if np.shape(images) != originals01.shape:
            raise DataError(f"montage: column {header!r} has shape {np.shape(images)}; "
                            f"need {originals01.shape}")
    n_rows, n_cols = len(originals01), 1 + len(columns)
    fig = Figure(figsize=(_TILE_INCHES * n_cols, _TILE_INCHES * n_rows + (0.5 if title else 0.2)))
    FigureCanvasAgg(fig)
    axes = fig.subplots(n_rows, n_cols, squeeze=False)
    all_columns = [("original", originals01), *columns]
    for col, (header, images) in enumerate(all_columns):
        for row in range(n_rows):
            ax = axes[row][col]
            _show(ax, images[row])
            lines = [header] if row == 0 else []
            if col > 0:
                lines.append(f"PSNR {psnr(originals01[row], images[row]):.1f} dB")
            ax.set_title("\n".join(lines), fontsize=7)
    if title:
        fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    return _save_atomic(fig, Path(path))


def _show(ax: Axes, image: np.ndarray) -> None:
    shown = np.clip(np.asarray(image, dtype=np.float64), 0.0, 1.0)
    if shown.shape[-1] == 1:
        ax.imshow(shown[..., 0], cmap="gray", vmin=0.0, vmax=1.0, interpolation="nearest")
    else:
        ax.imshow(shown, interpolation="nearest")
    ax.set_xticks([])
    ax.set_yticks([])


def _save_atomic(fig: Figure, path: Path) -> Path:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    return path
