"""The arrays a saliency montage is drawn from (:class:`MontageData`), kept as one compressed
npz per montage (:func:`save_montage_data` / :func:`load_montage_data`, float16 pictures).

The grid runner computes them from the checkpoints (:mod:`compare.grid_montages`) and keeps
them in the store, a report's records keep them beside the report, and the report layer draws
each PNG from them (:func:`compare.reporting.montage.draw_montage`), so a report rebuilt from
its committed records draws the same PNG from the same file, with no model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dpcore.errors import ConfigError
from dpcore.io import read_npz, write_npz

#: Sub-folder of a results store that holds the montages, one folder per grid.
MONTAGES_FOLDER = "montages"


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
    """Everything one montage PNG is drawn from (the arguments of
    :func:`compare.reporting.montage.saliency_montage`).

    Attributes:
        name: the PNG's file name in a report's ``montages/`` folder (e.g. ``mnist-cnn4.png``).
        images: the clean sample images [N, H, W, C] in [0, 1].
        columns: one dict per model as :func:`compare.reporting.montage.saliency_montage`
            takes them, plus ``run_id`` (the run it explains; "" when unknown).
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


__all__ = ["MONTAGES_FOLDER", "MONTAGE_DATA_SUFFIX", "PICTURE_DTYPE", "MontageData",
           "grid_montage_folder", "load_montage_data", "safe_file_name", "save_montage_data"]
