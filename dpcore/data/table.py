"""``dataset_table``: one row per registered data set for ``dpcompare datasets``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dpcore.data.loaders import get_loader
from dpcore.data.paths import locate, resolve_data_root
from dpcore.datasets import DATASETS
from dpcore.errors import DataError


def dataset_table(data_dir: str | Path | None = None) -> list[dict[str, Any]]:
    """Describe every registered data set as found (or not) under the data root.

    Split sizes come from file headers and file counts (no pixels are decoded); sizes of data
    sets that are not found are the documented ones.

    Args:
        data_dir: the data root (``--data-dir``); ``None`` uses the environment/default.

    Returns:
        Rows (in registry order) with the keys ``name``, ``task``, ``classes`` (count),
        ``class_names``, ``train``, ``test``, ``val`` (or None), ``sizes`` (``found`` or
        ``documented``), ``status`` (``built in``, ``found``, ``missing`` or ``unreadable``),
        ``found_at`` (path or None), ``how_to_get``, ``description``, ``options`` (loader
        options and their defaults) and ``error`` (why an unreadable entry failed, else None).

    Raises:
        DataError: if ``data_dir`` (or ``$DPCOMPARE_DATA_DIR``) names a missing folder.
    """
    root = resolve_data_root(data_dir)
    rows = []
    for info in DATASETS.values():
        row: dict[str, Any] = {
            "name": info.name,
            "task": info.task,
            "classes": info.n_classes,
            "class_names": list(info.class_names),
            "train": info.documented_sizes[0],
            "test": info.documented_sizes[1],
            "val": None,
            "sizes": "documented",
            "status": "missing",
            "found_at": None,
            "how_to_get": info.how_to_get.replace("<root>", str(root)),
            "description": info.description,
            "options": dict(info.options),
            "error": None,
        }
        found = None if info.builtin else locate(info, root)
        if info.builtin:
            row["status"] = "built in"
            row["found_at"] = info.how_to_get.removeprefix("built in: ")
        elif found is not None:
            row["status"], row["found_at"] = "found", str(found[0])
        if info.builtin or found is not None:
            try:
                sizes = get_loader(info.loader).split_sizes(found[0] if found else None, info)
            except DataError as exc:
                row["status"], row["error"] = "unreadable", str(exc)
            else:
                row.update(train=sizes["train"], test=sizes["test"], val=sizes.get("val"),
                           sizes="found")
        rows.append(row)
    return rows
