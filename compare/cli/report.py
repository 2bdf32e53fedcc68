"""``dpcompare report``: write report.md + CSV tables + PNG plots from a results folder."""

from __future__ import annotations

import argparse
from pathlib import Path

from compare import api
from compare.cli.common import check_output_folder
from compare.report import command_line


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("report", help="write a report from a results folder",
                                   description=__doc__)
    parser.add_argument("runs_dir", help="results folder written by compare or train")
    parser.add_argument("--out", required=True, help="report folder, e.g. reports/NAME")
    parser.add_argument("--title", default="dpcompare report", help="report title")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    check_output_folder(args.out, "--out")  # the message names this command's option
    path = api.report(Path(args.runs_dir), args.out, title=args.title, command=command_line())
    print(f"report: {path}")
    return 0
