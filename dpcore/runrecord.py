"""Build the RunResult of one training run from its parts (written once for both backends)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

import numpy as np

from dpcore.accounting import PrivacyPlan
from dpcore.config import PerfSpec, RunConfig
from dpcore.data.dataset import Dataset
from dpcore.epochlog import TrainingOutcome
from dpcore.noise_key import noise_key_record
from dpcore.outputs import kept_outputs
from dpcore.provenance import provenance_record
from dpcore.results import RunResult, library_versions, run_id, utc_now
from dpcore.scoring import scored_metrics


def dataset_record(dataset: Dataset) -> dict[str, Any]:
    """The RunResult ``dataset`` entry: name, fingerprint, sizes, shape, classes, facts."""
    return {
        "name": dataset.name,
        "fingerprint": dataset.fingerprint,
        "n_train": int(len(dataset.x_train)),
        "n_test": int(len(dataset.x_test)),
        "input_shape": list(dataset.input_shape),
        "n_classes": dataset.n_classes,
        "class_names": list(dataset.class_names),
        "task": dataset.task,
        "source": dataset.source,
        "extra": dict(dataset.extra),
    }


def privacy_record(plan: PrivacyPlan, library_epsilon: Mapping[str, float | None],
                   steps_completed: int | None = None,
                   ldp: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The RunResult ``privacy`` entry: the plan, the library's own epsilon, steps taken."""
    out = plan.to_dict()
    out["library_epsilon"] = dict(library_epsilon)
    out["steps_completed"] = steps_completed
    if ldp is not None:
        out["ldp"] = dict(ldp)
    return out


def final_metrics(outcome: TrainingOutcome, dataset: Dataset) -> dict[str, Any]:
    """Final test metrics (accuracy, AUC, loss, per class / group, and how each was scored:
    :func:`dpcore.scoring.scored_metrics`) of a finished run."""
    if outcome.test_proba is None:
        return {"diverged_at_step": outcome.diverged_at_step}
    return scored_metrics(np.asarray(outcome.test_proba, dtype=np.float64),
                          outcome.test_logits, dataset.y_test, dataset.class_names,
                          dataset.groups_test, dataset.group_names)


def outputs_record(outcome: TrainingOutcome, dataset: Dataset) -> dict[str, Any] | None:
    """The RunResult ``test_outputs`` entry: the final test logits, labels and groups of a
    finished run whose test set is small enough (:func:`dpcore.outputs.kept_outputs`), else
    None."""
    if outcome.test_proba is None:
        return None
    kept = kept_outputs(outcome.test_logits, dataset.y_test, groups=dataset.groups_test,
                        group_names=dataset.group_names)
    return None if kept is None else kept.to_record()


def timing_record(outcome: TrainingOutcome) -> dict[str, Any]:
    """The RunResult ``timing`` entry (seconds are wall-clock; memory is peak RSS in MiB, of
    the run where the kernel allows (``peak_memory_scope: run``), else of the process)."""
    peak = outcome.peak_memory
    return {
        "epoch_seconds": list(outcome.epoch_seconds),
        "eval_seconds": list(outcome.eval_seconds),
        "total_seconds": outcome.total_seconds,
        "train_seconds": float(sum(outcome.epoch_seconds)),
        "examples_seen": outcome.examples_seen,
        "examples_per_second": outcome.examples_per_second,
        "peak_memory_mb": None if peak is None else peak.mb,
        "peak_memory_scope": None if peak is None else peak.scope,
        "peak_memory_note": None if peak is None else peak.note,
    }


def build_run_result(
    config: RunConfig, backend: str, dataset: Dataset, plan: PrivacyPlan,
    outcome: TrainingOutcome, *, perf: PerfSpec, library_epsilon: Mapping[str, float | None],
    started_at: str | None = None, perf_details: Mapping[str, Any] | None = None,
    checkpoint: str | None = None, recipe: Mapping[str, Any] | None = None,
) -> RunResult:
    """Assemble a schema-valid RunResult from a finished (or diverged) training loop.

    Args:
        config: the run's configuration.
        backend: ``tf`` or ``torch``.
        dataset: the data the run used (after any local-DP privatisation).
        plan: the resolved privacy plan.
        outcome: what :func:`dpcore.trainloop.run_training` returned.
        perf: performance switches (recorded, not hashed).
        library_epsilon: the library's own epsilon (Opacus RDP/PRV, TF Privacy).
        started_at: ISO time the run started (default: now).
        perf_details: backend facts recorded under ``perf`` (e.g. the grad-sample mode).
        checkpoint: path of the written checkpoint, if any.
        recipe: the RunResult ``recipe`` entry (:func:`dpcore.recipes.recipe_record`).
    """
    ldp = None if dataset.ldp is None else dataset.ldp.to_dict()
    perf_record = asdict(perf)
    perf_record.update(perf_details or {})
    metrics = final_metrics(outcome, dataset)
    if outcome.stopped_early:
        metrics["note"] = f"stopped early by a callback after {outcome.steps_completed} steps"
    error = None
    if outcome.diverged_at_step is not None:
        error = f"diverged: the loss was NaN/inf at step {outcome.diverged_at_step}"
    return RunResult(
        run_id=run_id(config.config_hash, backend),
        config=config.to_dict(),
        config_hash=config.config_hash,
        backend=backend,
        seed=config.seed,
        status=outcome.status,
        versions=library_versions(),
        dataset=dataset_record(dataset),
        privacy={**privacy_record(plan, library_epsilon, outcome.steps_completed, ldp),
                 **noise_key_record(config, backend)},  # which key; never the key itself
        metrics=metrics,
        history=[dict(r) for r in outcome.history],
        timing=timing_record(outcome),
        perf=perf_record,
        checkpoint=checkpoint,
        started_at=started_at or utc_now(),
        finished_at=utc_now(),
        error=error,
        recipe=dict(recipe) if recipe is not None else None,
        test_outputs=outputs_record(outcome, dataset),
        provenance=provenance_record(perf_record),
    )

