"""``cats_vs_dogs``: the bundled npz, or a Kaggle folder of ``cat.N.jpg`` / ``dog.N.jpg``.

* npz (``cats_vs_dogs_filtered_64.npz``): keys ``x_train``, ``y_train``, ``x_test``,
  ``y_test`` (0 = cat, 1 = dog), used as stored (its ``names_*`` arrays are ignored). The
  test split is the source's ``validation/`` folder.
* folder: files named ``cat.<N>.<jpg|jpeg|png>`` / ``dog.<N>...`` directly in the folder (or in
  its ``train/`` sub-folder), sorted by class then N; other files are ignored. A seeded split
  stratified by class (``test_fraction``, default 0.2) makes train and test. Images are decoded
  to RGB unless ``data.channels=1``; sizes differ, so ``data.image_size`` must be set.
  Optional ``groups_csv``: a ``file,group`` CSV.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from dpcore.data.images import ensure_nhwc, to_pixel_dtype
from dpcore.data.loaders.base import Decoded, DecodeRequest, as_labels, check_split
from dpcore.data.loaders.folders import decode_labelled_files
from dpcore.data.loaders.npzfile import npz_shapes, read_npz
from dpcore.data.splits import split_counts, stratified_split
from dpcore.datasets import DatasetInfo
from dpcore.errors import DataError

NPZ_KEYS = ("x_train", "y_train", "x_test", "y_test")
_NAME = re.compile(r"^(cat|dog)\.(\d+)\.(?:jpe?g|png)$", re.IGNORECASE)
_CLASSES = ("cat", "dog")


def _labelled_files(folder: Path) -> list[tuple[Path, int]]:
    found = []
    for p in folder.iterdir():
        match = _NAME.match(p.name)
        if match and p.is_file():
            found.append((_CLASSES.index(match.group(1).lower()), int(match.group(2)), p))
    return [(p, label) for label, _, p in sorted(found)]


def _locate(path: Path) -> Path | tuple[Path, list[tuple[Path, int]]]:
    """The npz file to read, or (folder, its labelled image files)."""
    if path.is_file():
        if path.suffix == ".npz":
            return path
        raise DataError(f"{path}: not an npz file nor a folder of cat.N.jpg / dog.N.jpg")
    for folder in (path, path / "train"):
        if folder.is_dir():
            files = _labelled_files(folder)
            if files:
                return folder, files
    npzs = sorted(path.glob("*.npz"))
    if len(npzs) == 1:
        return npzs[0]
    if len(npzs) > 1:
        raise DataError(
            f"{path}: holds several npz files ({', '.join(p.name for p in npzs)}); "
            "set data.path to the one to load"
        )
    raise DataError(
        f"{path}: found no cat.N.jpg / dog.N.jpg images (here or in train/) and no npz file"
    )


def source_files(path: Path | None, info: DatasetInfo) -> list[Path]:
    assert path is not None
    located = _locate(path)
    return [located] if isinstance(located, Path) else [p for p, _ in located[1]]


def decode(path: Path | None, request: DecodeRequest) -> Decoded:
    assert path is not None
    located = _locate(path)
    if isinstance(located, Path):
        return _decode_npz(located, request)
    folder, files = located
    y = np.array([label for _, label in files], dtype=np.int64)
    for label, name in enumerate(_CLASSES):
        if not (y == label).any():
            raise DataError(f"{folder}: has no {name}.N image; need both cats and dogs")
    fraction = float(request.options["test_fraction"])
    train, test = stratified_split(y, fraction, request.split_seed)
    return decode_labelled_files(
        path, {"train": [files[i] for i in train], "test": [files[i] for i in test]}, request,
        extra={"split": f"seeded stratified split, test_fraction={fraction:g}, "
               f"split_seed={request.split_seed}"},
    )


def _decode_npz(path: Path, request: DecodeRequest) -> Decoded:
    if request.options.get("groups_csv"):
        raise DataError(f"{path}: groups_csv applies to a folder of cat.N.jpg / dog.N.jpg, "
                        "not to the npz")
    arrays = read_npz(path, NPZ_KEYS)
    out = {}
    for split in ("train", "test"):
        xk, yk = f"x_{split}", f"y_{split}"
        x = to_pixel_dtype(ensure_nhwc(arrays[xk], f"{path} [{xk}]"), f"{path} [{xk}]")
        y = as_labels(arrays[yk], request.info.n_classes, f"{path} [{yk}]")
        check_split(x, y, str(path), split)
        out[xk], out[yk] = x, y
    return Decoded(**out, extra={"split": "as stored in the npz (test = source validation/)"})


def split_sizes(path: Path, info: DatasetInfo) -> dict[str, int]:
    located = _locate(path)
    if isinstance(located, Path):
        shapes = npz_shapes(located)
        return {"train": shapes.get("y_train", (0,))[0], "test": shapes.get("y_test", (0,))[0]}
    n_train, n_test = split_counts(len(located[1]), float(info.options["test_fraction"]))
    return {"train": n_train, "test": n_test}

