"""``chest_xray``: the Kaggle layout ``ROOT/{train,val,test}/{NORMAL,PNEUMONIA}/*.jpeg``.

The Kaggle ``val`` folder (16 images) is merged into train; ``test`` is the official test set.
Images are decoded to gray (``L``) unless ``data.channels=3``; their sizes differ, so
``data.image_size`` must be set (a folder of mixed sizes without it is an error). Files are
read train first, then val (each by class, then file name). Optional ``groups_csv``: a
``file,group`` CSV.
"""

from __future__ import annotations

from pathlib import Path

from dpcore.data.loaders.base import Decoded, DecodeRequest, check_split, require_dir
from dpcore.data.loaders.folders import class_folder_files, decode_labelled_files
from dpcore.data.registry import DatasetInfo

CLASS_DIRS = ("NORMAL", "PNEUMONIA")
_LAYOUT = (
    "expected layout ROOT/{train,val,test}/{NORMAL,PNEUMONIA}/*.jpeg "
    "(Kaggle chest-xray-pneumonia)"
)


def _split_files(root: Path) -> dict[str, list[tuple[Path, int]]]:
    require_dir(root, "the chest_xray folder", _LAYOUT)
    out: dict[str, list[tuple[Path, int]]] = {}
    for split in ("train", "test"):
        folder = require_dir(root / split, f"the {split}/ folder", _LAYOUT)
        out[split] = class_folder_files(folder, CLASS_DIRS, required=True)
    val = root / "val"
    out["train"] += class_folder_files(val, CLASS_DIRS, required=False) if val.is_dir() else []
    return out


def source_files(path: Path | None, info: DatasetInfo) -> list[Path]:
    assert path is not None
    return [p for files in _split_files(path).values() for p, _ in files]


def decode(path: Path | None, request: DecodeRequest) -> Decoded:
    assert path is not None
    files = _split_files(path)
    for split in ("train", "test"):
        check_split(files[split], files[split], str(path / split), split)
    return decode_labelled_files(
        path, files, request, extra={"val": "Kaggle val/ folder merged into train"}
    )


def split_sizes(path: Path, info: DatasetInfo) -> dict[str, int]:
    return {split: len(files) for split, files in _split_files(path).items()}
