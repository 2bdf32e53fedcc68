"""Optional group labels (site, sex, device...) for per-group metrics.

CSV loaders read a group column; folder loaders read a side CSV given by the ``groups_csv``
option, with columns ``file`` (path relative to the data set folder, or the bare file name)
and ``group``. Group values are strings, coded 0..G-1 in sorted order of their names.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from dpcore.errors import DataError


def encode_groups(values: Sequence[str]) -> tuple[np.ndarray, tuple[str, ...]]:
    """Code group names as ``int64`` 0..G-1 (sorted names) and return the names."""
    names = tuple(sorted(set(values)))
    index = {name: i for i, name in enumerate(names)}
    return np.array([index[v] for v in values], dtype=np.int64), names


def read_csv_rows(path: Path, required: Sequence[str]) -> tuple[list[dict[str, str]], list[str]]:
    """Rows of a CSV file with a header, and its column names.

    Raises:
        DataError: naming the file if it cannot be read or lacks a required column.
    """
    try:
        with path.open(newline="", encoding="utf-8-sig") as fh:
            reader = csv.DictReader(fh)
            columns = list(reader.fieldnames or [])
            missing = [c for c in required if c not in columns]
            if missing:
                raise DataError(
                    f"{path}: has no column {', '.join(missing)}; its columns: "
                    f"{', '.join(columns) or 'none'}; need: {', '.join(required)}"
                )
            rows = list(reader)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise DataError(f"{path}: not a readable CSV file ({exc})") from exc
    return rows, columns


def resolve_groups_csv(csv_path: str | Path, root: Path) -> Path:
    """The ``groups_csv`` file: as given (absolute or relative to the working directory), else
    relative to the data set folder ``root``.

    Raises:
        DataError: if neither exists.
    """
    csv_file = Path(csv_path).expanduser()
    if not csv_file.is_absolute() and not csv_file.exists():
        csv_file = root / csv_file
    if not csv_file.is_file():
        raise DataError(f"groups_csv={str(csv_path)!r}: file not found (looked at {csv_file})")
    return csv_file


def groups_from_csv(csv_path: str | Path, root: Path, files: Sequence[Path]) -> list[str]:
    """The group of each file in ``files``, read from a ``file,group`` CSV.

    A file is matched by its path relative to ``root`` (``/`` separators), else by its name.

    Raises:
        DataError: naming the CSV and the first file it gives no group for.
    """
    csv_file = resolve_groups_csv(csv_path, root)
    rows, _ = read_csv_rows(csv_file, ("file", "group"))
    table = {row["file"].strip().replace("\\", "/"): row["group"].strip() for row in rows}
    out: list[str] = []
    for path in files:
        rel = path.relative_to(root).as_posix() if path.is_relative_to(root) else path.name
        group = table.get(rel, table.get(path.name))
        if group is None:
            raise DataError(
                f"{csv_file}: gives no group for {rel}; every image needs a row (file,group)"
            )
        out.append(group)
    return out
