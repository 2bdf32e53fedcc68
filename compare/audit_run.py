"""Membership-inference audit of a stored run, written into its result (``dpcompare audit``,
:func:`compare.api.audit` is :func:`audit`).

Reads ``RUN_DIR/result.json`` (config, backend, claimed epsilon and delta) and the run's
checkpoint, rebuilds the data set it was trained on (the fingerprint must match) and the model
with the backend that trained it, attacks it (:func:`dpcore.evaluation.membership.audit_trained`)
and stores the audit as the ``audit`` entry of ``RUN_DIR/result.json`` (atomic rewrite; other
entries untouched).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dpcore.backend import BACKENDS, load_backend
from dpcore.config import RunConfig
from dpcore.errors import DataError, DpCompareError
from dpcore.evaluation.membership import audit_trained
from dpcore.pipeline import prepare_dataset
from dpcore.results import (
    RESULT_FILE,
    atomic_write_json,
    json_safe,
    read_result,
    validate_result_dict,
)
from dpcore.trained import CHECKPOINT_FILE, verify_checkpoint


def audit(run_dir: str | Path, *, data_dir: str | Path | None = None, n: int | None = None,
          seed: int = 0, dry_run: bool = False) -> dict[str, Any] | str:
    """Membership-inference audit of a stored run (``dpcompare audit``): the model rebuilt from
    its checkpoint by the backend that trained it, attacked on ``n`` training examples
    (members) and ``n`` held-out ones (default: the smaller set's size; seeded subsets), the
    held-out advantage's interval compared with the bound its (epsilon, delta) allows; stored
    as the ``audit`` entry of ``run_dir/result.json``.

    Returns:
        The audit (attacks' AUC and advantage, held-out advantage and interval, bound,
        ``suspected_privacy_bug``: :func:`dpcore.evaluation.membership.run_membership_audit`);
        with ``dry_run`` (the run, checkpoint and data checked, nothing attacked or written)
        the line that says what would be done.

    Raises:
        DpCompareError: no readable record, a run not finished, no checkpoint.
        DataError: the rebuilt data set is not the one the run trained on.
    """
    if dry_run:
        return dry_run_line(run_dir, data_dir, n, seed)
    return audit_run(run_dir, data_dir, n=n, seed=seed)


def load_audited(run_dir: str | Path, data_dir: str | Path | None = None
                 ) -> tuple[Any, Path, Path, Any]:
    """The stored run to audit, checked: (its RunResult, its result file, its checkpoint, the
    data set rebuilt with the fingerprint it trained on).

    Raises:
        DpCompareError: no readable record, a run not finished, no checkpoint.
        DataError: the rebuilt data set is not the one the run trained on.
    """
    run_dir = Path(run_dir)
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
    checkpoint = verify_checkpoint(checkpoint_path(run_dir, result.checkpoint, CHECKPOINT_FILE),
                                   result.checkpoint_sha256)  # the file the run stored
    config = RunConfig.from_dict(result.config)
    dataset = prepare_dataset(config, data_dir)
    expected = result.dataset.get("fingerprint")
    if expected and dataset.fingerprint != expected:
        raise DataError(
            f"the data set rebuilt for {result.run_id} has fingerprint {dataset.fingerprint}, "
            f"but the run trained on {expected}: the members would not be its training set; "
            "give the --data-dir the run used"
        )
    return result, result_path, checkpoint, dataset


def dry_run_line(run_dir: str | Path, data_dir: str | Path | None, n: int | None,
                 seed: int) -> str:
    """The run, its checkpoint and its data checked (:func:`load_audited`); nothing attacked
    or written. Returns the line ``dpcompare audit --dry-run`` prints."""
    result, result_path, _checkpoint, dataset = load_audited(run_dir, data_dir)
    return (f"dry run: would audit {result.run_id} ({result.backend}) on {dataset.name}: "
            f"{n or 'all'} members and non-members each, seed {seed}; the audit "
            f"would be stored in {result_path}")


def audit_run(run_dir: str | Path, data_dir: str | Path | None = None, *, n: int | None = None,
              seed: int = 0) -> dict[str, Any]:
    """Audit the stored run in ``run_dir`` and store the audit in its result file; returns
    the audit (see :func:`dpcore.evaluation.membership.run_membership_audit`)."""
    result, result_path, checkpoint, dataset = load_audited(run_dir, data_dir)
    backend = load_backend(result.backend)
    trained = backend.load_checkpoint(checkpoint)
    found = audit_trained(backend, trained, dataset, result.privacy, n=n, seed=seed)
    store_audit(result_path, found)
    return found


def checkpoint_path(run_dir: Path, recorded: str | None, default_name: str) -> Path:
    """The recorded checkpoint if it exists, else ``RUN_DIR/checkpoint.npz`` (moved stores)."""
    if recorded and Path(recorded).is_file():
        return Path(recorded)
    fallback = run_dir / default_name
    if fallback.is_file():
        return fallback
    raise DpCompareError(f"no checkpoint for {run_dir}: neither {recorded} nor {fallback} "
                         "exists; train the run again with `dpcompare train`")


def store_audit(result_path: Path, audit: dict[str, Any]) -> None:
    """Re-read the file and replace only its ``audit`` entry (validated, atomic write)."""
    raw = json.loads(result_path.read_text(encoding="utf-8"))
    raw["audit"] = json_safe(audit)
    validate_result_dict(raw)
    atomic_write_json(result_path, raw)
