"""``dpcompare compare``: run one grid identically on both backends and write its report.

Every run not finished in --out is trained; re-running the same command skips the runs
already finished there (keyed by config hash and backend) and redoes any that were
interrupted. Committed records (reports/*/records) count as finished only with
--resume-from-records. At the end the report is written (see ``dpcompare report``), and runs
that also have a committed record are compared with it in one line.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from compare import api
from compare.cli.common import add_claim_options, add_data_dir_option, add_engine_option
from compare.executors import EXECUTORS
from compare.folders import check_output_folder
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
    parser.add_argument("--recipe", choices=["harmonised", "library"], default=None,
                        help="set the recipe of every run (harmonised: the bench's one "
                             "algorithm; library: each library as its tutorials run it)")
    parser.add_argument("--out", default=None,
                        help="results folder (default runs/<grid name>)")
    parser.add_argument("--report", default=None,
                        help="report folder (default reports/<grid name>)")
    add_engine_option(parser)
    parser.add_argument("--no-report", action="store_true", help="do not write the report")
    parser.add_argument("--no-train", action="store_true",
                        help="train nothing: write the report of the runs stored so far (an "
                             "interim report of a long grid; its header says how many runs "
                             "are missing); with --resume-from-records, of the committed "
                             "records too")
    parser.add_argument("--resume-from-records", nargs="?", const=True, default=False,
                        metavar="DIR",
                        help="count the runs whose final record is committed in "
                             "reports/*/records (or in the report folders of DIR, or the "
                             "report folder DIR) as finished: not retrained, reported from "
                             "that record. For continuing a long grid on another machine, or "
                             "rewriting a committed report without its store; by default "
                             "every run not finished in --out is trained")
    add_data_dir_option(parser)
    parser.add_argument("--quiet", action="store_true", help="no progress output")
    add_executor_options(parser)
    add_claim_options(
        parser, title="run claims (several processes sharing one --out train each run once)",
        wait_help="at the end, wait at most this long for runs other processes hold, then "
                  "write the report without them (default: wait until they end)")
    parser.set_defaults(func=run)


def add_executor_options(parser: argparse.ArgumentParser) -> None:
    """``--executor`` and the Ray placement options (see compare/executors)."""
    group = parser.add_argument_group("executor (where the runs execute)")
    group.add_argument("--executor", choices=EXECUTORS, default="local",
                       help="local: one run at a time in this process (default); ray: one Ray "
                            "task per unfinished run (needs the 'ray' extra). On a multi-node "
                            "cluster --out (and the data) must be on storage shared by every "
                            "node at the same path: Ray does not sync files between nodes")
    group.add_argument("--ray-address", default=None, metavar="ADDR",
                       help="Ray cluster to join: HOST:PORT of the head, ray://HOST:PORT, or "
                            "auto (the Ray started on this machine by 'ray start --head'); "
                            "default: start a local Ray for this grid")
    group.add_argument("--cpus-per-run", type=float, default=None, metavar="N",
                       help="CPU cores Ray reserves per run (default 1)")
    group.add_argument("--gpus-per-run", type=float, default=None, metavar="G",
                       help="GPUs Ray reserves per run; the run sees only those (default 0)")
    group.add_argument("--max-concurrent", type=int, default=None, metavar="K",
                       help="most runs in flight at once (default: as many as the cluster's "
                            "CPUs/GPUs fit)")


def dry_run(args: argparse.Namespace) -> int:
    """``--dry-run``: the grid expanded and every run still to do checked as ``train`` checks
    one (names, recipe, the model's shape on its data, the privacy plan); one line per run
    with its settings; nothing trained, started or written."""
    return run(args, dry_run=True)


def run(args: argparse.Namespace, dry_run: bool = False) -> int:
    raw = load_preset(args.preset) if args.preset else load_grid_file(args.config)
    backends = None
    if args.backends is not None:
        backends = [b.strip() for b in args.backends.split(",") if b.strip()]
        if not backends:
            raise ConfigError(f"--backends={args.backends!r} is empty; valid: tf, torch, tf,torch")
    overrides = [*args.overrides, *([f"recipe={args.recipe}"] if args.recipe else [])]
    # Inputs shared by every run are checked before any training (exit 2, nothing written).
    if args.no_train and args.no_report:
        raise ConfigError("--no-train with --no-report does nothing; valid: one of them, or "
                          "neither (train the missing runs and write the report)")
    if args.report and not args.no_report:
        check_output_folder(args.report, "--report")  # the message names this option
    store = api.compare(raw, out=args.out, backends=backends, seeds=args.seeds,
                        overrides=overrides, engine=args.engine, data_dir=args.data_dir,
                        report=False if args.no_report else (args.report or True),
                        progress=not args.quiet, command=command_line(),
                        executor=args.executor, ray_address=args.ray_address,
                        cpus_per_run=args.cpus_per_run, gpus_per_run=args.gpus_per_run,
                        max_concurrent=args.max_concurrent, train=not args.no_train,
                        claim_wait=args.claim_wait, claim_stale_after=args.claim_stale_after,
                        dry_run=dry_run, resume_from_records=args.resume_from_records)
    outcome, out = store.outcome, store.root
    if outcome is None:  # a dry run
        return 0
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
