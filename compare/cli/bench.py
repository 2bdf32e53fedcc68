"""``dpcompare bench``: steady-state speed and peak memory of TF Privacy and Opacus variants."""

from __future__ import annotations

import argparse
import shlex
import sys

from compare.cli.common import add_data_dir_option, print_json


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "bench", help="time DP and non-private training in both frameworks",
        description=__doc__ + " Writes OUT/report.md and OUT/results.json.")
    parser.add_argument("--quick", action="store_true",
                        help="few steps, small data, cnn4 only (< 2 minutes)")
    parser.add_argument("--json", action="store_true",
                        help="print every figure as one JSON object instead of the summary")
    parser.add_argument("--out", default="reports/benchmarks",
                        help="report folder (default: reports/benchmarks)")
    add_data_dir_option(parser)
    parser.set_defaults(func=run)


def command(args: argparse.Namespace) -> str:
    """The command that reproduces this run (for the report's header)."""
    parts = ["dpcompare bench", *(["--quick"] if args.quick else []),
             *(["--json"] if args.json else []), f"--out {shlex.quote(str(args.out))}"]
    if args.data_dir:
        parts.append(f"--data-dir {shlex.quote(str(args.data_dir))}")
    return " ".join(parts)


def run(args: argparse.Namespace) -> int:
    from benchmarks.bench import run_benchmark
    from benchmarks.render import text_summary, write_report

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    results = run_benchmark(quick=args.quick, data_dir=args.data_dir, log=log)
    path = write_report(results, args.out, command(args))
    if args.json:
        print_json(results)
    else:
        print(text_summary(results))
        print(f"\nreport: {path}")
    return 0
