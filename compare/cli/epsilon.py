"""``dpcompare epsilon``: what epsilon a DP-SGD setting gives, or what noise reaches a target.

Prints epsilon from the shared accountant (dp_accounting RDP and PLD) next to Opacus's own
(RDP, PRV) and TensorFlow Privacy's own computation for the same setting.
"""

from __future__ import annotations

import argparse
from typing import Any

from compare import api
from compare.cli.common import print_json, table

#: How error messages name each setting: the options of this command.
OPTION_NAMES = {name: "--" + name.replace("_", "-") for name in api.PYTHON_NAMES}


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
                        help="target delta in (0, 1); default the largest power of 10 below "
                             "1/(10 N)")
    parser.add_argument("--mechanism", choices=sorted(api.mechanisms()), default="gaussian",
                        help="noise distribution of DP-SGD (default gaussian)")
    parser.add_argument("--calibrate-with", choices=api.CALIBRATE_WITH, default=None,
                        help="accountant that turns --target-epsilon into a noise multiplier: "
                        "rdp or pld (dp_accounting), or prv (Opacus's, as its "
                        "make_private_with_epsilon does; imports torch); default rdp for "
                        "gaussian, pld for laplace")
    parser.add_argument("--no-library", action="store_true",
                        help="skip the Opacus / TF Privacy cross-checks (no framework import)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def compute(args: argparse.Namespace) -> dict[str, Any]:
    """The figures ``run`` prints, as the JSON object of ``--json`` (:mod:`compare.api`)."""
    return api.accounting_figures(
        n=args.n, batch_size=args.batch_size, noise_multiplier=args.noise_multiplier,
        target_epsilon=args.target_epsilon, epochs=args.epochs, steps=args.steps,
        sampling_rate=args.sampling_rate, delta=args.delta, mechanism=args.mechanism,
        library=not args.no_library, calibrate_with=args.calibrate_with, names=OPTION_NAMES)


#: The epsilon rows of the table: key of the result's ``epsilon`` -> what the figure is.
EPSILON_LABELS = {
    "rdp": "shared RDP (dp_accounting)",
    "pld": "shared PLD (dp_accounting)",
    "opacus_rdp": "Opacus RDP",
    "opacus_prv": "Opacus PRV",
    "tf_privacy": "TF Privacy RDP on these steps",
    "tf_privacy_user": "TF Privacy compute_dp_sgd_privacy(n, batch, epochs)",
}


def dry_run(args: argparse.Namespace) -> int:
    """``--dry-run``: every option checked and the setting resolved (steps, q, delta, the
    noise, calibrated if asked) by the shared accountant only; no library is imported."""
    import copy

    quick = copy.copy(args)
    quick.no_library = True
    result = compute(quick)
    print(f"dry run: would compute epsilon of {result['mechanism']} at noise "
          f"{result['noise_multiplier']:.6g}, q {result['sampling_rate']:.6g}, "
          f"{result['steps']} steps, delta {result['delta']:.3g}"
          + ("" if args.no_library else ", and the libraries' own figures")
          + "; all options checked")
    return 0


def run(args: argparse.Namespace) -> int:
    result = compute(args)
    if args.json:
        print_json(result)
        return 0
    noise_line = f"{result['noise_multiplier']:.6g}"
    if result["calibrated"]:
        noise_line += f"  (calibrated with {result['calibration_accountant'].upper()})"
    rows = [("mechanism", result["mechanism"]), ("noise multiplier", noise_line),
            ("sampling rate q", f"{result['sampling_rate']:.6g}"),
            ("steps", str(result["steps"])), ("delta", f"{result['delta']:.3g}")]
    for key, label in EPSILON_LABELS.items():
        value = result["epsilon"].get(key)
        rows.append((f"epsilon, {label}", "n/a" if value is None else f"{value:.4f}"))
    print(table(rows))
    if result["epsilon"].get("tf_privacy_user") is not None:
        print("note: TF Privacy's compute_dp_sgd_privacy(n, batch, epochs) derives its own "
              "steps (ceil(epochs * n / batch)); 'on these steps' is its RDP on exactly the "
              f"{result['steps']} steps above")
    for note in result["notes"]:
        print(f"note: {note}")
    return 0
