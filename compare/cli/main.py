"""Entry point of ``dpcompare``: builds the sub-command parsers and maps errors to exit codes.

Each sub-command lives in its own module under :mod:`compare.cli` and exposes
``add_parser(subparsers) -> None``; the parser it adds sets ``func`` to a
``run(args) -> int`` callable. Backends are imported lazily inside ``run`` so that light
commands (``epsilon``, ``datasets``) start fast.

Exit status (the constants ``EXIT_*`` below): 0 success; 1 ``compare`` ran but some runs
failed (each recorded as ``failed`` with its error, one summary line on stderr); 2 a user error
(one line on stderr naming the bad value and what is valid; the traceback only with
``--debug``; checked before anything is written, so stored results are never touched); 3 the
storage refused a write while the command ran (no space left, a quota, a read-only or
forbidden folder: one line naming the folder, the bytes the write needed and what was kept,
:mod:`dpcore.storage`; what was stored before stays, nothing is half-written); 130 interrupted
(Ctrl-C: the current state is written first, see :mod:`compare.runner`). Warnings of the bench
(e.g. a delta not below 1/N) print as one line ``dpcompare COMMAND: warning: ...``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from dpcore.errors import DpCompareError, PrivacyWarning
from dpcore.storage import is_write_fault, storage_error
from dpcore.threads import prefer_passive_openmp

#: Exit status: success.
EXIT_OK = 0
#: Exit status: ``compare`` ran, and some of its runs failed (each recorded as ``failed``).
EXIT_RUNS_FAILED = 1
#: Exit status: a user error, refused before anything was written.
EXIT_USER_ERROR = 2
#: Exit status: the storage refused a write while the command ran (no space, a quota, a
#: read-only or forbidden folder); nothing half-written, what was stored before is kept.
EXIT_STORAGE = 3
#: Exit status: interrupted (Ctrl-C), the current state written first.
EXIT_INTERRUPTED = 130

#: Folders of the bench's own packages: their warnings are printed as one CLI line.
_OWN_PACKAGES = tuple(
    str(Path(__file__).resolve().parents[2] / name) for name in ("dpcore", "compare")
)

#: Sub-command modules, in the order ``--help`` lists them. A module missing from the install
#: is skipped so that partial installs still offer the rest.
SUBCOMMAND_MODULES: tuple[str, ...] = (
    "compare.cli.datasets",
    "compare.cli.epsilon",
    "compare.cli.train",
    "compare.cli.ldp",
    "compare.cli.compare_cmd",
    "compare.cli.report",
    "compare.cli.reproduce",
    "compare.cli.bench",
    "compare.cli.audit",
    "compare.cli.verify",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dpcompare",
        description="Differentially private image classification, TensorFlow Privacy vs Opacus, "
        "on the same data, model and algorithm.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                continue
            raise
        before = set(subparsers.choices)
        module.add_parser(subparsers)
        for name in set(subparsers.choices) - before:
            add_dry_run_option(subparsers.choices[name], getattr(module, "dry_run", None))
    return parser


def version() -> str:
    """The installed version of the ``dpcompare`` distribution (``unknown`` when it runs from
    a source tree that was never installed)."""
    from importlib import metadata

    try:
        return metadata.version("dpcompare")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def add_dry_run_option(parser: argparse.ArgumentParser,
                       dry_run: Callable[[argparse.Namespace], int] | None) -> None:
    """``--dry-run`` on a sub-command: validate everything, print the plan, run nothing. A
    command module gives its own ``dry_run(args) -> int``; one without it (its options are
    all checked by the parser) prints the command it would run."""
    if "--dry-run" in parser._option_string_actions:  # noqa: SLF001
        return
    parser.add_argument("--dry-run", action="store_true",
                        help="check every option and input, print the plan, and run, train "
                        "and write nothing")
    parser.set_defaults(dry_func=dry_run)


def generic_dry_run(args: argparse.Namespace) -> int:
    """The dry run of a command without its own: its options parsed and checked."""
    options = {k: v for k, v in vars(args).items()
               if k not in ("func", "dry_func", "dry_run", "debug", "command")}
    print(f"dry run: dpcompare {args.command} with {options}: options checked; nothing run")
    return 0


def one_line(text: str) -> str:
    """``text`` folded onto one line (library messages, e.g. PyYAML's, span several)."""
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())


@contextmanager
def cli_warnings(command: str) -> Iterator[None]:
    """Within the block, the bench's own warnings (and every :class:`PrivacyWarning`) print as
    one line ``dpcompare COMMAND: warning: ...`` on stderr; other warnings keep Python's form.

    Privacy warnings are always shown (once per message and place).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("default", PrivacyWarning)
        original = warnings.showwarning

        def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                 file: TextIO | None = None, line: str | None = None) -> None:
            if issubclass(category, PrivacyWarning) or str(filename).startswith(_OWN_PACKAGES):
                print(f"dpcompare {command}: warning: {one_line(str(message))}",
                      file=file or sys.stderr)
            else:
                original(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        yield


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit status."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    prefer_passive_openmp()  # before any backend imports torch (see dpcore.threads)
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    func = args.func
    if getattr(args, "dry_run", False):
        func = getattr(args, "dry_func", None) or generic_dry_run
    try:
        with cli_warnings(args.command):
            return int(func(args) or EXIT_OK)
    except OSError as exc:  # a StorageError too (it is both)
        if not is_write_fault(exc):
            raise
        if args.debug:
            traceback.print_exc()
        print(f"dpcompare {args.command}: error: {one_line(str(storage_error(exc)))}",
              file=sys.stderr)
        return EXIT_STORAGE
    except DpCompareError as exc:
        if args.debug:
            traceback.print_exc()
        print(f"dpcompare {args.command}: error: {one_line(str(exc))}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        if getattr(args, "debug", False):
            traceback.print_exc()
        print(f"dpcompare {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
