"""``aptos``: APTOS 2019 blindness detection, ``ROOT/train.csv`` + ``ROOT/train_images/*.png``.

``train.csv`` has the columns ``id_code,diagnosis`` (grade 0..4); row ``i`` names the image
``train_images/<id_code>.png``. Only the labelled Kaggle train set exists, so a seeded split
stratified by grade (``test_fraction``, default 0.2) makes train and test. Images are decoded to
RGB unless ``data.channels=1``; their sizes differ, so ``data.image_size`` must be set.

Groups: a CSV column named by the ``group_column`` option, else a column called ``group`` if
present, becomes ``Dataset.groups_*``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dpcore.data.loaders.base import Decoded, DecodeRequest, require_dir
from dpcore.data.loaders.folders import decode_labelled_files
from dpcore.data.loaders.groups import read_csv_rows
from dpcore.data.splits import split_counts, stratified_split
from dpcore.datasets import DatasetInfo
from dpcore.errors import DataError

CSV_NAME = "train.csv"
IMAGE_DIR = "train_images"
_LAYOUT = "expected ROOT/train.csv (id_code,diagnosis) and ROOT/train_images/<id_code>.png"


def _rows(root: Path, n_classes: int, group_column: str | None) -> tuple[
    list[Path], list[int], list[str] | None
]:
    """Image paths, grades and groups (or None) of every CSV row, checked."""
    require_dir(root, "the APTOS folder", _LAYOUT)
    csv_path = root / CSV_NAME
    if not csv_path.is_file():
        raise DataError(f"{csv_path}: file not found; {_LAYOUT}")
    rows, columns = read_csv_rows(csv_path, ("id_code", "diagnosis"))
    if group_column is None and "group" in columns:
        group_column = "group"
    if group_column is not None and group_column not in columns:
        raise DataError(
            f"{csv_path}: has no group column {group_column!r}; its columns: {', '.join(columns)}"
        )
    if not rows:
        raise DataError(f"{csv_path}: has no data rows; need one row per image")
    paths, labels, groups = [], [], []
    for line, row in enumerate(rows, start=2):
        text = (row["diagnosis"] or "").strip()
        if not text.isdigit() or int(text) >= n_classes:
            raise DataError(
                f"{csv_path} line {line}: diagnosis={text!r}; valid: 0..{n_classes - 1}"
            )
        image = root / IMAGE_DIR / f"{(row['id_code'] or '').strip()}.png"
        if not image.is_file():
            raise DataError(f"{csv_path} line {line} names {image}, which does not exist")
        paths.append(image)
        labels.append(int(text))
        if group_column is not None:
            groups.append((row[group_column] or "").strip())
    return paths, labels, (groups if group_column is not None else None)


def source_files(path: Path | None, info: DatasetInfo) -> list[Path]:
    assert path is not None
    return [path / CSV_NAME, *_rows(path, info.n_classes, None)[0]]


def decode(path: Path | None, request: DecodeRequest) -> Decoded:
    assert path is not None
    paths, labels, groups = _rows(path, request.info.n_classes,
                                  request.options.get("group_column"))
    y = np.array(labels, dtype=np.int64)
    fraction = float(request.options["test_fraction"])
    train, test = stratified_split(y, fraction, request.split_seed)
    order = np.concatenate([train, test])
    files = {"train": [(paths[i], labels[i]) for i in train],
             "test": [(paths[i], labels[i]) for i in test]}
    return decode_labelled_files(
        path, files, request,
        extra={"split": f"seeded stratified split of {CSV_NAME}, test_fraction={fraction:g}, "
               f"split_seed={request.split_seed}"},
        groups=None if groups is None else [groups[i] for i in order],
    )


def split_sizes(path: Path, info: DatasetInfo) -> dict[str, int]:
    require_dir(path, "the APTOS folder", _LAYOUT)
    rows, _ = read_csv_rows(path / CSV_NAME, ("id_code", "diagnosis"))
    n_train, n_test = split_counts(len(rows), float(info.options["test_fraction"]))
    return {"train": n_train, "test": n_test}
