"""``dpcompare verify``: a conformance check of one configured DP step on one backend.

Takes any config ``dpcompare train`` takes (the same options: ``--backend``, ``--dataset``,
``--model``, ``--epsilon`` / ``--noise-multiplier``, ``--config FILE``, ``--set``,
``--recipe``, image folders and YAML custom models) and, training nothing to the end, checks
the step of every engine that applies to the model (``--engine fast|reference|all``) or, under
``--recipe library``, the library's own step:

* sensitivity: adversarial neighbouring batches move the clipped sum by no more than the proved
  rule assumes (C for add/remove of one example, 2C for replace-one or a whole microbatch);
* noise: per-coordinate std sigma C per tensor and per coordinate, mean zero, fresh at every
  step, independent across coordinates and across runs with different keys;
* divisor: the noised sum is divided by the configured divisor;
* accounting: the step's DpEvent (sigma, sampling rate, steps) is what the accountant was given.

Each check prints its statistic, threshold and false-alarm rate, and the false-alarm rate of
the whole set (union bound). Exit status: 0 every check passed; 1 some check failed (named on
the last line); 2 refused (a bad option or config: nothing was checked).
"""

from __future__ import annotations

import argparse
import sys

from compare.cli.common import print_json
from compare.cli.train import add_config_options, add_perf_options, build_perf, given_settings
from compare.verify import ENGINE_CHOICES


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "verify", help="check one configured DP step (sensitivity, noise, divisor, accounting)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_options(parser)
    add_perf_options(parser)
    parser.add_argument("--engine", choices=ENGINE_CHOICES, default="all",
                        help="the step engine(s) to check: all (default: every engine that "
                        "applies to the model), fast or reference; a --recipe library run is "
                        "checked on its library's own step")
    parser.add_argument("--processes", type=_processes, default="auto", metavar="N|auto",
                        help="engines checked at the same time, each beyond the first in a "
                        "process of its own (the report is the same); default auto: every "
                        "engine at once where the backend gains by it (from 1M weights on "
                        "both backends), else 1")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(func=run)


def _processes(text: str) -> int | str:
    """``--processes``: ``auto`` or a whole number >= 1."""
    if text == "auto":
        return text
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1 or 'auto'")
    return value


def dry_run(args: argparse.Namespace) -> int:
    """``--dry-run``: the options and the config checked as ``run`` checks them (names, the
    recipe on this backend, a DP-SGD mechanism); nothing built, stepped or written."""
    from compare import api
    from dpcore.backend import BACKENDS
    from dpcore.errors import ConfigError
    from dpcore.mechanisms import noises_gradients
    from dpcore.names import check_names, resolve_backend
    from dpcore.recipes import check_backend_recipe

    backend = resolve_backend(args.backend, BACKENDS)
    config, _ = api.resolve_config(given_settings(args), backend)
    check_names(config)
    check_backend_recipe(config, backend)
    if not noises_gradients(config.privacy.mechanism):
        raise ConfigError(f"privacy.mechanism={config.privacy.mechanism!r} has no DP-SGD step "
                          "to verify; valid: a DP-SGD mechanism (e.g. --epsilon 1)")
    steps = "the library's own step" if config.recipe == "library" else (
        "every engine that applies" if args.engine == "all" else f"the {args.engine} engine")
    print(f"dry run: verify would check {steps} of config {config.config_hash} on {backend}; "
          "nothing checked")
    return 0


def run(args: argparse.Namespace) -> int:
    from compare import api

    perf = build_perf(argparse.Namespace(**{**vars(args), "engine": None}))
    log = None if args.json else (lambda line: print(line, file=sys.stderr, flush=True))
    report = api.verify(given_settings(args), args.backend, data_dir=args.data_dir,
                        engine=args.engine, perf=perf, log=log, processes=args.processes)
    if args.json:
        print_json(report.to_dict())
    else:
        print(report.render())
    return 0 if report.passed else 1
