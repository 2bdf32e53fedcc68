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
import json
import sys
from pathlib import Path
from typing import Any

from compare.cli.common import add_data_dir_option, print_json
from dpcore.backend import BACKENDS, load_backend
from dpcore.errors import DataError, DpCompareError


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


def load_audited(args: argparse.Namespace) -> tuple[Any, Path, Path, Any]:
    """The stored run to audit, checked: (its RunResult, its result file, its checkpoint, the
    data set rebuilt with the fingerprint it trained on).

    Raises:
        DpCompareError: no readable record, a run not finished, no checkpoint.
        DataError: the rebuilt data set is not the one the run trained on.
    """
    from dpcore.config import RunConfig
    from dpcore.pipeline import prepare_dataset
    from dpcore.results import RESULT_FILE, read_result
    from dpcore.trained import CHECKPOINT_FILE

    run_dir = Path(args.run_dir)
    result_path = run_dir / RESULT_FILE
    result = read_result(result_path)
    if result is None:
        raise DpCompareError(f"{result_path} is missing or not a readable RunResult; "
                             "give a run folder written by `dpcompare train`")
    if result.status != "finished":
        raise DpCompareError(f"run {result.run_id} has status {result.status!r}; only "
                             "finished runs can be audited")
    if result.backend not in BACKENDS:
        raise DpCompareError(f"run {result.run_id} has backend {result.backend!r}; valid: "
                             f"{', '.join(BACKENDS)}")
    checkpoint = _checkpoint_path(run_dir, result.checkpoint, CHECKPOINT_FILE)
    config = RunConfig.from_dict(result.config)
    dataset = prepare_dataset(config, args.data_dir)
    expected = result.dataset.get("fingerprint")
    if expected and dataset.fingerprint != expected:
        raise DataError(
            f"the data set rebuilt for {result.run_id} has fingerprint {dataset.fingerprint}, "
            f"but the run trained on {expected}: the members would not be its training set; "
            "give the --data-dir the run used"
        )
    return result, result_path, checkpoint, dataset


def dry_run(args: argparse.Namespace) -> int:
    """``--dry-run``: the run, its checkpoint and its data checked; nothing attacked or
    written."""
    result, result_path, _checkpoint, dataset = load_audited(args)
    print(f"dry run: would audit {result.run_id} ({result.backend}) on {dataset.name}: "
          f"{args.n or 'all'} members and non-members each, seed {args.seed}; the audit "
          f"would be stored in {result_path}")
    return 0


def run(args: argparse.Namespace) -> int:
    from compare.audit import audit_trained

    result, result_path, checkpoint, dataset = load_audited(args)
    trained = load_backend(result.backend).load_checkpoint(checkpoint)
    audit = audit_trained(trained, dataset, result.privacy, n=args.n, seed=args.seed)
    _store_audit(result_path, audit)
    if args.json:
        print_json(audit)
    else:
        print_audit(audit, result_path)
    return 0


def _checkpoint_path(run_dir: Path, recorded: str | None, default_name: str) -> Path:
    """The recorded checkpoint if it exists, else ``RUN_DIR/checkpoint.npz`` (moved stores)."""
    if recorded and Path(recorded).is_file():
        return Path(recorded)
    fallback = run_dir / default_name
    if fallback.is_file():
        return fallback
    raise DpCompareError(f"no checkpoint for {run_dir}: neither {recorded} nor {fallback} "
                         "exists; train the run again with `dpcompare train`")


def _store_audit(result_path: Path, audit: dict[str, Any]) -> None:
    """Re-read the file and replace only its ``audit`` entry (validated, atomic write)."""
    from dpcore.results import atomic_write_json, json_safe, validate_result_dict

    raw = json.loads(result_path.read_text(encoding="utf-8"))
    raw["audit"] = json_safe(audit)
    validate_result_dict(raw)
    atomic_write_json(result_path, raw)


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
