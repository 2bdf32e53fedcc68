"""Options and helpers shared by several sub-commands."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from dpcore.errors import DpCompareError
from dpcore.io import json_text


def add_engine_option(parser: argparse.ArgumentParser) -> None:
    """``--engine``: the DP step engine of both backends (performance only, not in the hash)."""
    from dpcore.config import ENGINES

    parser.add_argument(
        "--engine", choices=ENGINES, default=None,
        help="DP step engine of both backends: 'fast' (layer-wise clipping from one backward "
        "pass; a model layer without a rule is an error) or 'reference' (the library's "
        "per-example gradients: tf.vectorized_map / Opacus GradSampleModule); the same update, "
        "performance only, not part of the config hash (default: the grid's perf.engine, else "
        "fast where the model supports it, the fallback recorded in the result's perf)")


def add_data_dir_option(parser: argparse.ArgumentParser) -> None:
    """``--data-dir``: the data root (else $DPCOMPARE_DATA_DIR, else ~/.dpcompare/data)."""
    parser.add_argument(
        "--data-dir",
        default=None,
        help="folder holding the data sets (default: $DPCOMPARE_DATA_DIR, else ~/.dpcompare/data)",
    )


def table(rows: list[tuple[str, str]]) -> str:
    """``rows`` of (label, value) as aligned lines: every label padded to the longest one plus
    two spaces, so that no label runs into its value."""
    width = max((len(label) for label, _ in rows), default=0) + 2
    return "\n".join(f"{label:<{width}}{value}" for label, value in rows)


def print_json(obj: Any) -> None:
    """Print one JSON object on stdout (NaN/inf written as null)."""
    sys.stdout.write(json_text(obj))



def check_output_folder(path: str | Path, option: str, label: str | None = None) -> Path:
    """Fail fast if ``path`` cannot become a writable folder; nothing is created.

    Walks up to the nearest existing ancestor: it must be a folder we may write to (a regular
    file on the way, e.g. ``--out somefile/sub``, fails with the file named).

    Args:
        path: the folder to check.
        option: the option (or parameter) that sets it, named in the advice
            ("choose a folder you can write to with --out").
        label: what the message calls the folder (default: ``option``), e.g.
            ``"output folder"``.

    Raises:
        DpCompareError: ``"<label> <folder> is not writable: <why>; choose a folder you can
            write to with <option>"``.
    """
    target = Path(path).expanduser()
    probe = target
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    why = None
    if probe.exists() and not probe.is_dir():
        why = f"{probe} is a file, not a folder"
    elif probe.is_dir() and not os.access(probe, os.W_OK | os.X_OK):
        why = f"no write permission on {probe}"
    if why is not None:
        raise DpCompareError(f"{label or option} {target} is not writable: {why}; "
                             f"choose a folder you can write to with {option}")
    return target
