"""The test-set summary of one run: classification metrics plus per-group metrics and gaps.

It sits above :mod:`dpcore.metrics.classification` and :mod:`dpcore.metrics.fairness` (which
uses the former), so the three modules import one way, without a cycle.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dpcore.metrics._checks import as_labels, as_proba
from dpcore.metrics.classification import (
    accuracy,
    auc_scores,
    class_name_list,
    per_class_metrics,
    roc_auc_of_scores,
    roc_auc_undefined_reason,
)
from dpcore.metrics.fairness import per_group_metrics


def classification_summary(
    proba: np.ndarray,
    y: np.ndarray,
    class_names: Sequence[str] | None = None,
    groups: np.ndarray | None = None,
    group_names: Sequence[str] | dict[Any, str] | None = None,
    *,
    logits: np.ndarray | None = None,
) -> dict[str, Any]:
    """All test-set classification metrics of one run, as one JSON-able dict.

    Keys: ``n``, ``n_classes``, ``accuracy``, ``auc``, ``auc_undefined_reason`` (str or
    None), ``per_class`` (the functions of the same names in
    :mod:`dpcore.metrics.classification`),
    ``per_group`` (:func:`dpcore.metrics.fairness.per_group_metrics`; the groups are the
    classes, named by ``class_names``, when ``groups`` is None) and ``gaps`` (the same as
    ``per_group["gaps"]``: max - min over groups of accuracy, recall and AUC).

    Accuracy, recall and precision are of ``argmax(proba)``. Every AUC (overall, per class,
    per group) ranks ``proba``, or, given ``logits`` (those whose softmax ``proba`` is), their
    per-class log-odds (:func:`dpcore.metrics.classification.auc_scores`).
    """
    p = as_proba(proba)
    labels = as_labels(y, p.shape[0], p.shape[1])
    if groups is None and group_names is None:
        group_names = class_name_list(class_names, p.shape[1])
    scores = auc_scores(p, logits)
    per_group = per_group_metrics(p, labels, groups, group_names, logits=logits)
    return {
        "n": int(labels.size),
        "n_classes": int(p.shape[1]),
        "accuracy": accuracy(p, labels),
        "auc": roc_auc_of_scores(scores, labels),
        "auc_undefined_reason": roc_auc_undefined_reason(p, labels),
        "per_class": per_class_metrics(p, labels, class_names, logits=logits),
        "per_group": per_group,
        "gaps": dict(per_group["gaps"]),
    }
