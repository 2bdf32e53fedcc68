"""What a loader receives and returns, and the checks every loader shares.

A loader is a module under :mod:`dpcore.data.loaders` with three functions:

* ``source_files(path, info) -> list[Path]``: the files its decode reads (the cache key).
* ``decode(path, request) -> Decoded``: read the native format into numpy arrays.
* ``split_sizes(path, info) -> dict[str, int]``: cheap sizes of the splits (file headers,
  file counts) for ``dpcompare datasets``, without decoding any pixels.

``path`` is the located file or folder (``None`` for built-in data sets).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dpcore.datasets import DatasetInfo
from dpcore.errors import DataError


@dataclass(frozen=True)
class DecodeRequest:
    """The options a decode must honour.

    Attributes:
        info: the registry entry.
        image_size: square side length to resize to, ``None`` to keep the size.
        channels: 1 or 3, ``None`` for the native channel count.
        split_seed: seed of any split the loader draws.
        options: the loader options (registry defaults updated with the caller's).
    """

    info: DatasetInfo
    image_size: int | None
    channels: int | None
    split_seed: int
    options: dict[str, Any]

    @property
    def target_channels(self) -> int:
        """Channels to decode image files to: the requested ones, else the native ones."""
        return self.channels or self.info.native_channels or 3

    @property
    def resample(self) -> str:
        return str(self.options.get("resample", "bilinear"))


@dataclass
class Decoded:
    """Arrays produced by a loader, before resizing, channel conversion and limits.

    ``class_names`` overrides the registry's (for ``medmnist:PATH``); ``extra`` is copied into
    ``Dataset.extra``. ``x_val``/``y_val``: a validation split, if the loader keeps one.
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    groups_train: np.ndarray | None = None
    groups_test: np.ndarray | None = None
    group_names: tuple[str, ...] | None = None
    class_names: tuple[str, ...] | None = None
    vocabulary_size: int | None = None
    extra: dict[str, str] = field(default_factory=dict)
    x_val: np.ndarray | None = None
    y_val: np.ndarray | None = None


def as_labels(y: np.ndarray, n_classes: int | None, where: str) -> np.ndarray:
    """Labels as ``int64`` of shape (N,); accepts (N,) or (N, 1) and whole-number floats.

    Args:
        y: the stored labels.
        n_classes: valid labels are ``0..n_classes-1``; ``None`` only checks they are >= 0.
        where: file (and key) named in errors.

    Raises:
        DataError: for another shape, non-integer values, or labels out of range.
    """
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1:
        raise DataError(
            f"{where}: labels have shape {y.shape}; valid: (N,) or (N, 1) class indices "
            "(multi-label sets are not supported)"
        )
    if np.issubdtype(y.dtype, np.floating):
        if not np.isfinite(y).all() or not np.array_equal(y, np.round(y)):
            raise DataError(f"{where}: labels are not whole numbers; valid: class indices")
    elif not np.issubdtype(y.dtype, np.integer):
        raise DataError(f"{where}: labels are {y.dtype}; valid: integer class indices")
    out = y.astype(np.int64)
    if out.size and (out.min() < 0 or (n_classes is not None and out.max() >= n_classes)):
        valid = f"0..{n_classes - 1}" if n_classes is not None else "integers >= 0"
        raise DataError(
            f"{where}: labels range over {int(out.min())}..{int(out.max())}; valid: {valid}"
        )
    return out


def check_split(x: np.ndarray, y: np.ndarray, where: str, split: str) -> None:
    """Raise DataError naming ``where`` if a split is empty or its counts disagree."""
    if len(x) == 0:
        raise DataError(f"{where}: the {split} split is empty; need at least one example")
    if len(x) != len(y):
        raise DataError(
            f"{where}: {split} has {len(x)} inputs but {len(y)} labels; counts must match"
        )


def require_dir(path: Path, what: str, how: str) -> Path:
    """Return ``path`` if it is a folder, else raise DataError naming it and the layout."""
    if not path.is_dir():
        raise DataError(f"{path}: expected {what} here; {how}")
    return path
