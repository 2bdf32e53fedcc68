"""Where data sets are looked for: the data root and each data set's candidate paths."""

from __future__ import annotations

import os
from pathlib import Path

from dpcore.datasets import DatasetInfo
from dpcore.errors import DataError

DATA_DIR_ENV = "DPCOMPARE_DATA_DIR"
DEFAULT_DATA_ROOT = Path("~/.dpcompare/data")


def resolve_data_root(cli_value: str | Path | None) -> Path:
    """The data root: ``--data-dir``, else ``$DPCOMPARE_DATA_DIR``, else ``~/.dpcompare/data``.

    The default need not exist (data sets are then reported missing, built-in ones still load).

    Raises:
        DataError: if the folder given by the option or the variable does not exist or is not
            a folder; the message names it and where it came from.
    """
    default = DEFAULT_DATA_ROOT.expanduser()
    if cli_value not in (None, "") and Path(cli_value).expanduser() == default:
        # The default root handed back in (e.g. by a caller that resolved it already): it need
        # not exist, as when it is the default.
        return default
    if cli_value not in (None, ""):
        path, origin = Path(cli_value), "--data-dir"
    elif os.environ.get(DATA_DIR_ENV):
        path, origin = Path(os.environ[DATA_DIR_ENV]), f"${DATA_DIR_ENV}"
    else:
        return DEFAULT_DATA_ROOT.expanduser()
    path = path.expanduser()
    if not path.is_dir():
        state = "is not a folder" if path.exists() else "does not exist"
        raise DataError(
            f"data directory {path} (from {origin}) {state}; valid: an existing folder holding "
            "the data sets (see `dpcompare datasets`)"
        )
    return path


#: Where ``pip install medmnist`` (its ``INFO``/``download=True``) saves the npz files.
MEDMNIST_HOME = Path("~/.medmnist")


def locate(info: DatasetInfo, root: Path) -> tuple[Path, str] | None:
    """The first existing candidate of ``info`` under ``root`` and its relative name, or None.

    A MedMNIST data set missing under ``root`` is also looked for where the ``medmnist``
    package saves it, ``~/.medmnist/<name>.npz`` (reported as its first candidate)."""
    for rel in info.candidates:
        path = root / rel
        if path.exists():
            return path, rel
    if info.loader == "medmnist" and info.candidates:
        saved = MEDMNIST_HOME.expanduser() / f"{info.name}.npz"
        if saved.is_file():
            return saved, info.candidates[0]
    return None


def missing_message(info: DatasetInfo, root: Path) -> str:
    """One line: which paths were looked at and how to get the data."""
    looked = ", ".join(str(root / rel) for rel in info.candidates)
    how = info.how_to_get.replace("<root>", str(root))
    return f"data set {info.name!r} not found: looked for {looked}; to get it: {how}"


def resolve_source(
    info: DatasetInfo, spec_path: str | None, data_dir: str | Path | None
) -> tuple[Path, str | None, Path | None]:
    """Locate the file or folder to load.

    Args:
        info: registry entry (for ``medmnist:PATH`` its only candidate is PATH).
        spec_path: ``DataSpec.path``; overrides the lookup under the data root.
        data_dir: ``--data-dir`` value or None.

    Returns:
        (path, candidate name or None, data root or None if none was needed).

    Raises:
        DataError: naming the expected path(s) and how to get the data.
    """
    if info.prefix is not None:
        given = Path(info.candidates[0]).expanduser()
        if given.exists():
            return given, None, None
        root = resolve_data_root(data_dir)
        if not given.is_absolute() and (root / given).exists():
            return root / given, None, root
        what = "a MedMNIST npz" if info.prefix == "medmnist" else "a folder of class folders"
        raise DataError(
            f"{info.name}: {given} not found (also looked at {root / given}); valid: "
            f"the path of {what}"
        )
    if spec_path:
        path = Path(spec_path).expanduser()
        if not path.exists():
            raise DataError(
                f"data.path={spec_path!r} does not exist; valid: the file or folder of "
                f"{info.name} ({info.how_to_get})"
            )
        return path, None, None
    root = resolve_data_root(data_dir)
    found = locate(info, root)
    if found is None:
        raise DataError(missing_message(info, root))
    return found[0], found[1], root
