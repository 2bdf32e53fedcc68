"""The collapsed-run rule: a model that (almost) always predicts one class.

A run is *collapsed* when either

* its test predictions are (almost) all one class: the most predicted class takes at least
  :data:`DOMINANT_SHARE` of the test set, or
* its test accuracy is no more than :data:`MAJORITY_MARGIN` (1 percentage point) above the
  majority-class rate (the accuracy of always predicting the most frequent test class): within
  1 point of it, or below it. A model below that rate has learned nothing a constant
  prediction would not do better (a balanced binary task at 0.48 is a coin flip).

Such a model's Grad-CAM faithfulness describes a (nearly) constant or chance-level function,
so reports show it apart. Everything is read from the run's stored ``metrics`` (``accuracy`` and the
``per_class`` list of :func:`dpcore.metrics.per_class_metrics`: ``support``, ``recall``,
``precision`` per class).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

#: Share of test predictions in one class at or above which a run is collapsed.
DOMINANT_SHARE = 0.98
#: Accuracy at most this far (fraction, 0.01 = 1 point) above the majority rate: collapsed.
MAJORITY_MARGIN = 0.01


def majority_rate(per_class: Sequence[Mapping[str, Any]]) -> float:
    """Share of the most frequent class in the test set (NaN without supports)."""
    supports = [int(c.get("support") or 0) for c in per_class]
    total = sum(supports)
    return max(supports) / total if total else math.nan


def predicted_shares(per_class: Sequence[Mapping[str, Any]]) -> list[float] | None:
    """Share of test predictions in each class, recovered from recall, precision and support.

    hits_k = recall_k * support_k; predicted_k = hits_k / precision_k (0 when precision is
    NaN: the class is never predicted). A class with precision 0 is predicted but never right,
    so its count is not recoverable; with exactly one such class it is the remainder, with more
    they share the remainder evenly (a lower bound on the largest share is all the rule needs).
    None when the list is empty or lacks the fields. Written by hand: no library inverts
    these per-class figures.
    """
    total = sum(int(c.get("support") or 0) for c in per_class)
    if not per_class or total == 0:
        return None
    counts: list[float | None] = []
    for entry in per_class:
        support = int(entry.get("support") or 0)
        recall, precision = entry.get("recall"), entry.get("precision")
        hits = 0.0 if recall is None or _nan(recall) else float(recall) * support
        if precision is None or _nan(precision):
            counts.append(0.0)
        elif float(precision) > 0:
            counts.append(round(hits / float(precision)))
        else:
            counts.append(None)
    unknown = [i for i, c in enumerate(counts) if c is None]
    rest = max(0.0, total - sum(c for c in counts if c is not None))
    filled = [c if c is not None else rest / len(unknown) for c in counts]
    return [c / total for c in filled]


def collapse_reason(metrics: Mapping[str, Any]) -> str | None:
    """Why a run with these stored ``metrics`` is collapsed, or None if it is not.

    The reason is one short phrase, e.g. ``"99.6% of predictions are 'PNEUMONIA'"``,
    ``"accuracy 0.625 is within 1 point of the majority rate 0.625"`` or
    ``"accuracy 0.483 is below the majority rate 0.500"``.
    """
    per_class = metrics.get("per_class") or []
    shares = predicted_shares(per_class)
    if shares is not None:
        top = max(range(len(shares)), key=shares.__getitem__)
        if shares[top] >= DOMINANT_SHARE:
            name = per_class[top].get("name", per_class[top].get("index", top))
            return f"{100 * shares[top]:.1f}% of predictions are {str(name)!r}"
    accuracy = metrics.get("accuracy")
    rate = majority_rate(per_class) if per_class else math.nan
    if accuracy is None or _nan(accuracy) or math.isnan(rate):
        return None
    if float(accuracy) < rate - MAJORITY_MARGIN:
        return f"accuracy {float(accuracy):.3f} is below the majority rate {rate:.3f}"
    if float(accuracy) - rate <= MAJORITY_MARGIN:
        return (f"accuracy {float(accuracy):.3f} is within {100 * MAJORITY_MARGIN:g} point of "
                f"the majority rate {rate:.3f}")
    return None


def _nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


__all__ = ["DOMINANT_SHARE", "MAJORITY_MARGIN", "collapse_reason", "majority_rate",
           "predicted_shares"]
