"""``dpcompare epsilon``: what epsilon a DP-SGD setting gives, or what noise reaches a target.

Prints epsilon from the shared accountant (dp_accounting RDP and PLD) next to Opacus's own
(RDP, PRV) and TensorFlow Privacy's own computation for the same setting.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from compare.cli.common import print_json
from dpcore.accounting import (
    calibrate_noise_multiplier,
    calibration_accountant,
    dpsgd_event,
    epsilon_pld,
    epsilon_rdp,
)
from dpcore.config import check_delta_below_one_over_n, default_delta
from dpcore.errors import ConfigError

MECHANISMS = {"gaussian": "dpsgd-gaussian", "laplace": "dpsgd-laplace"}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "epsilon",
        help="epsilon of a DP-SGD setting (or the noise for a target epsilon)",
        description=__doc__,
    )
    parser.add_argument("--n", type=int, required=True, help="training set size N (examples)")
    parser.add_argument("--batch-size", type=int, required=True,
                        help="expected batch size B (examples per step)")
    parser.add_argument("--sampling-rate", type=float, default=None,
                        help="sampling rate q in (0, 1]; default B / N")
    noise = parser.add_mutually_exclusive_group(required=True)
    noise.add_argument("--noise-multiplier", type=float,
                       help="noise std (Laplace: scale) divided by the clip norm, >= 0")
    noise.add_argument("--target-epsilon", type=float,
                       help="calibrate the noise multiplier to reach this epsilon (> 0)")
    length = parser.add_mutually_exclusive_group(required=True)
    length.add_argument("--epochs", type=float,
                        help="expected passes over the data (steps = ceil(epochs * round(1/q)))")
    length.add_argument("--steps", type=int, help="number of noised steps")
    parser.add_argument("--delta", type=float, default=None,
                        help="target delta in (0, 1); default 1/N rounded down to a power of 10")
    parser.add_argument("--mechanism", choices=sorted(MECHANISMS), default="gaussian",
                        help="noise distribution of DP-SGD (default gaussian)")
    parser.add_argument("--no-library", action="store_true",
                        help="skip the Opacus / TF Privacy cross-checks (no framework import)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def compute(args: argparse.Namespace) -> dict[str, Any]:
    """The figures ``run`` prints, as the JSON object of ``--json``."""
    if args.n is None or args.n < 1:
        raise ConfigError(f"--n={args.n!r} is not valid; valid: an integer >= 1")
    if not 1 <= args.batch_size <= args.n:
        raise ConfigError(f"--batch-size={args.batch_size} is not valid; valid: 1..{args.n}")
    q = args.sampling_rate if args.sampling_rate is not None else args.batch_size / args.n
    if not 0 < q <= 1 or math.isnan(q):
        raise ConfigError(f"--sampling-rate={q!r} is not valid; valid: (0, 1]")
    delta = args.delta if args.delta is not None else default_delta(args.n)
    if not 0 < delta < 1:
        raise ConfigError(f"--delta={delta!r} is not valid; valid: (0, 1)")
    check_delta_below_one_over_n(delta, args.n, key="--delta")
    if args.steps is not None:
        if args.steps < 1:
            raise ConfigError(f"--steps={args.steps} is not valid; valid: an integer >= 1")
        steps = args.steps
    else:
        if not 0 < args.epochs < math.inf:
            raise ConfigError(
                f"--epochs={args.epochs!r} is not valid; valid: a finite number > 0")
        steps = max(1, math.ceil(args.epochs * max(1, round(1.0 / q)) - 1e-9))
    mechanism = MECHANISMS[args.mechanism]
    if args.target_epsilon is not None:
        if not args.target_epsilon > 0 or math.isinf(args.target_epsilon):
            raise ConfigError(
                f"--target-epsilon={args.target_epsilon!r} is not valid; valid: a finite > 0"
            )
        noise = calibrate_noise_multiplier(mechanism, args.target_epsilon, delta, q, steps)
    else:
        if not 0 <= args.noise_multiplier < math.inf:  # inf: no accountant terminates
            raise ConfigError(
                f"--noise-multiplier={args.noise_multiplier!r} is not valid; valid: a finite "
                "number >= 0"
            )
        noise = args.noise_multiplier
    event = dpsgd_event(mechanism, noise, q, steps)
    epsilons: dict[str, float | None] = {
        "rdp": epsilon_rdp(event, delta),
        "pld": epsilon_pld(event, delta),
        "opacus_rdp": None,
        "opacus_prv": None,
        "tf_privacy": None,
    }
    notes = []
    if mechanism == "dpsgd-laplace":
        notes.append("Opacus and TF Privacy have no Laplace DP-SGD: no library figures")
        if epsilons["rdp"] is None:
            notes.append("dp_accounting's RDP accountant has no subsampled-Laplace bound")
    elif noise == 0:
        notes.append("noise multiplier 0: not private")
    elif not args.no_library:
        from tfpipe.accounting import tf_privacy_epsilon
        from torchpipe.accounting import opacus_epsilons

        epsilons.update(opacus_epsilons(noise, q, steps, delta))
        epsilons["tf_privacy"] = tf_privacy_epsilon(q, noise, steps, delta)
    return {
        "epsilon": epsilons,
        "noise_multiplier": noise,
        "calibrated": args.target_epsilon is not None,
        "calibration_accountant": calibration_accountant(mechanism)
        if args.target_epsilon is not None else None,
        "mechanism": mechanism,
        "steps": steps,
        "sampling_rate": q,
        "delta": delta,
        "n": args.n,
        "batch_size": args.batch_size,
        "notes": notes,
    }


def run(args: argparse.Namespace) -> int:
    result = compute(args)
    if args.json:
        print_json(result)
        return 0
    print(f"mechanism         {result['mechanism']}")
    noise_line = f"{result['noise_multiplier']:.6g}"
    if result["calibrated"]:
        noise_line += f"  (calibrated with {result['calibration_accountant'].upper()})"
    print(f"noise multiplier  {noise_line}")
    print(f"sampling rate q   {result['sampling_rate']:.6g}")
    print(f"steps             {result['steps']}")
    print(f"delta             {result['delta']:.3g}")
    print("epsilon:")
    labels = {
        "rdp": "shared, RDP (dp_accounting)",
        "pld": "shared, PLD (dp_accounting)",
        "opacus_rdp": "Opacus RDP",
        "opacus_prv": "Opacus PRV",
        "tf_privacy": "TF Privacy (compute_dp_sgd_privacy)",
    }
    for key, label in labels.items():
        value = result["epsilon"][key]
        shown = "n/a" if value is None else f"{value:.4f}"
        print(f"  {label:<38} {shown}")
    for note in result["notes"]:
        print(f"note: {note}")
    return 0
