"""``dpcompare report``: write report.md + CSV tables + PNG plots from a results folder."""

from __future__ import annotations

import argparse
from pathlib import Path

from compare.cli.common import check_output_folder
from compare.report import ReportContext, command_line, write_report
from dpcore.errors import DpCompareError


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("report", help="write a report from a results folder",
                                   description=__doc__)
    parser.add_argument("runs_dir", help="results folder written by compare or train")
    parser.add_argument("--out", required=True, help="report folder, e.g. reports/NAME")
    parser.add_argument("--title", default="dpcompare report", help="report title")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    runs = Path(args.runs_dir)
    if not (runs / "runs").is_dir():
        raise DpCompareError(
            f"{runs} holds no runs (expected {runs / 'runs'}/<run id>/result.json)"
        )
    check_output_folder(args.out, "--out")
    path = write_report(runs, args.out, ReportContext(command=command_line(), title=args.title))
    print(f"report: {path}")
    return 0
