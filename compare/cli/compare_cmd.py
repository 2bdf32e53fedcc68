"""``dpcompare compare``: run one grid identically on both backends and write its report.

Re-running the same command skips the runs already finished (keyed by config hash and backend)
and redoes any that were interrupted. At the end the report is written (see
``dpcompare report``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from compare import api
from compare.cli.common import add_data_dir_option, add_engine_option, check_output_folder
from compare.grid import load_grid_file, load_preset, preset_names
from compare.report import command_line
from dpcore.errors import ConfigError


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "compare", help="run a grid on both backends (TF Privacy and Opacus) and report",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--preset", help=f"a bundled grid: {', '.join(preset_names())}")
    source.add_argument("--config", metavar="FILE",
                        help="a grid file (base + axes) or a single run config")
    parser.add_argument("--backends", default=None,
                        help="comma-separated backends to run (default: the grid's, tf,torch)")
    parser.add_argument("--seeds", type=int, default=None,
                        help="number of seeds per cell (default: the grid's)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override a config key in every cell")
    parser.add_argument("--out", default=None,
                        help="results folder (default runs/<grid name>)")
    parser.add_argument("--report", default=None,
                        help="report folder (default reports/<grid name>)")
    add_engine_option(parser)
    parser.add_argument("--no-report", action="store_true", help="do not write the report")
    add_data_dir_option(parser)
    parser.add_argument("--quiet", action="store_true", help="no progress output")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    raw = load_preset(args.preset) if args.preset else load_grid_file(args.config)
    backends = None
    if args.backends is not None:
        backends = [b.strip() for b in args.backends.split(",") if b.strip()]
        if not backends:
            raise ConfigError(f"--backends={args.backends!r} is empty; valid: tf, torch, tf,torch")
    # Inputs shared by every run are checked before any training (exit 2, nothing written).
    if args.report and not args.no_report:
        check_output_folder(args.report, "--report")  # the message names this option
    store = api.compare(raw, out=args.out, backends=backends, seeds=args.seeds,
                        overrides=args.overrides, engine=args.engine, data_dir=args.data_dir,
                        report=False if args.no_report else (args.report or True),
                        progress=not args.quiet, command=command_line())
    outcome, out = store.outcome, store.root
    if outcome.failed:
        _report_failures(out, outcome.failed)
        return 1
    return 0


def _report_failures(out: Path, failed: list[str]) -> None:
    """One line on stderr (even with --quiet): how many runs failed and the first reason."""
    from dpcore.results import RESULT_FILE, read_result

    first = read_result(out / "runs" / failed[0] / RESULT_FILE)
    reason = first.error if first is not None and first.error else "see its result.json"
    print(f"dpcompare compare: error: {len(failed)} run(s) failed and were recorded as "
          f"'failed' in {out} (first, {failed[0]}: {' '.join(reason.split())}); finished runs "
          "are kept, re-running the command retries only the failed ones", file=sys.stderr)
