"""``dpcompare datasets``: list the data sets, where each was found, or how to get it."""

from __future__ import annotations

import argparse
from typing import Any

from compare.cli.common import add_data_dir_option, print_json


def add_parser(subparsers: Any) -> None:
    """Register the ``datasets`` sub-command."""
    parser = subparsers.add_parser(
        "datasets",
        help="list the data sets: task, classes, split sizes, where found or how to get them",
        description="List every registered data set with its task, number of classes and split "
        "sizes (read from the files when found, else the documented sizes), and the path it "
        "was found at or how to obtain it. Built-in sets (mnist5k, digits) need no data.",
    )
    add_data_dir_option(parser)
    parser.add_argument(
        "--json", action="store_true", help="print the rows as JSON instead of a table"
    )
    parser.add_argument(
        "--download", metavar="NAME",
        help="fetch data set NAME (mnist, pneumoniamnist, retinamnist, imdb-full) into the "
        "data root: published files, MD5-checked, resumable, nothing partial left under a "
        "final name",
    )
    parser.add_argument(
        "--download-url", metavar="URL", default=None,
        help="a mirror serving the files by name (default: $DPCOMPARE_DOWNLOAD_URL, else the "
        "published locations)",
    )
    parser.set_defaults(func=run)


def dry_run(args: argparse.Namespace) -> int:
    """``--dry-run``: the data root checked; nothing is opened or decoded."""
    from compare import api
    from dpcore.data import resolve_data_root
    from dpcore.datasets import DATASETS

    if getattr(args, "download", None):
        root = api.download(args.download, args.data_dir, dry_run=True)[0]
        print(f"dry run: would download {args.download} into {root}; nothing fetched")
        return 0
    root = resolve_data_root(args.data_dir)
    print(f"dry run: would list {len(DATASETS)} registered data sets, looking under {root}")
    return 0


def run(args: argparse.Namespace) -> int:
    """Print the data set table, or download one; returns 0 (errors raise DataError)."""
    from compare import api
    from dpcore.data import resolve_data_root

    if args.download:
        for path in api.download(args.download, args.data_dir, base_url=args.download_url):
            print(f"{args.download}: {path}")
        return 0
    root = resolve_data_root(args.data_dir)
    rows = api.dataset_rows(args.data_dir)
    if args.json:
        print_json({"data_root": str(root), "datasets": rows})
        return 0
    state = "" if root.is_dir() else " (does not exist: only built-in data sets load)"
    print(f"data root: {root}{state}")
    print(format_table(rows))
    return 0


def format_table(rows: list[dict[str, Any]]) -> str:
    """The rows as an aligned text table; the last column is the path or how to get the data."""
    header = ("name", "task", "classes", "train", "test", "status", "found at / how to get it")
    lines = []
    for row in rows:
        if row["status"] == "missing":
            where = row["how_to_get"]
        elif row["status"] == "unreadable":
            where = f"{row['found_at']}: {row['error']}"
        else:
            where = row["found_at"]
        sizes = (str(row["train"]), str(row["test"]))
        if row["sizes"] == "documented":
            sizes = tuple(f"({s})" for s in sizes)
        lines.append((row["name"], row["task"], str(row["classes"]), *sizes, row["status"], where))
    widths = [max(len(r[i]) for r in [header, *lines]) for i in range(len(header) - 1)]
    out = []
    for r in [header, *lines]:
        cells = [c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)]
        out.append("  ".join([*cells, r[-1]]))
    out.append("(sizes in parentheses are the documented ones; the files were not found)")
    from dpcore.data.download import DOWNLOADS

    out.append("by path: imagefolder:PATH (a folder of class folders), medmnist:PATH (an npz); "
               f"--download NAME fetches {', '.join(DOWNLOADS)}")
    return "\n".join(out)
