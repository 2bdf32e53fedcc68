"""Per-group metrics and their gaps (how unevenly a model's quality falls on groups).

A group is any partition of the test set given as one group value per example (a
demographic attribute, an acquisition site, ...). With no groups given, the groups are the
classes, which gives the per-class accuracy gap DP is known to widen.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from dpcore.errors import DataError
from dpcore.metrics._checks import as_labels, as_proba
from dpcore.metrics.classification import (
    NAN,
    auc_scores,
    one_vs_rest_auc_of_scores,
    roc_auc_of_scores,
)

#: The per-group metrics whose gaps are reported.
GROUP_METRICS = ("accuracy", "recall", "auc")


def per_group_metrics(
    proba: np.ndarray,
    y: np.ndarray,
    groups: np.ndarray | None = None,
    group_names: Sequence[str] | Mapping[Any, str] | None = None,
    *,
    logits: np.ndarray | None = None,
) -> dict[str, Any]:
    """Accuracy, macro recall and AUC of each group; their gaps and the worst groups.

    Per group g (the examples S_g with ``groups[i] == g``):

    * ``n``: |S_g|;
    * ``accuracy``: fraction of S_g with argmax(proba) == y, in [0, 1];
    * ``recall``: macro recall over the classes present in S_g, i.e. the mean over those
      classes k of #{i in S_g: y_i = k, pred_i = k} / #{i in S_g: y_i = k};
    * ``auc``: with explicit ``groups``, :func:`roc_auc` restricted to S_g (NaN when a class
      is absent from S_g). With ``groups=None`` each group holds one class, where an AUC
      restricted to the group is undefined, so ``auc`` is then the one-vs-rest AUC of that
      class over all N examples. ``auc_definition`` says which ("within_group" or
      "one_vs_rest"). The AUCs rank :func:`~dpcore.metrics.classification.auc_scores`: the
      probabilities, or the log-odds of ``logits`` when given.

    Gaps: for each metric, max - min over the groups where it is finite (NaN if none is).
    Worst group: the group with the lowest value of each metric (NaN values skipped, ties to
    the first group in sorted order); ``worst_group`` is the one by accuracy.

    Args:
        proba: predicted probabilities [N, K].
        y: integer labels [N] in 0..K-1.
        groups: one group value per example [N] (ints or strings), or None for the classes.
        group_names: display names, either a sequence indexed by integer group value or a
            mapping from group value to name; missing names default to ``str(value)``.
        logits: the logits whose softmax ``proba`` is, or None.

    Returns:
        ``{"groups": [{"group", "name", "n", "accuracy", "recall", "auc"}, ...] (sorted by
        group value), "gaps": {metric: float}, "worst_group": name,
        "worst_group_by_metric": {metric: name or None}, "auc_definition": str}``.
    """
    p = as_proba(proba)
    scores = auc_scores(p, logits)
    labels = as_labels(y, p.shape[0], p.shape[1])
    if groups is None:
        group_arr, definition = labels, "one_vs_rest"
    else:
        group_arr, definition = np.asarray(groups), "within_group"
        if group_arr.shape != labels.shape:
            raise DataError(
                f"groups must have one value per example, shape {labels.shape}; "
                f"got {group_arr.shape}"
            )
    pred = np.argmax(p, axis=1)
    rows: list[dict[str, Any]] = []
    for value in np.unique(group_arr):
        member = group_arr == value
        g_labels, g_pred = labels[member], pred[member]
        recalls = [np.mean(g_pred[g_labels == k] == k) for k in np.unique(g_labels)]
        if groups is None:
            auc = one_vs_rest_auc_of_scores(scores, labels, int(value))
        else:
            auc = roc_auc_of_scores(scores[member], g_labels)
        key = value.item()
        rows.append({
            "group": key,
            "name": _group_name(group_names, key),
            "n": int(member.sum()),
            "accuracy": float(np.mean(g_pred == g_labels)),
            "recall": float(np.mean(recalls)),
            "auc": auc,
        })
    gaps: dict[str, float] = {}
    worst: dict[str, str | None] = {}
    for metric in GROUP_METRICS:
        finite = [r for r in rows if np.isfinite(r[metric])]
        values = [r[metric] for r in finite]
        gaps[metric] = float(max(values) - min(values)) if values else NAN
        worst[metric] = finite[int(np.argmin(values))]["name"] if values else None
    return {
        "groups": rows,
        "gaps": gaps,
        "worst_group": worst["accuracy"],
        "worst_group_by_metric": worst,
        "auc_definition": definition,
    }


def _group_name(group_names: Sequence[str] | Mapping[Any, str] | None, value: Any) -> str:
    if group_names is None:
        return str(value)
    if isinstance(group_names, Mapping):
        return str(group_names.get(value, value))
    if isinstance(value, int) and 0 <= value < len(group_names):
        return str(group_names[value])
    return str(value)
