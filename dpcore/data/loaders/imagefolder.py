"""``imagefolder:PATH``: a folder of class sub-folders, the layout of torchvision's
``ImageFolder`` and Keras's ``image_dataset_from_directory``.

Two layouts are recognised:

* ``PATH/CLASS/*``: every image of a class in its folder; the train/test split is drawn here,
  seeded by ``data.split_seed`` and stratified by class (:func:`dpcore.data.splits.
  stratified_split`), the test share being the ``test_fraction`` option (default 0.2);
* ``PATH/train/CLASS/*`` and ``PATH/test/CLASS/*``: the given split; a ``PATH/val/CLASS/*``
  folder is appended to train (option ``val: train``, the default, as ``chest_xray`` does),
  left out (``val: ignore``) or kept as the data set's validation split (``val: validation``:
  ``Dataset.x_val``/``y_val``, decoded with the same size and colour rules; the temperature of
  the calibrated faithfulness is then fitted on it).

Classes are the sorted folder names (of ``PATH``, or of ``PATH/train``), so label ``k`` is the
k-th name in sorted order, as ``ImageFolder`` does. Files: PNG, JPEG, BMP and TIFF (any
suffix case), read in sorted order. Images are decoded to gray when every file is gray and
``data.channels`` is not set, else RGB; ``data.channels`` (1 or 3) forces either. Images of
different sizes need ``data.image_size``. Files that disagree are never changed in silence:
``Dataset.extra["channels"]`` says how many files were grey and how many colour and what was
converted (``3 of 159 files are RGB, 156 grey: all converted to RGB; set data.channels: 1 to
keep grey``), ``extra["sizes"]`` how many sizes were resized to one (:mod:`dpcore.data.survey`);
``dpcompare train`` prints them in its start line and reports in their data line.
``Dataset.extra["files_sha256"]`` is a SHA-256 over every file's relative path, label and bytes
(the same folder anywhere gives the same value).

One-line errors name the folder or file: an empty class folder, a single class, a test class
unknown to train (or, with ``val: validation``, a val class unknown to train, or no
``val/`` folder), an unreadable image (skipped instead, and named in ``extra["skipped"]``, with
the option ``skip_unreadable: true``: shown where the other notes are), mixed sizes without
``data.image_size``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dpcore.data.loaders.base import Decoded, DecodeRequest, check_split, require_dir
from dpcore.data.loaders.folders import (
    IMAGE_SUFFIXES,
    class_folder_files,
    decode_labelled_files,
    image_files,
)
from dpcore.data.splits import split_counts, stratified_split
from dpcore.data.survey import channel_note, size_note, survey_images
from dpcore.datasets import DatasetInfo
from dpcore.errors import DataError

SPLIT_DIRS = ("train", "test")
VAL_CHOICES = ("train", "ignore", "validation")
_LAYOUT = "expected PATH/CLASS/* or PATH/{train,test}/CLASS/* (one sub-folder per class)"


@dataclass(frozen=True)
class FolderLayout:
    """What a scan of ``PATH`` found.

    Attributes:
        classes: class folder names in label order (sorted).
        files: ``{"all": [...]}`` (no given split) or ``{"train": [...], "test": [...]}``
            (and ``"val"`` with ``val: validation``): (file, label) pairs, by class then file
            name (val files appended to train with ``val: train``).
        val_note: what happened to a ``val/`` folder (empty when there is none).
    """

    classes: tuple[str, ...]
    files: dict[str, list[tuple[Path, int]]]
    val_note: str = ""

    @property
    def given_split(self) -> bool:
        """True for the ``PATH/{train,test}/CLASS/*`` layout."""
        return "train" in self.files


def _class_dirs(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))


def _labelled(folder: Path, classes: tuple[str, ...], names: list[str], *, fixed: bool = False
              ) -> list[tuple[Path, int]]:
    """(file, label) of ``folder/<name>/*`` for each name.

    An empty class folder is an error, unless the classes are ``fixed`` by a preset (then a
    missing class folder is the error, and an empty one is allowed, as ``chest_xray`` does).
    """
    if fixed:
        return class_folder_files(folder, names, required=True)
    out: list[tuple[Path, int]] = []
    for name in names:
        files = image_files(folder / name)
        if not files:
            raise DataError(
                f"{folder / name}: class folder holds no image; valid: at least one "
                f"{'/'.join(s.lstrip('.') for s in IMAGE_SUFFIXES)} file per class folder "
                "(or remove the folder)"
            )
        label = classes.index(name)
        out += [(p, label) for p in files]
    return out


def scan(root: Path, val: str = "train", classes: tuple[str, ...] | None = None
         ) -> FolderLayout:
    """Find the layout, the classes and the labelled files of ``root`` (no pixel decoded).

    Args:
        root: the folder.
        val: ``train`` (append ``val/`` to train), ``ignore``, or ``validation`` (keep it as
            ``files["val"]``; the folder is then required).
        classes: a preset's fixed class folder names in label order (``chest_xray``:
            NORMAL, PNEUMONIA; the given-split layout is then required); ``None`` finds them.

    Raises:
        DataError: one line naming the folder: not a folder, no class folders, one class
            only, an empty class folder, a test (or validation) class train lacks, a bad
            ``val`` option, or ``val: validation`` without a ``val/`` folder.
    """
    if val not in VAL_CHOICES:
        raise DataError(f"val={val!r} is not valid; valid: {', '.join(VAL_CHOICES)}")
    require_dir(root, "a folder of class folders", _LAYOUT)
    if classes is not None:
        return _fixed_scan(root, val, classes)
    top = _class_dirs(root)
    given = all(name in top for name in SPLIT_DIRS)
    base = root / "train" if given else root
    classes = tuple(_class_dirs(base))
    if not classes:
        raise DataError(f"{base}: holds no class folders; {_LAYOUT}")
    if len(classes) < 2:
        raise DataError(
            f"{base}: found one class folder ({classes[0]}); valid: at least 2 class folders "
            "(a classifier needs two classes)"
        )
    if val == "validation" and not (given and (root / "val").is_dir()):
        raise DataError(
            f"{root / 'val'}: val='validation' needs this folder (layout PATH/{{train,test,val}}"
            "/CLASS/*); valid: add it, or val: train / ignore"
        )
    if not given:
        return FolderLayout(classes, {"all": _labelled(root, classes, list(classes))})
    files = {"train": _labelled(base, classes, list(classes))}
    test_classes = _class_dirs(root / "test")
    unknown = [c for c in test_classes if c not in classes]
    if unknown:
        raise DataError(
            f"{root / 'test'}: class folder(s) {', '.join(unknown)} not in {base}; valid: "
            f"test classes among the train classes ({', '.join(classes)})"
        )
    files["test"] = _labelled(root / "test", classes, test_classes)
    note = ""
    if val == "validation":
        files["val"] = _validation_files(root / "val", classes)
        note = f"val/ folder ({len(files['val'])}) kept as the validation split"
    elif (root / "val").is_dir():
        val_files = _labelled(root / "val", classes,
                              [c for c in _class_dirs(root / "val") if c in classes])
        if val == "train":
            files["train"] += val_files
            note = f"val/ folder ({len(val_files)}) merged into train"
        else:
            note = f"val/ folder ({len(val_files)}) not used"
    return FolderLayout(classes, files, note)


def _validation_files(folder: Path, classes: tuple[str, ...]) -> list[tuple[Path, int]]:
    """(file, label) of ``folder/CLASS/*`` kept as the validation split: its classes must be
    among ``classes`` (the train split's), and it must hold at least one image."""
    found = _class_dirs(folder)
    unknown = [c for c in found if c not in classes]
    if unknown:
        raise DataError(
            f"{folder}: class folder(s) {', '.join(unknown)} not in the train split; valid: "
            f"validation classes among the train classes ({', '.join(classes)})"
        )
    files = _labelled(folder, classes, found)
    check_split(files, files, str(folder), "validation")
    return files


def _fixed_scan(root: Path, val: str, classes: tuple[str, ...]) -> FolderLayout:
    """The given-split layout with a preset's class folders (all required, empty allowed)."""
    files = {split: _labelled(root / split, classes, list(classes), fixed=True)
             for split in SPLIT_DIRS}
    note = ""
    if val == "validation":
        require_dir(root / "val", "the val/ folder (val: validation)", "or val: train / ignore")
        files["val"] = class_folder_files(root / "val", classes, required=False)
        check_split(files["val"], files["val"], str(root / "val"), "validation")
        note = f"val/ folder ({len(files['val'])}) kept as the validation split"
    elif (root / "val").is_dir():
        val_files = class_folder_files(root / "val", classes, required=False)
        if val == "train":
            files["train"] += val_files
        used = "merged into train" if val == "train" else "not used"
        note = f"val/ folder ({len(val_files)}) {used}"
    return FolderLayout(classes, files, note)


def decode_layout(root: Path, layout: FolderLayout, request: DecodeRequest,
                  extra: dict[str, str], *, channels: int, skip_unreadable: bool = False
                  ) -> Decoded:
    """Decode a scanned layout's given split (train, test), checking neither is empty."""
    for split in SPLIT_DIRS:
        check_split(layout.files[split], layout.files[split], str(root / split), split)
    return decode_labelled_files(root, layout.files, request, extra, channels=channels,
                                 skip_unreadable=skip_unreadable)


def files_sha256(root: Path, files: list[tuple[Path, int]]) -> str:
    """SHA-256 over each file's path relative to ``root``, its label and its bytes."""
    digest = hashlib.sha256()
    for path, label in files:
        digest.update(f"{path.relative_to(root).as_posix()}\0{label}\0".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _root(path: Path | None) -> Path:
    if path is None:
        raise DataError("imagefolder: no folder given; valid: imagefolder:PATH")
    return path


def source_files(path: Path | None, info: DatasetInfo) -> list[Path]:
    layout = scan(_root(path), str(info.options.get("val", "train")))
    return [p for files in layout.files.values() for p, _ in files]


def decode(path: Path | None, request: DecodeRequest) -> Decoded:
    root = _root(path)
    layout = scan(root, str(request.options.get("val", "train")))
    if layout.given_split:
        extra = {"split": "given (train/ and test/ folders)"}
    else:
        every = layout.files["all"]
        fraction = float(request.options.get("test_fraction", 0.2))
        labels = np.array([label for _, label in every], dtype=np.int64)
        train_idx, test_idx = stratified_split(labels, fraction, request.split_seed)
        layout = FolderLayout(layout.classes, {"train": [every[i] for i in train_idx],
                                               "test": [every[i] for i in test_idx]})
        extra = {"split": f"seeded stratified split, test_fraction={fraction:g}, "
                          f"split_seed={request.split_seed}"}
    if layout.val_note:
        extra["val"] = layout.val_note
    every_file = [f for split in ("train", "test", "val") for f in layout.files.get(split, [])]
    extra["files_sha256"] = files_sha256(root, every_file)
    skip = request.options.get("skip_unreadable", False)
    if not isinstance(skip, bool):
        raise DataError(f"skip_unreadable={skip!r} is not valid; valid: true or false")
    survey = survey_images(p for p, _ in every_file)
    channels = request.channels or survey.native_channels
    notes = {"channels": channel_note(survey, channels, forced=request.channels is not None),
             "sizes": size_note(survey, request.image_size)}
    extra.update({key: note for key, note in notes.items() if note})
    decoded = decode_layout(root, layout, request, extra, channels=channels,
                            skip_unreadable=skip)
    for split in (*SPLIT_DIRS, "val"):  # every file of a split may have been skipped
        x, y = getattr(decoded, f"x_{split}"), getattr(decoded, f"y_{split}")
        if x is not None and y is not None:
            check_split(x, y, str(root), "validation" if split == "val" else split)
    decoded.class_names = layout.classes
    return decoded


def split_sizes(path: Path, info: DatasetInfo) -> dict[str, int]:
    layout = scan(path, str(info.options.get("val", "train")))
    if layout.given_split:
        return {split: len(files) for split, files in layout.files.items()}
    n = len(layout.files["all"])
    n_train, n_test = split_counts(n, float(info.options.get("test_fraction", 0.2)))
    return {"train": n_train, "test": n_test}
