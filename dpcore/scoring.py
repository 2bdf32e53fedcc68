"""How a run's test metrics are scored, and how they are recomputed from a record's outputs.

A run's final metrics (:func:`scored_metrics`) are scored from its test outputs by one of the
methods of :data:`SCORING_METHODS`, per family of metrics (:data:`SCORED_METRICS`):

* ``accuracy``: every figure of the predicted class (accuracy, per-class recall and precision,
  per-group accuracy and recall): the argmax of the backend's float32 softmax;
* ``loss``: the mean cross-entropy of the backend's float32 softmax (floored at 1e-12);
* ``auc``: every AUC (overall, per class, per group, the AUC gap): from the logits, as the
  per-class log-odds (:func:`dpcore.metrics.log_odds`), which rank examples as the exact
  softmax does. The float32 softmax rounds the probabilities of a saturated model to exactly
  0 or 1, and its tied examples lower the AUC towards chance.

Each record says so in ``metrics["scoring"]`` (:data:`RUN_SCORING`); a record without the
entry was scored from the float32 softmax throughout (:data:`UNRECORDED_SCORING`), and is read
so (:func:`scoring_of`). The local-DP clean/privatised test metrics carry their own entry.

A record that keeps its test outputs (:mod:`dpcore.outputs`) can be re-scored without model or
data (:func:`recompute_metrics`, :func:`rescored`): the AUCs are recomputed bit for bit from
the logits; the figures of the float32 softmax are recomputed from numpy's float32 softmax of
the same logits, which rounds differently from TensorFlow's and PyTorch's kernels (measured on
cnn4 outputs: a third to two thirds of the probabilities differ, by at most 5 units in the last
place, besides those below about 3e-38, which TensorFlow's kernel sets to 0), so the predicted
classes agree unless two classes tie to within that rounding, and the loss (probabilities
floored at 1e-12) agrees to :data:`LOSS_TOLERANCE` (:func:`recomputation_differences` checks
both).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from dpcore.metrics import classification_summary
from dpcore.outputs import TestOutputs
from dpcore.predicting import test_loss_and_accuracy

if TYPE_CHECKING:
    from dpcore.results import RunResult

#: The float32 softmax probabilities a backend's ``predict_proba`` gives.
SOFTMAX_FLOAT32 = "softmax_float32"
#: The float32 logits a backend's ``predict_logits`` gives (AUC: their per-class log-odds).
LOGITS = "logits"

#: Method name -> what it scores from (the values a record's ``metrics["scoring"]`` holds).
SCORING_METHODS: Mapping[str, str] = MappingProxyType({
    SOFTMAX_FLOAT32: "the backend's float32 softmax probabilities (a saturated model rounds "
                     "them to exactly 0 or 1, which ties examples)",
    LOGITS: "the float32 logits (an AUC ranks their per-class log-odds, the exact softmax's "
            "ranking)",
})

#: The families of metrics a record names a method for (see the module docstring).
SCORED_METRICS: tuple[str, ...] = ("accuracy", "loss", "auc")

#: How a run's final metrics are scored.
RUN_SCORING: Mapping[str, str] = MappingProxyType(
    {"accuracy": SOFTMAX_FLOAT32, "loss": SOFTMAX_FLOAT32, "auc": LOGITS})

#: How the metrics of a record without ``metrics["scoring"]`` were scored.
UNRECORDED_SCORING: Mapping[str, str] = MappingProxyType(
    {metric: SOFTMAX_FLOAT32 for metric in SCORED_METRICS})

#: Largest relative difference between a recorded loss and the loss recomputed from the
#: record's logits (numpy's float32 softmax against the backend's; see the module docstring).
LOSS_TOLERANCE = 1e-6

#: The keys of a run's ``metrics`` that :func:`scored_metrics` writes (and a re-scoring replaces).
SCORED_KEYS: tuple[str, ...] = ("n", "n_classes", "accuracy", "auc", "auc_undefined_reason",
                                "per_class", "per_group", "gaps", "loss", "scoring")


def scoring_of(metrics: Mapping[str, Any]) -> dict[str, str]:
    """The method each family of ``metrics`` (a record's ``metrics``, or its local-DP clean /
    privatised entry) was scored by: its ``scoring`` entry over :data:`UNRECORDED_SCORING`."""
    return {**UNRECORDED_SCORING, **dict(metrics.get("scoring") or {})}


def softmax_float32(logits: np.ndarray) -> np.ndarray:
    """The softmax of ``logits`` [N, K] in float32 (maximum subtracted, exp, divided by the
    row sum): numpy's version of what the backends' ``predict_proba`` computes, equal to it
    up to the kernels' rounding (see the module docstring)."""
    z = np.asarray(logits, dtype=np.float32)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def scored_metrics(proba: np.ndarray, logits: np.ndarray | None, y: np.ndarray,
                 class_names: Sequence[str] | None = None, groups: np.ndarray | None = None,
                 group_names: Sequence[str] | None = None) -> dict[str, Any]:
    """A run's test metrics: :func:`dpcore.metrics.classification_summary` (its AUCs from
    ``logits`` when they are given and finite, else from ``proba``), ``loss`` (the mean
    cross-entropy of ``proba`` in float64, :func:`dpcore.trainloop.test_loss_and_accuracy`)
    and ``scoring`` (the methods used; see the module docstring).

    Args:
        proba: the backend's softmax probabilities [N, K] (float32).
        logits: the logits [N, K] ``proba`` is the softmax of, from the same forward pass,
            or None.
        y: the true classes [N].
        class_names, groups, group_names: as
            :func:`~dpcore.metrics.classification_summary` takes them.
    """
    scored = logits is not None and bool(np.all(np.isfinite(logits)))
    metrics = classification_summary(proba, y, class_names, groups, group_names,
                                     logits=logits if scored else None)
    metrics["loss"] = test_loss_and_accuracy(np.asarray(proba, dtype=np.float64), y)[0]
    metrics["scoring"] = {**RUN_SCORING, "auc": LOGITS if scored else SOFTMAX_FLOAT32}
    return metrics


def recompute_metrics(outputs: TestOutputs, class_names: Sequence[str] | None = None
                      ) -> dict[str, Any]:
    """The :func:`scored_metrics` of a record's test outputs: the AUCs from their logits, the
    figures of the float32 softmax from :func:`softmax_float32` of them."""
    return scored_metrics(softmax_float32(outputs.logits), outputs.logits, outputs.labels,
                        class_names, outputs.groups, outputs.group_names)


def outputs_of(result: RunResult) -> TestOutputs | None:
    """The test outputs ``result`` keeps (:mod:`dpcore.outputs`), or None.

    Raises:
        DataError: they are damaged (naming the run).
    """
    raw = getattr(result, "test_outputs", None)
    return None if raw is None else TestOutputs.from_record(raw, result.run_id)


def rescored(result: RunResult) -> RunResult:
    """``result`` with the metrics its test outputs determine (:data:`SCORED_KEYS`) recomputed
    from them (:func:`recompute_metrics`); the other metrics as recorded. A result without
    outputs, or not finished, is returned as it is."""
    outputs = outputs_of(result)
    if outputs is None or result.status != "finished":
        return result
    recomputed = recompute_metrics(outputs, result.dataset.get("class_names"))
    return dataclasses.replace(result, metrics={**result.metrics, **recomputed})


def rescored_results(results: Sequence[RunResult]) -> tuple[list[RunResult], list[str]]:
    """:func:`rescored` of each of ``results`` (same order), and one message per run whose
    recorded figures differ from the recomputed ones (:func:`recomputation_differences`:
    a record whose metrics and outputs disagree), naming the run and its first difference."""
    out, problems = [], []
    for result in results:
        new = rescored(result)
        if new is not result:
            differences = recomputation_differences(result.metrics, new.metrics)
            if differences:
                problems.append(f"run {result.run_id}: its metrics differ from those its test "
                                f"outputs give ({len(differences)} figure(s); first: "
                                f"{differences[0]}); the report shows the recomputed ones")
        out.append(new)
    return out, problems


def recomputation_differences(recorded: Mapping[str, Any], recomputed: Mapping[str, Any]
                              ) -> list[str]:
    """Where the figures ``recomputed`` from a record's outputs differ from the ``recorded``
    ones (empty: they agree): the loss by more than :data:`LOSS_TOLERANCE` (relative), any
    other figure (accuracy, AUC, per-class and per-group figures, gaps, counts) at all. Each
    entry names the figure and both values."""
    problems = []
    for key, old, new in _figures(recorded, recomputed):
        if old is None and new is None:
            continue
        if isinstance(old, float) and isinstance(new, float) and math.isnan(old) \
                and math.isnan(new):
            continue
        if key == "loss" and old is not None and new is not None and math.isclose(
                old, new, rel_tol=LOSS_TOLERANCE):
            continue
        if old != new:
            problems.append(f"{key}: recorded {old!r}, recomputed {new!r}")
    return problems


def _figures(recorded: Mapping[str, Any], recomputed: Mapping[str, Any]
             ) -> Iterator[tuple[str, Any, Any]]:
    """(name, recorded, recomputed) of every figure :func:`scored_metrics` writes."""
    for key in ("n", "n_classes", "accuracy", "auc", "loss"):
        yield key, _number(recorded.get(key)), _number(recomputed.get(key))
    for key in ("accuracy", "recall", "auc"):
        yield (f"gaps.{key}", _number((recorded.get("gaps") or {}).get(key)),
               _number((recomputed.get("gaps") or {}).get(key)))
    rows = (("per_class", recorded.get("per_class") or [], recomputed.get("per_class") or [],
             ("support", "recall", "precision", "auc")),
            ("per_group", (recorded.get("per_group") or {}).get("groups") or [],
             (recomputed.get("per_group") or {}).get("groups") or [],
             ("n", "accuracy", "recall", "auc")))
    for name, old_rows, new_rows, keys in rows:
        if len(old_rows) != len(new_rows):
            yield f"{name} (rows)", len(old_rows), len(new_rows)
            continue
        for i, (old, new) in enumerate(zip(old_rows, new_rows, strict=True)):
            for key in keys:
                yield (f"{name}[{i}].{key}", _number(old.get(key)), _number(new.get(key)))


def _number(value: Any) -> Any:
    """A figure as read back from JSON: NaN and None are both "undefined" (None)."""
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


__all__ = ["LOGITS", "LOSS_TOLERANCE", "RUN_SCORING", "SCORED_KEYS", "SCORED_METRICS",
           "SCORING_METHODS", "SOFTMAX_FLOAT32", "UNRECORDED_SCORING", "outputs_of",
           "recompute_metrics", "recomputation_differences", "rescored", "rescored_results",
           "scored_metrics",
           "scoring_of", "softmax_float32"]
