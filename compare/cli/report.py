"""``dpcompare report``: write report.md + CSV tables + PNG plots from a results folder, or
rebuild report folders from the run records committed in them.

    dpcompare report runs/demo --out reports/demo      # from a results folder (a store)
    dpcompare report --records reports/demo             # rebuild in place from its records
    dpcompare report --records reports/*                # every committed report with records

A rebuild needs no training, no model, no store and no checkpoint. Folders without records
(``reports/benchmarks``, ``reports/tuning``, or any report without ``records/``) are
skipped with a line saying so when several folders are given, and are an error when one is.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from compare import api
from compare.folders import check_output_folder
from compare.report import command_line
from dpcore.errors import ConfigError


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("report", help="write a report from a results folder, or "
                                   "rebuild report folders from their records",
                                   description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs_dir", nargs="?", default=None,
                        help="results folder written by compare or train")
    parser.add_argument("--records", nargs="+", metavar="REPORT_DIR", default=None,
                        help="rebuild these report folders from their records/ (instead of "
                             "RUNS_DIR); e.g. --records reports/*")
    parser.add_argument("--out", default=None,
                        help="report folder, e.g. reports/NAME (required with RUNS_DIR; with "
                             "--records of one folder: where to rebuild it, default in place)")
    parser.add_argument("--title", default="dpcompare report", help="report title")
    parser.add_argument("--latex", action="store_true",
                        help="also write paper-ready LaTeX tables (latex/*.tex; need "
                             "\\usepackage{booktabs, graphicx})")
    parser.set_defaults(func=run)


def dry_run(args: argparse.Namespace) -> int:
    """``--dry-run``: the runs folder read (or each ``--records`` folder checked for records)
    and the report folder checked; nothing written."""
    from compare import tidy
    from compare.records import has_records

    if args.out is not None:
        check_output_folder(args.out, "--out")
    if args.records is None:
        if args.runs_dir is None or args.out is None:
            raise ConfigError("give RUNS_DIR with --out DIR, or --records REPORT_DIR...")
        results = tidy.load_results(Path(args.runs_dir))
        print(f"dry run: would write the report of {len(results)} run(s) in {args.runs_dir} "
              f"to {args.out}; nothing written")
        return 0
    folders = [Path(p) for p in args.records]
    missing = [str(f) for f in folders if not f.is_dir()]
    if missing:
        raise ConfigError(f"--records folder(s) {', '.join(missing)} do not exist; valid: "
                          "report folders holding records/")
    with_records = [f for f in folders if has_records(f)]
    print(f"dry run: would rebuild {len(with_records)} of {len(folders)} report folder(s) "
          "from their records (the others hold none); nothing written")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.records is None:
        if args.runs_dir is None or args.out is None:
            raise ConfigError("give RUNS_DIR with --out DIR, or --records REPORT_DIR...; "
                              "valid: `dpcompare report runs/demo --out reports/demo` or "
                              "`dpcompare report --records reports/demo`")
        check_output_folder(args.out, "--out")  # the message names this command's option
        path = api.report(Path(args.runs_dir), args.out, title=args.title,
                          command=command_line(), latex=args.latex)
        print(f"report: {path}")
        return 0
    if args.runs_dir is not None:
        raise ConfigError(f"RUNS_DIR={args.runs_dir!r} with --records; valid: one of them")
    from compare.records import has_records

    folders = [Path(p) for p in args.records]
    if args.out is not None and len(folders) != 1:
        raise ConfigError(f"--out with {len(folders)} --records folders; valid: --out with "
                          "one folder, or no --out (each rebuilt in place)")
    if args.out is not None:
        check_output_folder(args.out, "--out")
    if len(folders) > 1:
        skipped = [f for f in folders if not has_records(f)]
        for folder in skipped:
            print(f"skipped {folder}: no records/ (not a grid report, or written before "
                  "records existed)")
        folders = [f for f in folders if f not in skipped]
    for folder in folders:
        path = api.rebuild_report(folder, args.out, latex=args.latex)
        print(f"report: {path}")
    return 0
