"""MedMNIST npz files (``pneumoniamnist``, ``retinamnist``, ``medmnist:PATH``).

Keys ``train_images``, ``train_labels``, ``test_images``, ``test_labels`` (``val_*`` optional).
Gray images ``(N, H, W)`` gain a channel axis; labels may be ``(N,)`` or ``(N, 1)``
(multi-label files such as ChestMNIST are rejected).

The official **val** split: by default (``val='ignore'``) it is not used, so train and test are
exactly the official ones and results compare with published numbers; ``val='train'`` appends
it to the training split. ``Dataset.extra['val']`` records which.

For ``medmnist:PATH`` the classes are ``0..K-1`` with K from the ``n_classes`` option, else
one more than the largest label in any split.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dpcore.data.images import ensure_nhwc, to_pixel_dtype
from dpcore.data.loaders.base import Decoded, DecodeRequest, as_labels, check_split
from dpcore.data.loaders.npzfile import npz_shapes, read_npz
from dpcore.datasets import DatasetInfo
from dpcore.errors import DataError

REQUIRED = ("train_images", "train_labels", "test_images", "test_labels")
VAL_KEYS = ("val_images", "val_labels")
VAL_CHOICES = ("ignore", "train")


def _file(path: Path | None) -> Path:
    if path is None or not path.is_file():
        raise DataError(f"{path}: MedMNIST npz file not found")
    return path


def source_files(path: Path | None, info: DatasetInfo) -> list[Path]:
    return [_file(path)]


def decode(path: Path | None, request: DecodeRequest) -> Decoded:
    path = _file(path)
    val_mode = request.options.get("val", "ignore")
    if val_mode not in VAL_CHOICES:
        raise DataError(f"val={val_mode!r} is not valid; valid: {', '.join(VAL_CHOICES)}")
    arrays = read_npz(path, REQUIRED, VAL_KEYS)
    n_classes = request.info.n_classes or request.options.get("n_classes")
    splits = ["train", "test"] + (["val"] if all(k in arrays for k in VAL_KEYS) else [])
    labels = {s: as_labels(arrays[f"{s}_labels"], n_classes, f"{path} [{s}_labels]")
              for s in splits}
    if not n_classes:
        sizes = [int(y.max()) for y in labels.values() if y.size]
        if not sizes:
            raise DataError(
                f"{path}: holds no labelled examples (every split is empty); need at least one "
                "example in train and in test"
            )
        n_classes = max(sizes) + 1
    images = {}
    for s in splits:
        where = f"{path} [{s}_images]"
        images[s] = to_pixel_dtype(ensure_nhwc(arrays[f"{s}_images"], where), where)
        check_split(images[s], labels[s], where, s)
    x_train, y_train = images["train"], labels["train"]
    if "val" not in splits:
        val_note = "the file has no val split"
    elif val_mode == "train":
        if images["val"].shape[1:] != x_train.shape[1:]:
            raise DataError(
                f"{path}: val images are {images['val'].shape[1:]} but train images "
                f"{x_train.shape[1:]}; cannot merge val into train"
            )
        x_train = np.concatenate([x_train, images["val"]])
        y_train = np.concatenate([y_train, labels["val"]])
        val_note = f"official val split ({len(labels['val'])}) appended to train"
    else:
        val_note = f"official val split ({len(labels['val'])}) not used"
    class_names = request.info.class_names or tuple(str(i) for i in range(n_classes))
    return Decoded(
        x_train=x_train, y_train=y_train, x_test=images["test"], y_test=labels["test"],
        class_names=class_names, extra={"val": val_note},
    )


def split_sizes(path: Path, info: DatasetInfo) -> dict[str, int]:
    shapes = npz_shapes(_file(path))
    missing = [k for k in REQUIRED if k not in shapes]
    if missing:
        raise DataError(f"{path}: has no array {', '.join(missing)}")
    sizes = {"train": shapes["train_labels"][0], "test": shapes["test_labels"][0]}
    if "val_labels" in shapes:
        sizes["val"] = shapes["val_labels"][0]
    return sizes
