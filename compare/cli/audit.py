"""``dpcompare audit``: membership-inference audit of a stored run, written into its result.

Reads ``RUN_DIR/result.json`` (config, backend, claimed epsilon and delta) and the run's
checkpoint, rebuilds the data set it was trained on (the fingerprint must match) and the
model with the backend that trained it, then attacks it: members are training examples,
non-members held-out ones, ``N`` of each (seeded). Prints the attacks' AUC and advantage,
the held-out advantage with its 95% interval, and the bound (epsilon, delta)-DP allows; the
run is flagged when the interval lies entirely above the bound. The audit is stored as the
``audit`` entry of ``RUN_DIR/result.json`` (atomic rewrite; other entries untouched).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from compare.cli.common import add_data_dir_option, print_json


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "audit", help="membership-inference audit of a stored run (attack AUC vs the DP bound)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("run_dir", metavar="RUN_DIR",
                        help="a run folder holding result.json and checkpoint.npz "
                        "(e.g. dpcompare-runs/runs/<hash>-torch)")
    add_data_dir_option(parser)
    parser.add_argument("--n", type=int, default=None,
                        help="members and non-members each (default: the size of the smaller "
                        "of the training and held-out sets)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the audited subsets and of the attacks' splits (default 0)")
    parser.add_argument("--json", action="store_true", help="print the audit as JSON")
    parser.set_defaults(func=run)


def dry_run(args: argparse.Namespace) -> int:
    """``--dry-run``: the run, its checkpoint and its data checked; nothing attacked or
    written."""
    from compare import api

    print(api.audit(args.run_dir, data_dir=args.data_dir, n=args.n, seed=args.seed,
                    dry_run=True))
    return 0


def run(args: argparse.Namespace) -> int:
    from compare import api
    from dpcore.results import RESULT_FILE

    audit = api.audit(args.run_dir, data_dir=args.data_dir, n=args.n, seed=args.seed)
    if args.json:
        print_json(audit)
    else:
        print_audit(audit, Path(args.run_dir) / RESULT_FILE)
    return 0


def print_audit(audit: dict[str, Any], path: Path) -> None:
    """Human-readable lines: per-attack AUC/advantage, held-out advantage, bound, verdict."""
    print(f"members / non-members   {audit['n_members']} / {audit['n_nonmembers']}  "
          f"(accuracy {audit['member_accuracy']:.3f} / {audit['nonmember_accuracy']:.3f}, "
          f"mean loss {audit['member_mean_loss']:.3f} / {audit['nonmember_mean_loss']:.3f})")
    for name, figures in audit["attacks"].items():
        print(f"{name:<24}AUC {figures['auc']:.3f}  advantage {figures['advantage']:.3f}")
    ours = audit["loss_threshold"]
    print(f"{'held-out advantage':<24}{ours['heldout_advantage']:.3f}  "
          f"{ours['confidence']:.0%} CI [{ours['ci_low']:.3f}, {ours['ci_high']:.3f}]")
    eps = audit["epsilon"]
    kind = {"epsilon_pld": "PLD", "epsilon_rdp": "RDP"}
    used = (str(audit["epsilon_accountant"]).upper() if audit.get("epsilon_accountant")
            else next((name for key, name in kind.items() if key in str(audit.get("claim"))),
                      ""))
    claim = ("no DP claim" if eps is None else
             f"epsilon {eps:.4g} by the shared {used} accountant (the smaller of its RDP and "
             f"PLD figures), delta {audit['delta']:.3g}")
    print(f"{'bound':<24}{audit['bound']:.3f}  ({claim})")
    verdict = ("SUSPECTED PRIVACY BUG: the advantage exceeds the bound"
               if audit["suspected_privacy_bug"] else "within the bound")
    print(f"{'verdict':<24}{verdict}")
    print(f"{'result':<24}{path}")
    sys.stdout.flush()
