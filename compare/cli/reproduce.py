"""``dpcompare reproduce REPORT``: retrain a committed report's runs from the configs in its
records, in a scratch store, and compare every recorded figure with the committed one:
``reproduction.md`` (per run the verdict: identical, within tolerance, differs; what produced
each side) and ``reproduction.csv`` (every figure) are written into the scratch store."""

from __future__ import annotations

import argparse

from compare import api
from compare.cli.common import add_data_dir_option
from compare.report import command_line
from compare.reproduce import DEFAULT_OUT


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "reproduce", help="retrain a committed report's runs and compare every figure",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("report", metavar="REPORT",
                        help="a committed report folder (with records/), e.g. reports/demo")
    parser.add_argument("--runs", type=int, default=None, metavar="K",
                        help="retrain a seeded sample of K of its runs (default: all)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the --runs sample (default 0: the same runs everywhere)")
    parser.add_argument("--run-ids", nargs="+", default=None, metavar="RUN_ID",
                        help="retrain these runs only (space- or comma-separated run ids)")
    parser.add_argument("--backends", default=None,
                        help="comma-separated backends whose runs to retrain (default: both)")
    parser.add_argument("--out", default=None,
                        help=f"scratch store for the fresh runs and the reproduction files "
                             f"(default {DEFAULT_OUT}/<report name>); a run already finished "
                             "in it is not retrained")
    parser.add_argument("--threads", type=int, default=None, metavar="N",
                        help="intra-op threads of both frameworks for the fresh runs "
                             "(default: the committed record's setting, else the framework's)")
    add_data_dir_option(parser)
    parser.add_argument("--quiet", action="store_true", help="no progress output")
    parser.set_defaults(func=run)


def dry_run(args: argparse.Namespace) -> int:
    """``--dry-run``: the report's records read, the runs selected and checked (data, model,
    privacy plan) and listed; nothing trained or written."""
    return run(args, dry_run=True)


def run(args: argparse.Namespace, dry_run: bool = False) -> int:
    result = api.reproduce(args.report, runs=args.runs, run_ids=args.run_ids,
                           backends=args.backends, out=args.out, seed=args.seed,
                           threads=args.threads, data_dir=args.data_dir,
                           progress=not args.quiet or dry_run, command=command_line(),
                           dry_run=dry_run)
    if not dry_run and args.quiet:
        print(f"reproduce {args.report}: {result.summary}")
        print(f"reproduction: {result.markdown}")
    return 0
