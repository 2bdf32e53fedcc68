"""``dpcompare bench``: steady-state speed and peak memory of every DP tier of TF Privacy and
Opacus (plain, reference, fast, stock), their ratios against the speed and memory targets, and a
batch-size sweep of the fast engines."""

from __future__ import annotations

import argparse
import shlex
import sys

from compare import api
from compare.bench import text_summary
from compare.cli.common import add_data_dir_option, print_json
from compare.records import portable_text

#: The committed report of the full benchmark (every case and the sweep).
FULL_OUT = "reports/benchmarks"
#: Where a quick or partial run writes unless ``--out`` says otherwise (never the committed
#: report: a few steps of one case would replace the full figures).
QUICK_OUT = "runs/bench-quick"
PARTIAL_OUT = "runs/bench-partial"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "bench", help="time DP and non-private training in both frameworks",
        description=__doc__ + " Writes OUT/report.md, OUT/results.json and OUT/sweep.png.")
    parser.add_argument("--quick", action="store_true",
                        help="few steps, cnn4 at batch 256, a 2-point sweep (about a minute "
                             f"on an idle 2-core machine); writes {QUICK_OUT} by default")
    parser.add_argument("--cases", default=None, metavar="NAME[,NAME...]",
                        help="run only these cases (e.g. resnet18_pneumonia_b64 for the "
                        "ResNet-18 PneumoniaMNIST epoch time); default: all of the mode's")
    parser.add_argument("--no-sweep", action="store_true",
                        help="skip the batch-size sweep")
    parser.add_argument("--no-compile", action="store_true",
                        help="do not try the 'at its best' tiers compiled (TF XLA, "
                             "torch.compile; tried by default except with --quick: "
                             "compiling takes minutes)")
    parser.add_argument("--json", action="store_true",
                        help="print every figure as one JSON object instead of the summary")
    parser.add_argument("--out", default=None,
                        help=f"report folder (default: {FULL_OUT} for the full benchmark; "
                             f"{QUICK_OUT} with --quick, {PARTIAL_OUT} with --cases or "
                             "--no-sweep, so that only a full run replaces the committed "
                             "report)")
    add_data_dir_option(parser)
    parser.set_defaults(func=run)


def default_out(args: argparse.Namespace) -> str:
    """The report folder when ``--out`` is not given: only the full benchmark writes the
    committed report."""
    if args.quick:
        return QUICK_OUT
    if args.cases or args.no_sweep or args.no_compile:
        return PARTIAL_OUT
    return FULL_OUT


def command(args: argparse.Namespace) -> str:
    """The command that reproduces this run (for the report's header), naming no folder of
    this machine (:func:`compare.records.portable_text`: paths relative to the current
    folder, the data root as ``$DPCOMPARE_DATA_DIR``)."""
    parts = ["dpcompare bench", *(["--quick"] if args.quick else []),
             *([f"--cases {shlex.quote(args.cases)}"] if args.cases else []),
             *(["--no-sweep"] if args.no_sweep else []),
             *(["--no-compile"] if args.no_compile else []),
             *(["--json"] if args.json else []), f"--out {shlex.quote(str(args.out))}"]
    if args.data_dir:
        parts.append(f"--data-dir {shlex.quote(str(args.data_dir))}")
    return portable_text(" ".join(parts), args.data_dir)


def run(args: argparse.Namespace) -> int:
    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    if args.out is None:
        args.out = default_out(args)
    names = [n.strip() for n in args.cases.split(",") if n.strip()] if args.cases else None
    results, path = api.bench(args.out, quick=args.quick, cases=names, sweep=not args.no_sweep,
                              data_dir=args.data_dir, log=log, command=command(args),
                              compile_steps=False if args.no_compile else None)
    if args.json:
        print_json(results)
    else:
        print(text_summary(results))
        print(f"\nreport: {path}")
    return 0
