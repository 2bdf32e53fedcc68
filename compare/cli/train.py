"""``dpcompare train``: train one model in one framework; keep its checkpoint and RunResult.

Settings come from (later wins): ``--config FILE``, the explicit options below, then ``--set
section.key=value`` overrides; a hyper-parameter none of them gives takes the tuned default of
``dpcore.defaults`` (tanh, SGD, see ``reports/defaults-sweep``), every other key its config
default. Giving ``--noise-multiplier`` or ``--epsilon`` selects Gaussian DP-SGD unless
``--mechanism`` says otherwise. ``--augment hflip,crop4`` sets the ``augment`` section
(per-example flips and crops of the training images, :class:`dpcore.config.AugmentSpec`), as
``--set augment.hflip=true --set augment.crop_padding=4`` does.

Writes ``OUT/runs/<config_hash>-<backend>/result.json`` (a RunResult whose ``checkpoint`` is
relative to OUT) and ``checkpoint.npz`` (framework-neutral weights; loads into either backend),
through the same record path as ``dpcompare compare`` (:func:`compare.training.train_and_record`).
Ctrl-C during training writes an ``interrupted`` record and exits with status 130. The run is
claimed first, as ``compare`` claims its runs: a second ``train`` of the same run into the same
``--out`` while the first trains waits for it and prints its result instead of training again
(``--claim-wait``). When the storage refuses a write (disk full, read-only folder) the command
exits with status 3 and one line naming the folder, the bytes needed and where the trained run
was kept. A finished run that collapsed (its predictions nearly all one class, or at chance)
says so in its status line.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path
from typing import Any

from compare import api
from compare.cli.common import (
    add_claim_options,
    add_data_dir_option,
    add_engine_option,
    print_json,
    table,
)
from dpcore.architectures import model_names
from dpcore.backend import BACKENDS
from dpcore.config import (
    MEMORY_FORMATS,
    ROUTE_CHOICES,
    PerfSpec,
    RunConfig,
    apply_overrides,
    load_mapping_file,
)
from dpcore.defaults import TRAIN_DEFAULTS
from dpcore.errors import ConfigError
from dpcore.mechanisms import (
    DEFAULT_DPSGD,
    cli_names,
    is_non_private,
    noises_gradients,
    privatises_images,
)
from dpcore.names import resolve_backend
from dpcore.noise_key import NOISE_KEYS, noise_key_label

DEFAULT_OUT = api.DEFAULT_TRAIN_OUT


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train", help="train one model with one backend (TF Privacy or Opacus)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_options(parser)
    add_perf_options(parser)
    add_engine_option(parser)
    parser.add_argument("--out", default=DEFAULT_OUT,
                        help=f"results store folder (default ./{DEFAULT_OUT})")
    parser.add_argument("--faithfulness-subset", type=int, default=500, metavar="N",
                        help="Grad-CAM faithfulness metrics on a fixed seeded subset of N test "
                        "images (image conv models; default 500; 0 skips them)")
    parser.add_argument("--quiet", action="store_true", help="no progress output")
    parser.add_argument("--json", action="store_true", help="print the RunResult as JSON")
    add_claim_options(
        parser, title="run claim (two processes training one run into one --out train it once)",
        wait_help="when another process is training this run into --out, wait at most this "
                  "long for its result (0: do not wait; default: until it ends), then stop "
                  "without training (exit 2)", stale_subject="claim on the run")
    parser.set_defaults(func=run)


def add_config_options(parser: argparse.ArgumentParser) -> None:
    """The options that make a run's config (``--backend``, ``--config``, ``--dataset``...,
    ``--set``, ``--data-dir``): :func:`given_settings` reads them. ``dpcompare verify`` takes
    the same ones."""
    parser.add_argument("--backend", required=True,
                        help="tf (Keras + TensorFlow Privacy; also tensorflow, tf-privacy) or "
                        "torch (PyTorch + Opacus; also opacus, pytorch)")
    parser.add_argument("--config", metavar="FILE", help="YAML/JSON run config to start from")
    parser.add_argument("--dataset", help="data set name (see `dpcompare datasets`)")
    parser.add_argument("--model", help=f"model name: {', '.join(model_names())}")
    length = parser.add_mutually_exclusive_group()
    length.add_argument("--epochs", type=float, help="expected passes over the training set "
                        f"(default {TRAIN_DEFAULTS['train.epochs']:g})")
    length.add_argument("--steps", type=int, help="number of logical batches (optimizer steps)")
    parser.add_argument("--batch-size", type=int,
                        help="expected logical batch size B (Poisson) or fixed size (shuffle; "
                        f"default {TRAIN_DEFAULTS['train.batch_size']})")
    parser.add_argument("--lr", type=float,
                        help=f"learning rate (default with SGD {TRAIN_DEFAULTS['train.lr']:g}, "
                        f"momentum {TRAIN_DEFAULTS['train.momentum']:g}; activation "
                        f"{TRAIN_DEFAULTS['model.activation']}: see dpcore/defaults.py)")
    parser.add_argument("--momentum", type=float,
                        help="SGD momentum in [0, 1) (default "
                        f"{TRAIN_DEFAULTS['train.momentum']:g}, the bench's tuned default: "
                        "Keras and PyTorch default to 0, so give 0 with a learning rate "
                        "chosen for plain SGD)")
    parser.add_argument("--mechanism", choices=sorted(cli_names()),
                        help="none, gaussian or laplace DP-SGD, or ldp (set data.ldp_* too)")
    noise = parser.add_mutually_exclusive_group()
    noise.add_argument("--noise-multiplier", type=float,
                       help="noise std (Laplace: scale) divided by the clip norm")
    noise.add_argument("--epsilon", type=float,
                       help="target epsilon; the noise multiplier is calibrated to reach it")
    parser.add_argument("--calibrate-with", choices=api.CALIBRATE_WITH,
                        help="accountant that turns --epsilon into a noise multiplier (sets "
                        "factors.calibration_accountant; default rdp for gaussian, pld for "
                        "laplace; prv: Opacus's, as make_private_with_epsilon, gaussian only, "
                        "on either backend)")
    parser.add_argument("--max-grad-norm", type=float, help="per-example clip norm C")
    parser.add_argument("--delta", type=float,
                        help="delta (default: the largest 10^-k below 1/(10 N))")
    parser.add_argument("--noise-key", choices=list(NOISE_KEYS),
                        help="key of the DP-SGD noise: seed (from the seed and the config hash; "
                        "reproducible, rebuildable by anyone with the config) or secret (OS "
                        "entropy, kept nowhere; not reproducible). Default: seed for a "
                        "registered public data set, secret for your own files")
    parser.add_argument("--seed", type=int, help="seed of batches, initial weights and, with "
                        "--noise-key seed, noise")
    parser.add_argument("--recipe", choices=["harmonised", "library"],
                        help="harmonised: the bench's one DP-SGD algorithm on both frameworks "
                             "(default); library: each library as its tutorials run it "
                             "(TF Privacy via model.fit, Opacus PrivacyEngine.make_private)")
    parser.add_argument("--augment", metavar="LIST",
                        help="per-example training-data augmentation, the same on both "
                        "backends and at no privacy cost: comma-separated hflip (left-right "
                        "flip with probability 1/2) and cropN (pad N pixels, crop back at a "
                        "random offset), e.g. hflip,crop4; none for no augmentation; sets the "
                        "config's augment section (augment.hflip, augment.crop_padding)")
    parser.add_argument("--audit-canaries", type=int, metavar="M",
                        help="one-run privacy audit with M canaries (audit_canaries.count; "
                        "kind gradient by default, --set audit_canaries.kind=input for "
                        "mislabelled images); prints claimed, proved and audited epsilon")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE",
                        help="override any config key, e.g. train.optimizer=adam (repeatable)")
    add_data_dir_option(parser)


def add_perf_options(parser: argparse.ArgumentParser) -> None:
    """The performance switches other than ``--engine`` (:func:`build_perf` reads them)."""
    parser.add_argument("--physical-batch-size", type=int,
                        help="largest chunk of examples per forward/backward pass (memory only; "
                        f"default {PerfSpec().physical_batch_size})")
    parser.add_argument("--library-jacobian-batch-size", type=int, metavar="N",
                        help="--recipe library on tf: examples per TF Privacy Jacobian, the "
                        "rest of the batch by its gradient_accumulation_steps (same update; "
                        "time and memory grow with N squared; default "
                        f"{PerfSpec().library_jacobian_batch_size})")
    parser.add_argument("--threads", type=int, help="framework intra-op threads")
    parser.add_argument("--memory-format", choices=MEMORY_FORMATS, default=None,
                        help="torch image tensors' memory format: default (NCHW) or "
                        "channels_last (often ~2x faster convolutions on CPU); performance "
                        "only, not part of the config hash")
    parser.add_argument("--route-choice", choices=ROUTE_CHOICES, default=None,
                        help="fast engine: each layer's route by Book-Keeping's rule (default, "
                        "the same bits every run) or measure (timed at warm-up, the fastest "
                        "kept; recorded in the result's perf.routes); performance only")
    parser.add_argument("--no-front-cache", action="store_true",
                        help="recompute a ScatterNet model's fixed scattering in every step "
                        "instead of once per data set (same result; for timing comparisons)")


def parse_augment(text: str) -> dict[str, Any]:
    """The ``augment`` section of an ``--augment`` value: ``hflip``, ``cropN`` (N >= 0
    pixels), comma-separated, or ``none``; the tokens not given are off.

    Raises:
        ConfigError: a token that is neither, or one given twice, named with the valid ones.
    """
    valid = ("valid: comma-separated hflip and cropN (N an integer >= 0), e.g. hflip,crop4; "
             "or none")
    tokens = [t.strip().lower() for t in text.split(",") if t.strip()]
    if not tokens:
        raise ConfigError(f"--augment={text!r} names no augmentation; {valid}")
    out: dict[str, Any] = {"hflip": False, "crop_padding": 0}
    if tokens == ["none"]:
        return out
    seen: set[str] = set()
    for token in tokens:
        kind = "crop" if token.startswith("crop") else token
        if kind in seen:
            raise ConfigError(f"--augment={text!r} gives {kind} twice; {valid}")
        seen.add(kind)
        if token == "hflip":
            out["hflip"] = True
        elif kind == "crop" and token[4:].isdigit():
            out["crop_padding"] = int(token[4:])
        else:
            raise ConfigError(f"--augment token {token!r} is not known; {valid}")
    return out


def build_config(args: argparse.Namespace) -> RunConfig:
    """The RunConfig of the options (file, then explicit options, then ``--set``), with the
    tuned defaults of :mod:`dpcore.defaults` for the hyper-parameters none of them gives."""
    return api.resolve_config(given_settings(args), resolve_backend(args.backend, BACKENDS))[0]


def given_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The partial config mapping the user gave (file, then explicit options, then ``--set``),
    before any default is filled in (:func:`compare.api.resolve_config` does that)."""
    raw: dict[str, Any] = load_mapping_file(args.config) if args.config else {}
    explicit: list[str] = []

    def put(key: str, value: Any) -> None:
        if value is not None:
            explicit.append(f"{key}={value}")

    put("data.name", args.dataset)
    put("model.name", args.model)
    if args.epochs is not None:
        explicit += [f"train.epochs={args.epochs}", "train.steps=null"]
    if args.steps is not None:
        explicit += [f"train.steps={args.steps}", "train.epochs=null"]
    put("train.batch_size", args.batch_size)
    put("train.lr", args.lr)
    put("train.momentum", args.momentum)
    put("factors.calibration_accountant", args.calibrate_with)
    put("privacy.max_grad_norm", args.max_grad_norm)
    put("privacy.delta", args.delta)
    put("privacy.noise_key", args.noise_key)
    put("seed", args.seed)
    put("recipe", args.recipe)
    put("audit_canaries.count", args.audit_canaries)
    if args.augment is not None:
        for key, value in parse_augment(args.augment).items():
            explicit.append(f"augment.{key}={str(value).lower()}")
    mechanism = cli_names()[args.mechanism] if args.mechanism else None
    if args.noise_multiplier is not None or args.epsilon is not None:
        if mechanism is None and not noises_gradients(
                (raw.get("privacy") or {}).get("mechanism")):
            mechanism = DEFAULT_DPSGD
        if args.noise_multiplier is not None:
            explicit += [f"privacy.noise_multiplier={args.noise_multiplier}",
                         "privacy.target_epsilon=null"]
        else:
            explicit += [f"privacy.target_epsilon={args.epsilon}",
                         "privacy.noise_multiplier=null"]
    elif mechanism is not None and not noises_gradients(mechanism):
        explicit += ["privacy.noise_multiplier=null", "privacy.target_epsilon=null"]
    put("privacy.mechanism", mechanism)
    return apply_overrides(raw, [*explicit, *args.overrides])


def build_perf(args: argparse.Namespace) -> PerfSpec:
    """Performance switches of the options."""
    defaults = PerfSpec()
    return PerfSpec(
        physical_batch_size=(args.physical_batch_size if args.physical_batch_size is not None
                             else defaults.physical_batch_size),
        threads=args.threads,
        engine=args.engine or defaults.engine,
        library_jacobian_batch_size=(
            args.library_jacobian_batch_size if args.library_jacobian_batch_size is not None
            else defaults.library_jacobian_batch_size),
        cache_fixed_front=not args.no_front_cache,
        memory_format=args.memory_format or defaults.memory_format,
        route_choice=args.route_choice or defaults.route_choice,
    )


def run(args: argparse.Namespace) -> int:
    from dpcore.results import RESULT_FILE

    backend = resolve_backend(args.backend, BACKENDS)
    given = given_settings(args)
    api.resolve_config(given, backend)  # validated before anything is loaded
    perf = build_perf(args)
    if args.faithfulness_subset < 0:  # api.train checks it too, naming its parameter
        raise ConfigError(f"--faithfulness-subset={args.faithfulness_subset} is not valid; "
                          "valid: an integer >= 0 (0 skips the metrics)")
    log = None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    result = api.train(given, backend, out=args.out, data_dir=args.data_dir, perf=perf,
                       faithfulness_subset=args.faithfulness_subset, progress=not args.quiet,
                       log=log, claim_wait=args.claim_wait,
                       claim_stale_after=args.claim_stale_after)
    if args.json:
        print_json(result.to_dict())
        return 0
    out = Path(args.out)
    path = out / "runs" / result.run_id / RESULT_FILE
    print_summary(result.to_dict(), path, out / str(result.checkpoint))
    return 0


def dry_run(args: argparse.Namespace) -> int:
    """``--dry-run``: every check ``run`` makes (options, config, names, data, the model's
    shape, the privacy plan, ``--out``); prints the start line; trains and writes nothing."""
    backend = resolve_backend(args.backend, BACKENDS)
    if args.faithfulness_subset < 0:
        raise ConfigError(f"--faithfulness-subset={args.faithfulness_subset} is not valid; "
                          "valid: an integer >= 0 (0 skips the metrics)")
    line = api.train(given_settings(args), backend, out=args.out, data_dir=args.data_dir,
                     perf=build_perf(args), dry_run=True)
    print(line)
    print("dry run: nothing trained or written")
    return 0


def print_summary(result: dict[str, Any], path: Path, checkpoint: Path) -> None:
    """A few aligned lines: status, accuracy, the epsilon of what ran (each named by its
    accountant and kind; the planned figure beside it when the steps that ran differ), the
    library's own epsilon, speed and files."""
    print(table(summary_rows(result, path, checkpoint)))


def summary_rows(result: dict[str, Any], path: Path, checkpoint: Path
                 ) -> list[tuple[str, str]]:
    """The (label, value) rows :func:`print_summary` aligns."""
    metrics, privacy = result["metrics"], result["privacy"]
    rows = [("status", status_text(result))]
    if "accuracy" in metrics:
        rows.append(("test accuracy", f"{metrics['accuracy']:.4f}"))

    def shown(value: Any) -> str:
        return "n/a" if value is None else f"{value:.4f}"

    mechanism = privacy.get("mechanism")
    ldp = privacy.get("ldp") or {}
    if privatises_images(mechanism):
        for level in ("value", "image"):
            eps, delta = ldp.get(f"epsilon_per_{level}"), ldp.get(f"delta_per_{level}")
            kind = "pure" if not delta else f"delta {delta:.3g}"
            rows.append((f"epsilon per {level} (local DP, {kind})", shown(eps)))
    elif is_non_private(mechanism):
        rows.append(("epsilon", "inf (not private)"))
    else:
        as_run = privacy.get("as_run") or {}
        ran = as_run.get("steps")
        differs = ran is not None and ran != privacy.get("steps")
        for key, label in (("epsilon_rdp", "RDP"), ("epsilon_pld", "PLD")):
            value = as_run.get(key, privacy.get(key)) if differs else privacy.get(key)
            text = shown(value)
            if differs:
                text += (f" ({ran} steps ran; {shown(privacy.get(key))} planned for "
                         f"{privacy.get('steps')})")
            rows.append((f"epsilon, shared {label}", text))
        for key, value in (privacy.get("library_epsilon") or {}).items():
            rows.append((f"epsilon, library {key}", shown(value)))
    rows += privacy_figure_rows(result)
    timing = result["timing"]
    if timing.get("examples_per_second"):
        rows.append(("speed", f"{timing['examples_per_second']:.0f} examples/s"))
    if result.get("defaults"):
        rows.append(("from defaults", ", ".join(f"{k}={v}" for k, v in
                                                result["defaults"].items())))
    claim = (result.get("perf") or {}).get("claim") or {}
    if claim and (claim.get("pid"), claim.get("host")) != (os.getpid(), socket.gethostname()):
        rows.append(("trained by", f"pid {claim.get('pid')} on {claim.get('host')}, another "
                     "process training this run into the same --out; nothing trained here"))
    rows += [("result", str(path)), ("checkpoint", str(checkpoint))]
    return rows


def status_text(result: dict[str, Any]) -> str:
    """The run's status; a finished run that collapsed (the rule reports use,
    :func:`compare.reporting.collapse.collapse_reason`) says so and why."""
    from compare.reporting.collapse import collapse_reason

    status = str(result["status"])
    reason = collapse_reason(result["metrics"]) if status == "finished" else None
    return f"{status}, but COLLAPSED: {reason}" if reason else status


def privacy_figure_rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    """Rows of the claimed, proved and audited epsilon (or how to audit, without a one-run
    audit), and whether the audit found a privacy violation (none for a record without
    ``privacy.epsilon_proved_reason``)."""
    from dpcore.audit.per_step import per_step_findings
    from dpcore.proved import is_violation

    privacy = result["privacy"]
    if "epsilon_proved_reason" not in privacy:
        return []
    rows: list[tuple[str, str]] = []
    if privacy.get("deliberately_broken"):
        rows.append(("DELIBERATELY BROKEN", str(privacy["deliberately_broken"])))
    for key, label in (("epsilon_claimed", "epsilon claimed"),
                       ("epsilon_proved", "epsilon proved")):
        value = privacy.get(key)
        rows.append((label, "n/a" if value is None else f"{value:.4f}"))
    if privacy.get("epsilon_proved") is None:
        rows.append(("  (why none)", str(privacy["epsilon_proved_reason"])))
    if privacy.get("epsilon_proved_rdp") is not None:
        rows.append(("  (by RDP)", f"{privacy['epsilon_proved_rdp']:.4f} (the proved figure "
                     "is by PLD; both hold)"))
    if privacy.get("noise_key"):
        rows.append(("noise key", noise_key_label(privacy["noise_key"])))
    one_run = (result.get("audit") or {}).get("one_run")
    if one_run is None:
        rows.append(("epsilon audited", "not audited (--audit-canaries M runs the one-run "
                     "canary audit)"))
        return rows
    rows.append(("epsilon audited",
                 f"{one_run['epsilon_lower_bound']:.4f} (one run, {one_run['kind']} canaries: "
                 f"{one_run['correct']} of {one_run['k']} guesses right, m={one_run['m']}, 95% "
                 "lower bound)"))
    per_step = one_run.get("per_step")
    if per_step:
        verdict = "NOT FRESH" if per_step["flagged"] else "fresh"
        rows.append(("per-step noise", (
            f"{verdict}: S {per_step['value']:.4f} in {per_step['tensor']} (fresh >= "
            f"threshold {per_step['threshold']:.4f} at false-alarm rate "
            f"{per_step['false_alarm_rate']:g}; lag-1 correlation {per_step['rho_1']:.3f}; "
            f"{per_step['steps']} steps)")))
        clip = per_step.get("clip")
        if clip:
            rows.append(("per-step clipping", (
                f"{'NOT CLIPPED' if clip['flagged'] else 'clipped'}: Z {clip['value']:.2f} "
                f"(clipped as an honest step: |Z| <= {clip['threshold']:.2f} at false-alarm "
                f"rate {clip['false_alarm_rate']:g}; mean shift {clip['mean_shift']:.3f} C over "
                f"{clip['canaries']} canaries)")))
    if one_run.get("violation"):
        basis = "proved" if privacy.get("epsilon_proved") is not None else "claimed"
        found = []
        if is_violation(one_run.get("epsilon_lower_bound"), privacy.get("epsilon_claimed"),
                        privacy.get("epsilon_proved")):
            found.append(f"the audited lower bound is above the {basis} epsilon")
        found += per_step_findings(per_step)
        rows.append(("PRIVACY VIOLATION", "; ".join(found)))
    else:
        rows.append(("privacy violation", "none found by the audit"))
    return rows
