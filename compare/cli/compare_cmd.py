"""``dpcompare compare``: run one grid identically on both backends and write its report.

Re-running the same command skips the runs already finished (keyed by config hash and backend)
and redoes any that were interrupted. At the end the report is written (see
``dpcompare report``).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

from compare.cli.common import add_data_dir_option, add_engine_option, check_output_folder
from compare.grid import expand_grid, load_grid_file, load_preset, preset_names
from compare.report import ReportContext, command_line, write_report
from compare.runner import run_grid
from dpcore.errors import ConfigError
from dpcore.results import run_id


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
    parser.add_argument("--recipe", choices=["harmonised", "library"], default=None,
                        help="set the recipe of every run (harmonised: the bench's one "
                             "algorithm; library: each library as its tutorials run it)")
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
    from dpcore.data import resolve_data_root

    raw = load_preset(args.preset) if args.preset else load_grid_file(args.config)
    backends = None
    if args.backends is not None:
        backends = [b.strip() for b in args.backends.split(",") if b.strip()]
        if not backends:
            raise ConfigError(f"--backends={args.backends!r} is empty; valid: tf, torch, tf,torch")
    overrides = [*args.overrides, *([f"recipe={args.recipe}"] if args.recipe else [])]
    grid = expand_grid(raw, seeds=args.seeds, backends=backends, overrides=overrides)
    if args.engine is not None:  # performance only: the runs (and their hashes) are the same
        grid = dataclasses.replace(grid, perf=dataclasses.replace(grid.perf, engine=args.engine))
    out = Path(args.out or Path("runs") / grid.name)
    # Inputs shared by every run are checked before any training (exit 2, nothing written).
    resolve_data_root(args.data_dir)  # a --data-dir / $DPCOMPARE_DATA_DIR that does not exist
    report_dir = Path(args.report or Path("reports") / grid.name)
    if not args.no_report:
        check_output_folder(report_dir, "--report")
    log = (lambda _msg: None) if args.quiet else print
    started = time.perf_counter()
    outcome = run_grid(grid, out, data_dir=args.data_dir, progress=not args.quiet, log=log)
    log(f"{grid.name}: {len(outcome.ran)} run(s) done, {len(outcome.skipped)} already finished, "
        f"{len(outcome.failed)} failed, {len(outcome.diverged)} diverged; results in {out}")
    if not args.no_report:
        context = ReportContext(
            command=command_line(), wall_seconds=time.perf_counter() - started,
            title=f"{grid.name}: TF Privacy vs Opacus", description=grid.description,
            notes=grid.notes, published=grid.published,
            run_ids=frozenset(run_id(cell.config.config_hash, backend)
                              for cell, backend in grid.runs()),
        )
        path = write_report(out, report_dir, context)
        log(f"report: {path}")
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
