"""Entry point of ``dpcompare``: builds the sub-command parsers and maps errors to exit codes.

Each sub-command lives in its own module under :mod:`compare.cli` and exposes
``add_parser(subparsers) -> None``; the parser it adds sets ``func`` to a
``run(args) -> int`` callable. Backends are imported lazily inside ``run`` so that light
commands (``epsilon``, ``datasets``) start fast.

Exit status: 0 success, 2 a user error (one line on stderr naming the bad value; the traceback
only with ``--debug``), 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback
from collections.abc import Sequence

from dpcore.errors import DpCompareError

#: Sub-command modules, in the order ``--help`` lists them. A module missing from the install
#: is skipped so that partial installs still offer the rest.
SUBCOMMAND_MODULES: tuple[str, ...] = (
    "compare.cli.datasets",
    "compare.cli.epsilon",
    "compare.cli.train",
    "compare.cli.ldp",
    "compare.cli.compare_cmd",
    "compare.cli.report",
    "compare.cli.bench",
    "compare.cli.audit",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dpcompare",
        description="Differentially private image classification, TensorFlow Privacy vs Opacus, "
        "on the same data, model and algorithm.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                continue
            raise
        module.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit status."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except DpCompareError as exc:
        if args.debug:
            traceback.print_exc()
        print(f"dpcompare {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"dpcompare {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
