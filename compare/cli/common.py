"""Options and helpers shared by several sub-commands."""

from __future__ import annotations

import argparse
import sys
from typing import Any

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


def add_claim_options(parser: argparse.ArgumentParser, *, title: str, wait_help: str,
                      stale_subject: str = "claim") -> None:
    """``--claim-wait`` and ``--claim-stale-after`` (run claims: :mod:`dpcore.claims`), shared by
    ``train`` and ``compare``; ``title`` names the group, ``wait_help`` says what waiting means
    for the command, ``stale_subject`` what a stale claim is on (``claim``, ``claim on the
    run``)."""
    group = parser.add_argument_group(title)
    group.add_argument("--claim-wait", type=float, default=None, metavar="SECONDS",
                       help=wait_help)
    group.add_argument("--claim-stale-after", type=float, default=None, metavar="SECONDS",
                       help=f"another host's {stale_subject} with no heartbeat for this long "
                            "is dead and taken over (default 600; on this host a claim whose "
                            "process is gone is taken over at once)")
