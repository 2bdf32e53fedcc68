"""``chest_xray``: the Kaggle layout ``ROOT/{train,val,test}/{NORMAL,PNEUMONIA}/*.jpeg``.

A thin preset of ``imagefolder:`` (:mod:`dpcore.data.loaders.imagefolder`): the given-split
layout with the class folders fixed to NORMAL, PNEUMONIA (both required, labels 0, 1; an
empty one is allowed), the Kaggle ``val`` folder (16 images) merged into train, ``test`` the
official test set. Images are decoded to gray (``L``) unless ``data.channels=3`` (the registry
sets the native channels; the folder's RGB JPEGs are converted); their sizes differ, so
``data.image_size`` must be set (a folder of mixed sizes without it is an error). Files are
read train first, then val (each by class, then file name). Optional ``groups_csv``: a
``file,group`` CSV.
"""

from __future__ import annotations

from pathlib import Path

from dpcore.data.loaders.base import Decoded, DecodeRequest, require_dir
from dpcore.data.loaders.imagefolder import FolderLayout, decode_layout, scan
from dpcore.datasets import DatasetInfo

CLASS_DIRS = ("NORMAL", "PNEUMONIA")
_LAYOUT = (
    "expected layout ROOT/{train,val,test}/{NORMAL,PNEUMONIA}/*.jpeg "
    "(Kaggle chest-xray-pneumonia)"
)


def _layout(root: Path) -> FolderLayout:
    require_dir(root, "the chest_xray folder", _LAYOUT)
    for split in ("train", "test"):
        require_dir(root / split, f"the {split}/ folder", _LAYOUT)
    return scan(root, "train", CLASS_DIRS)


def source_files(path: Path | None, info: DatasetInfo) -> list[Path]:
    assert path is not None
    return [p for files in _layout(path).files.values() for p, _ in files]


def decode(path: Path | None, request: DecodeRequest) -> Decoded:
    assert path is not None
    return decode_layout(path, _layout(path), request,
                         {"val": "Kaggle val/ folder merged into train"},
                         channels=request.target_channels)


def split_sizes(path: Path, info: DatasetInfo) -> dict[str, int]:
    return {split: len(files) for split, files in _layout(path).files.items()}
