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

The arrays a montage is drawn from are kept as :class:`MontageData` (one compressed npz per
montage, :func:`save_montage_data` / :func:`load_montage_data`, float16 pictures): the grid
runner computes them from the checkpoints and :func:`draw_montage` draws them, and a report
rebuilt from its committed records draws the same PNG from the same file, with no model.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from compare.figdigest import note_figure
from dpcore.errors import ConfigError
from dpcore.io import atomic_path, read_npz, write_npz

COLUMN_KEYS = ("title", "backend", "maps", "pred_class", "confidence")
#: Sub-folder of a results store that holds the montages, one folder per grid.
MONTAGES_FOLDER = "montages"
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


__all__ = ["COLUMN_KEYS", "MONTAGE_DATA_SUFFIX", "MontageData", "draw_montage",
           "grid_montage_folder", "load_montage_data", "safe_file_name", "saliency_montage",
           "save_montage_data"]


def safe_file_name(text: str) -> str:
    """``text`` with every run of characters other than letters, digits, ``_ . -`` made one
    ``_`` (a file or folder name on every platform)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)


def grid_montage_folder(store_root: str | Path, grid_name: str) -> Path:
    """Where the montages of grid ``grid_name`` live in a results store.

    One folder per grid: two grids that share a store (``mnist-library-benchmark`` and
    ``mnist-gap-attribution`` both use ``runs/mnist``) draw different columns for the same
    data set and model, so one grid's montage must never stand in another grid's report.
    """
    return Path(store_root) / MONTAGES_FOLDER / safe_file_name(grid_name)


#: File suffix of the stored arrays of a montage (the PNG's name with this suffix).
MONTAGE_DATA_SUFFIX = ".npz"
#: Data type of the stored pictures (images, inputs, maps in [0, 1]: float16 keeps about
#: three significant digits, far finer than the 256 grey levels or the colour map shown).
PICTURE_DTYPE = np.float16


@dataclass(frozen=True)
class MontageData:
    """Everything one montage PNG is drawn from (the arguments of :func:`saliency_montage`).

    Attributes:
        name: the PNG's file name in a report's ``montages/`` folder (e.g. ``mnist-cnn4.png``).
        images: the clean sample images [N, H, W, C] in [0, 1].
        columns: one dict per model as :func:`saliency_montage` takes them, plus ``run_id``
            (the run it explains; "" when unknown).
        class_names: name of each class index.
        title: the figure title (None: none).
        labels: the true class index of each image [N] (None: not known; montages stored
            before true labels were kept).
    """

    name: str
    images: np.ndarray
    columns: tuple[dict[str, Any], ...]
    class_names: tuple[str, ...]
    title: str | None = None
    labels: np.ndarray | None = None

    def quantised(self) -> MontageData:
        """The same montage with its pictures rounded to :data:`PICTURE_DTYPE` (what is
        stored): drawing from it gives the PNG a rebuild from the stored file gives."""
        images = np.asarray(self.images).astype(PICTURE_DTYPE)
        columns = []
        for col in self.columns:
            inputs = col.get("inputs")
            own = inputs is not None and not np.array_equal(np.asarray(inputs), self.images)
            columns.append({
                "title": str(col["title"]), "backend": str(col["backend"]),
                "run_id": str(col.get("run_id", "")),
                "maps": np.asarray(col["maps"]).astype(PICTURE_DTYPE),
                "pred_class": np.asarray(col["pred_class"]).astype(np.int64),
                "confidence": np.asarray(col["confidence"]).astype(np.float32),
                "inputs": np.asarray(inputs).astype(PICTURE_DTYPE) if own else None})
        labels = None
        if self.labels is not None:
            labels = np.asarray(self.labels)
            if not np.issubdtype(labels.dtype, np.integer):  # never truncated silently
                raise ConfigError(f"montage {self.name}: labels have dtype {labels.dtype}; "
                                  "need integer class indices")
            labels = labels.astype(np.int64)
        return MontageData(self.name, images, tuple(columns),
                           tuple(str(c) for c in self.class_names), self.title, labels)


def draw_montage(path: str | Path, data: MontageData) -> Path:
    """Draw ``data`` (quantised as stored, so that every path draws the same picture) into
    the PNG ``path``; the one drawing path of the grid runner and of a rebuilt report."""
    data = data.quantised()
    columns = [{**col, "inputs": col["inputs"] if col["inputs"] is not None else data.images}
               for col in data.columns]
    return saliency_montage(path, data.images, columns, data.class_names, title=data.title,
                            true_labels=data.labels)


def save_montage_data(path: str | Path, data: MontageData) -> Path:
    """Write ``data`` (quantised) as one compressed npz (:func:`dpcore.io.write_npz`;
    byte-identical for the same arrays); returns the path."""
    data = data.quantised()
    arrays: dict[str, np.ndarray] = {"images": data.images}
    if data.labels is not None:
        arrays["labels"] = data.labels
    meta_columns = []
    for i, col in enumerate(data.columns):
        arrays[f"c{i}_maps"] = col["maps"]
        arrays[f"c{i}_pred_class"] = col["pred_class"]
        arrays[f"c{i}_confidence"] = col["confidence"]
        if col["inputs"] is not None:
            arrays[f"c{i}_inputs"] = col["inputs"]
        meta_columns.append({"title": col["title"], "backend": col["backend"],
                             "run_id": col["run_id"], "own_inputs": col["inputs"] is not None})
    write_npz(path, arrays, {"name": data.name, "title": data.title,
                             "class_names": list(data.class_names), "columns": meta_columns},
              compressed=True)
    return Path(path)


def load_montage_data(path: str | Path) -> MontageData:
    """The montage stored at ``path`` by :func:`save_montage_data`.

    Raises:
        ConfigError: the file is missing, damaged or lacks a member (its path is named).
    """
    read = read_npz(path)
    if read is None:
        raise ConfigError(f"montage data {path} is missing or damaged; rebuild it with "
                          "`dpcompare compare` (which draws montages from the checkpoints)")
    arrays, meta = read
    try:
        columns = tuple(
            {"title": col["title"], "backend": col["backend"], "run_id": col["run_id"],
             "maps": arrays[f"c{i}_maps"], "pred_class": arrays[f"c{i}_pred_class"],
             "confidence": arrays[f"c{i}_confidence"],
             "inputs": arrays[f"c{i}_inputs"] if col["own_inputs"] else None}
            for i, col in enumerate(meta["columns"]))
        return MontageData(str(meta["name"]), arrays["images"], columns,
                           tuple(meta["class_names"]), meta["title"], arrays.get("labels"))
    except KeyError as exc:
        raise ConfigError(f"montage data {path} lacks {exc}; rebuild it with "
                          "`dpcompare compare`") from exc
