"""Shared code of the loaders that read one image file per example from folders."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from dpcore.data.images import decode_image_files_kept
from dpcore.data.loaders.base import Decoded, DecodeRequest
from dpcore.data.loaders.groups import encode_groups, groups_from_csv
from dpcore.errors import DataError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff")


#: Skipped files named in ``extra["skipped"]`` (the count says how many more there are).
SKIPPED_SHOWN = 10


def _relative(path: Path, root: Path) -> str:
    """``path`` relative to the data set's folder ``root`` when it lies inside it."""
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


def image_files(folder: Path) -> list[Path]:
    """PNG/JPEG/BMP/TIFF files directly in ``folder`` (any suffix case), sorted by name."""
    return sorted(p for p in folder.iterdir()
                  if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)


def class_folder_files(
    folder: Path, class_dirs: Sequence[str], *, required: bool
) -> list[tuple[Path, int]]:
    """(file, label) pairs of ``folder/<class_dirs[label]>/*``, class by class.

    Raises:
        DataError: if ``required`` and a class folder is missing.
    """
    out: list[tuple[Path, int]] = []
    for label, name in enumerate(class_dirs):
        sub = folder / name
        if not sub.is_dir():
            if required:
                raise DataError(
                    f"{sub}: class folder missing; {folder} needs one sub-folder per class: "
                    f"{', '.join(class_dirs)}"
                )
            continue
        out += [(p, label) for p in image_files(sub)]
    return out


def decode_labelled_files(
    root: Path,
    files: dict[str, list[tuple[Path, int]]],
    request: DecodeRequest,
    extra: dict[str, str] | None = None,
    groups: list[str] | None = None,
    *,
    channels: int | None = None,
    skip_unreadable: bool = False,
) -> Decoded:
    """Decode the ``train`` and ``test`` file lists (and ``val``, if given, into ``x_val`` /
    ``y_val``) and attach labels and optional groups (train and test only).

    The splits are decoded in one pass, so mixed image sizes across splits are reported with
    file names. Groups come from ``groups`` (one name per file, train files first) or, if that
    is ``None``, from the ``groups_csv`` loader option (a ``file,group`` CSV); they are read
    before any image is decoded so that a bad group file fails fast.

    ``channels`` overrides ``request.target_channels``; with ``skip_unreadable`` a file that
    does not decode is left out (its example dropped from its split) and named in
    ``extra["skipped"]`` (relative to ``root``, sorted; the first :data:`SKIPPED_SHOWN`, then how
    many more) instead of raising.
    """
    train, test, val = files["train"], files["test"], files.get("val", [])
    paths = [p for p, _ in train] + [p for p, _ in test]
    groups_csv = request.options.get("groups_csv")
    if groups is None and groups_csv:
        groups = groups_from_csv(groups_csv, root, paths)
    every = paths + [p for p, _ in val]
    x, kept = decode_image_files_kept(every, channels or request.target_channels,
                                      request.image_size, request.resample,
                                      skip_unreadable=skip_unreadable)
    y = np.array([label for _, label in train + test + val], dtype=np.int64)[kept]
    n = int(kept[:len(train)].sum())
    m = int(kept[:len(paths)].sum())
    extra = dict(extra or {})
    if not kept.all():
        bad = sorted(_relative(p, root) for p, k in zip(every, kept, strict=True) if not k)
        shown = ", ".join(bad[:SKIPPED_SHOWN])
        more = f" and {len(bad) - SKIPPED_SHOWN} more" if len(bad) > SKIPPED_SHOWN else ""
        extra["skipped"] = (f"{len(bad)} unreadable file(s) of {len(every)} skipped "
                            f"(skip_unreadable): {shown}{more}")
    if groups is not None:
        groups = [g for g, k in zip(groups, kept[:len(paths)], strict=True) if k]
    decoded = Decoded(x_train=x[:n], y_train=y[:n], x_test=x[n:m], y_test=y[n:m], extra=extra)
    if "val" in files:
        decoded.x_val, decoded.y_val = x[m:], y[m:]
    if groups is not None:
        codes, names = encode_groups(groups)
        decoded.groups_train, decoded.groups_test = codes[:n], codes[n:]
        decoded.group_names = names
    return decoded
