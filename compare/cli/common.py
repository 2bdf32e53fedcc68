"""Options and helpers shared by several sub-commands."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def add_data_dir_option(parser: argparse.ArgumentParser) -> None:
    """``--data-dir``: the data root (else $DPCOMPARE_DATA_DIR, else ~/.dpcompare/data)."""
    parser.add_argument(
        "--data-dir",
        default=None,
        help="folder holding the data sets (default: $DPCOMPARE_DATA_DIR, else ~/.dpcompare/data)",
    )


def print_json(obj: Any) -> None:
    """Print one JSON object on stdout (NaN/inf written as null)."""
    json.dump(_finite(obj), sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


def _finite(obj: Any) -> Any:
    if isinstance(obj, float) and (obj != obj or obj in (float("inf"), float("-inf"))):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj
