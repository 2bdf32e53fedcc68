"""A PNG montage of Grad-CAM saliency maps: sample images x (epsilon, backend) columns.

Layout: one panel (a matplotlib sub-figure titled with the backend) per backend, side by side,
in the order the backends first appear in ``columns``. Each panel has one row per sample image;
its first column shows the clean test image, each further column the Grad-CAM map of one model
(e.g. one epsilon, or the non-private model) overlaid on the input that model is evaluated on.
A model whose inputs differ from the clean images (a local-DP run: its privatised test images)
gets one more tile before its overlay, showing those inputs. Every clean image is titled with
its true class (when known), every overlay tile with the model's predicted class and its
confidence; the first row also carries the column title,
wrapped to the tile width. Drawn with matplotlib's object API on the Agg canvas (no pyplot
state), written atomically.

The report layer draws every montage here, from the arrays the grid runner stored
(:class:`compare.montage_data.MontageData`, :func:`draw_montage`): a report written from a
store and a report rebuilt from its committed records draw the same PNG from the same arrays,
with no model.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from compare.figdigest import note_figure
from compare.montage_data import MontageData
from dpcore.errors import ConfigError
from dpcore.io import atomic_path

COLUMN_KEYS = ("title", "backend", "maps", "pred_class", "confidence")
TILE_INCHES = 1.5
DPI = 100
OVERLAY_ALPHA = 0.45
OVERLAY_CMAP = "jet"
#: Characters per title line of a tile (7 pt text in a TILE_INCHES-wide tile).
TITLE_CHARS = 20


def saliency_montage(
    path: str | Path,
    images: np.ndarray,
    columns: Sequence[Mapping[str, Any]],
    class_names: Sequence[str],
    *,
    title: str | None = None,
    true_labels: Sequence[int] | np.ndarray | None = None,
) -> Path:
    """Draw inputs and their Grad-CAM overlays, one panel per backend, into one PNG.

    Args:
        path: destination ``.png`` (folder created if missing).
        images: the clean sample images [N, H, W, C] in [0, 1], C = 1 (shown grey) or 3; one
            row each (values are clipped to [0, 1] for display only).
        columns: one dict per model, each ``{"title": str, "backend": str, "maps": [N, H, W]
            in [0, 1], "pred_class": int [N] (indices into ``class_names``), "confidence":
            [N] in [0, 1]}`` and optionally ``"inputs"``: the [N, H, W, C] images the model
            was explained on (default: ``images``; a local-DP model's privatised images).
            Columns of one backend appear in the given order.
        class_names: name of each class index.
        title: optional figure title.
        true_labels: the true class index of each image [N] (None: unknown, not shown);
            each clean image is titled "true: NAME".

    Returns:
        The path written.

    Raises:
        ConfigError: an empty or malformed argument; the message names the column and the
            shape or value that does not fit.
    """
    pictures = _check_images(images)
    names = [str(name) for name in class_names]
    if not names:
        raise ConfigError("saliency_montage: class_names is empty; need one name per class")
    checked = [_check_column(i, col, pictures.shape[:3], len(names))
               for i, col in enumerate(columns)]
    truth = _check_labels(true_labels, len(pictures), len(names))
    for column in checked:
        if column["inputs"] is None or column["inputs"].shape != pictures.shape:
            if column["inputs"] is not None:
                raise ConfigError(f"saliency_montage: column {column['title']!r} has inputs of "
                                  f"shape {column['inputs'].shape}; need {pictures.shape} "
                                  "(the shape of images)")
            column["inputs"] = pictures
    if not checked:
        raise ConfigError("saliency_montage: columns is empty; need at least one saliency column")
    backends = list(dict.fromkeys(col["backend"] for col in checked))
    blocks = {b: [col for col in checked if col["backend"] == b] for b in backends}
    widths = [1 + sum(1 + _own_inputs(col, pictures) for col in blocks[b]) for b in backends]
    n_rows = len(pictures)

    fig = Figure(figsize=(TILE_INCHES * sum(widths),
                          TILE_INCHES * n_rows + 0.7 + (0.3 if title else 0.0)),
                 layout="constrained")
    FigureCanvasAgg(fig)
    panels = fig.subfigures(1, len(backends), squeeze=False, width_ratios=widths)[0]
    for panel, backend in zip(panels, backends, strict=True):
        panel.suptitle(f"backend: {backend}", fontsize=9)
        block = blocks[backend]
        axes = panel.subplots(n_rows, widths[backends.index(backend)], squeeze=False)
        for row in range(n_rows):
            _show(axes[row][0], pictures[row])
            heading = ["clean image"] if row == 0 else []
            if truth is not None:
                heading.append(_wrap(f"true: {names[int(truth[row])]}"))
            if heading:
                axes[row][0].set_title("\n".join(heading), fontsize=7)
            col = 1
            for column in block:
                inputs = column["inputs"]
                if _own_inputs(column, pictures):
                    _show(axes[row][col], inputs[row])
                    if row == 0:
                        axes[row][col].set_title(_wrap(f"input of {column['title']}"),
                                                 fontsize=7)
                    col += 1
                ax = axes[row][col]
                _show(ax, inputs[row], column["maps"][row])
                lines = [_wrap(column["title"])] if row == 0 else []
                label = names[int(column["pred_class"][row])]
                lines.append(_wrap(f"{label} ({float(column['confidence'][row]):.2f})"))
                ax.set_title("\n".join(lines), fontsize=7)
                col += 1
    if title:
        fig.suptitle(title, fontsize=10)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=DPI)
    note_figure(fig, path)
    return Path(path)


def _wrap(text: str) -> str:
    """``text`` broken into lines that fit one tile."""
    return "\n".join(textwrap.wrap(text, TITLE_CHARS)) or text


def _check_labels(labels: Sequence[int] | np.ndarray | None, n_images: int,
                  n_classes: int) -> np.ndarray | None:
    """``labels`` as an int array [n_images] of class indices, or None when unknown."""
    if labels is None:
        return None
    arr = np.asarray(labels)
    if arr.shape != (n_images,) or not np.issubdtype(arr.dtype, np.integer):
        raise ConfigError(f"saliency_montage: true_labels have shape {arr.shape} and dtype "
                          f"{arr.dtype}; need integers of shape ({n_images},), one per image")
    if arr.size and (arr.min() < 0 or arr.max() >= n_classes):
        raise ConfigError(f"saliency_montage: true_labels hold {int(arr.min())}.."
                          f"{int(arr.max())}, outside 0..{n_classes - 1} (the class indices)")
    return arr.astype(np.int64)


def _own_inputs(column: Mapping[str, Any], clean: np.ndarray) -> bool:
    """True if the column's model was explained on inputs other than the clean images."""
    inputs = column["inputs"]
    return inputs is not clean and not np.array_equal(inputs, clean)


def _check_images(images: np.ndarray) -> np.ndarray:
    arr = np.asarray(images, dtype=np.float64)
    if arr.ndim != 4 or len(arr) == 0 or arr.shape[-1] not in (1, 3):
        raise ConfigError(
            f"saliency_montage: images have shape {arr.shape}; need [N, H, W, C] with N >= 1 "
            "and C = 1 or 3"
        )
    if not np.all(np.isfinite(arr)):
        raise ConfigError("saliency_montage: images contain NaN or infinite values")
    return arr


def _check_column(
    index: int, column: Mapping[str, Any], map_shape: tuple[int, ...], n_classes: int
) -> dict[str, Any]:
    """One column validated and converted (strings, float maps, int classes)."""
    if not isinstance(column, Mapping):
        raise ConfigError(f"saliency_montage: column {index} is a {type(column).__name__}; "
                          f"need a dict with keys {', '.join(COLUMN_KEYS)}")
    missing = [key for key in COLUMN_KEYS if key not in column]
    if missing:
        raise ConfigError(f"saliency_montage: column {index} lacks {', '.join(missing)}; "
                          f"need keys {', '.join(COLUMN_KEYS)}")
    where = f"saliency_montage: column {index} ({column['title']!r}, {column['backend']!r})"
    maps = np.asarray(column["maps"], dtype=np.float64)
    if maps.shape != map_shape:
        raise ConfigError(f"{where}: maps have shape {maps.shape}; need {map_shape} "
                          "(one [H, W] map per image)")
    if not np.all(np.isfinite(maps)):
        raise ConfigError(f"{where}: maps contain NaN or infinite values")
    n = map_shape[0]
    pred = np.asarray(column["pred_class"])
    if pred.shape != (n,) or not np.issubdtype(pred.dtype, np.integer):
        raise ConfigError(f"{where}: pred_class has shape {pred.shape} and dtype {pred.dtype}; "
                          f"need {n} class indices")
    if np.any((pred < 0) | (pred >= n_classes)):
        raise ConfigError(f"{where}: pred_class {pred.tolist()} has a value outside "
                          f"0..{n_classes - 1} (the class_names indices)")
    conf = np.asarray(column["confidence"], dtype=np.float64)
    if conf.shape != (n,) or not np.all((conf >= 0.0) & (conf <= 1.0)):
        raise ConfigError(f"{where}: confidence has shape {conf.shape}; need {n} values in "
                          "[0, 1]")
    inputs = None
    if column.get("inputs") is not None:
        inputs = np.asarray(column["inputs"], dtype=np.float64)
        if inputs.ndim != 4 or inputs.shape[:3] != map_shape or not np.all(np.isfinite(inputs)):
            raise ConfigError(f"{where}: inputs have shape {inputs.shape}; need {map_shape} "
                              "plus a channel axis, finite values (the images explained)")
    return {"title": str(column["title"]), "backend": str(column["backend"]), "maps": maps,
            "pred_class": pred.astype(np.int64), "confidence": conf, "inputs": inputs}


def _show(ax: Axes, image: np.ndarray, saliency: np.ndarray | None = None) -> None:
    """The image (grey for one channel), with the saliency map over it when given."""
    shown = np.clip(image, 0.0, 1.0)
    if shown.shape[-1] == 1:
        ax.imshow(shown[..., 0], cmap="gray", vmin=0.0, vmax=1.0, interpolation="nearest")
    else:
        ax.imshow(shown, interpolation="nearest")
    if saliency is not None:
        ax.imshow(np.clip(saliency, 0.0, 1.0), cmap=OVERLAY_CMAP, vmin=0.0, vmax=1.0,
                  alpha=OVERLAY_ALPHA, interpolation="bilinear")
    ax.set_xticks([])
    ax.set_yticks([])


def draw_montage(path: str | Path, data: MontageData) -> Path:
    """Draw ``data`` (quantised as stored, so that every path draws the same picture) into
    the PNG ``path``; the one drawing path of a report, written from a store or rebuilt from
    its records."""
    data = data.quantised()
    columns = [{**col, "inputs": col["inputs"] if col["inputs"] is not None else data.images}
               for col in data.columns]
    return saliency_montage(path, data.images, columns, data.class_names, title=data.title,
                            true_labels=data.labels)


__all__ = ["COLUMN_KEYS", "DPI", "TILE_INCHES", "draw_montage", "saliency_montage"]
