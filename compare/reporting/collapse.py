"""The collapsed-run rule: a model that (almost) always predicts one class, or is at chance.

A run is *collapsed* when either

* its test predictions are (almost) all one class: the most predicted class takes at least
  :data:`DOMINANT_SHARE` of the test set, or
* it is *at chance*: its test accuracy is not significantly above the majority-class rate
  (the accuracy of always predicting the most frequent test class) by a one-sided exact
  binomial test at level :data:`ALPHA` (scipy.stats.binomtest, ``alternative="greater"``:
  H0 "the model's accuracy is the majority rate", k = round(accuracy * n) correct of the
  run's n test examples). A fixed margin (the former "within 1 point") is smaller than the
  sampling error of a test accuracy (about 1.6 points at n = 1000); the test scales with n.
  Example (n = 1000, rate 0.5): 0.52 has p = 0.109 (at chance), 0.54 has p = 0.006.

Such a model's Grad-CAM faithfulness describes a (nearly) constant or chance-level function,
so reports show it apart. Everything is read from the run's stored ``metrics`` (``accuracy`` and the
``per_class`` list of :func:`dpcore.metrics.per_class_metrics`: ``support``, ``recall``,
``precision`` per class).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from scipy import stats

#: Share of test predictions in one class at or above which a run is collapsed.
DOMINANT_SHARE = 0.98
#: Level of the one-sided binomial test against the majority rate: p >= ALPHA is at chance.
ALPHA = 0.05


def n_test_examples(per_class: Sequence[Mapping[str, Any]]) -> int:
    """Number of test examples: the sum of the per-class supports (0 without them)."""
    return sum(int(c.get("support") or 0) for c in per_class)


def above_chance_p_value(accuracy: float, rate: float, n_test: int) -> float:
    """One-sided exact binomial p-value of ``accuracy`` (fraction of ``n_test``) against the
    majority ``rate``: P(X >= k) for X ~ Binomial(n_test, rate), k = round(accuracy * n).

    Raises:
        ValueError: ``n_test < 1``, or an accuracy or rate outside [0, 1].
    """
    if n_test < 1 or not (0.0 <= accuracy <= 1.0 and 0.0 <= rate <= 1.0):
        raise ValueError(f"accuracy={accuracy!r}, rate={rate!r}, n_test={n_test!r}: need "
                         "fractions in [0, 1] and at least 1 test example")
    k = round(float(accuracy) * n_test)
    return float(stats.binomtest(k, n_test, float(rate), alternative="greater").pvalue)


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

    The reason is one short phrase, e.g. ``"99.6% of predictions are 'PNEUMONIA'"`` or
    ``"at chance: accuracy 0.520 is not above the majority rate 0.500 (one-sided binomial
    test, n = 1000, p = 0.11)"``.
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
    n_test = n_test_examples(per_class)
    if n_test < 1 or not 0.0 <= float(accuracy) <= 1.0:
        return None  # nothing to test (not a stored run's accuracy over its test set)
    p_value = above_chance_p_value(float(accuracy), rate, n_test)
    if p_value >= ALPHA:
        return (f"at chance: accuracy {float(accuracy):.3f} is not above the majority rate "
                f"{rate:.3f} (one-sided binomial test, n = {n_test}, p = {p_value:.2g})")
    return None


def _nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


__all__ = ["ALPHA", "DOMINANT_SHARE", "above_chance_p_value", "collapse_reason",
           "majority_rate", "predicted_shares", "n_test_examples"]
