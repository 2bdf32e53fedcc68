"""Classification and per-group metrics on small hand-computed tables."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from dpcore.errors import DataError
from dpcore.metrics import (
    accuracy,
    classification_summary,
    per_class_metrics,
    per_group_metrics,
    roc_auc,
    roc_auc_undefined_reason,
)
from dpcore.results import json_safe

# Six examples, three classes (rows sum to 1). Predictions (argmax):
#   r0 -> 0 (y 0, right)   r1 -> 1 (y 0, wrong)   r2 -> 1 (y 1, right)
#   r3 -> 0 (y 1, wrong)   r4 -> 2 (y 2, right)   r5 -> 2 (y 2, right)
PROBA3 = np.array([
    [0.6, 0.3, 0.1],
    [0.3, 0.4, 0.3],
    [0.2, 0.5, 0.3],
    [0.5, 0.3, 0.2],
    [0.1, 0.2, 0.7],
    [0.2, 0.2, 0.6],
])
Y3 = np.array([0, 0, 1, 1, 2, 2])
# One-vs-rest AUCs = fraction of (positive, negative) pairs ranked right, ties count 1/2:
#   class 0: positives .6, .3 vs negatives .2, .5, .1, .2 -> .6 wins 4, .3 wins 3 -> 7/8
#   class 1: positives .5, .3 vs negatives .3, .4, .2, .2 -> .5 wins 4, .3: tie + 2 wins = 2.5
#            -> 6.5/8
#   class 2: positives .7, .6 vs negatives .1, .3, .3, .2 -> 8/8
AUC_OVR = [7 / 8, 6.5 / 8, 1.0]


def test_accuracy_counts_argmax_hits() -> None:
    proba = np.array([[0.9, 0.1], [0.4, 0.6], [0.3, 0.7], [0.8, 0.2]])
    # predictions 0, 1, 1, 0 against labels 0, 1, 0, 0: three right of four.
    assert accuracy(proba, np.array([0, 1, 0, 0])) == 0.75
    assert accuracy(PROBA3, Y3) == pytest.approx(4 / 6)


def test_binary_auc_uses_the_positive_column() -> None:
    # scores .1, .4 (negatives) and .35, .8 (positives): .35 beats .1 only, .8 beats both
    # -> 3 of 4 pairs.
    p1 = np.array([0.1, 0.4, 0.35, 0.8])
    proba = np.stack([1 - p1, p1], axis=1)
    assert roc_auc(proba, np.array([0, 0, 1, 1])) == pytest.approx(0.75)


def test_multiclass_auc_is_the_macro_one_vs_rest_mean() -> None:
    assert roc_auc(PROBA3, Y3) == pytest.approx(sum(AUC_OVR) / 3)  # 2.6875 / 3
    # scikit-learn's own multiclass call agrees
    assert roc_auc(PROBA3, Y3) == pytest.approx(
        roc_auc_score(Y3, PROBA3, multi_class="ovr", average="macro")
    )
    # rows that do not sum to 1 (float32 rounding) are accepted, not rejected
    assert roc_auc(PROBA3 * 0.999, Y3) == pytest.approx(sum(AUC_OVR) / 3)
    assert roc_auc_undefined_reason(PROBA3, Y3) is None


def test_auc_is_nan_with_a_reason_when_a_class_is_missing() -> None:
    y = np.array([0, 0, 1, 1, 1, 1])
    assert math.isnan(roc_auc(PROBA3, y))
    reason = roc_auc_undefined_reason(PROBA3, y)
    assert reason is not None and "[2]" in reason


def test_per_class_metrics_by_hand() -> None:
    rows = per_class_metrics(PROBA3, Y3, ["cat", "dog", "bird"])
    # class 0: support 2, predicted {r0, r3}, hit r0 -> recall 1/2, precision 1/2
    # class 1: support 2, predicted {r1, r2}, hit r2 -> recall 1/2, precision 1/2
    # class 2: support 2, predicted {r4, r5}, hits both -> 1, 1
    assert [r["name"] for r in rows] == ["cat", "dog", "bird"]
    assert [r["support"] for r in rows] == [2, 2, 2]
    assert [r["recall"] for r in rows] == [0.5, 0.5, 1.0]
    assert [r["precision"] for r in rows] == [0.5, 0.5, 1.0]
    assert [r["auc"] for r in rows] == pytest.approx(AUC_OVR)


def test_per_class_nan_when_a_class_is_never_seen_or_predicted() -> None:
    proba = np.array([[0.9, 0.1, 0.0], [0.2, 0.8, 0.0]])
    rows = per_class_metrics(proba, np.array([0, 0]))
    assert math.isnan(rows[1]["recall"])  # no example of class 1
    assert rows[1]["precision"] == 0.0  # predicted once, never right
    assert math.isnan(rows[2]["precision"]) and math.isnan(rows[2]["auc"])


def test_per_group_gaps_on_a_hand_made_table() -> None:
    groups = np.array(["a", "b", "a", "b", "a", "b"])
    out = per_group_metrics(PROBA3, Y3, groups)
    a, b = out["groups"]
    # group a = r0, r2, r4: all right -> accuracy 1, macro recall 1; within-group OvR AUCs
    #   are all 1 (each positive outranks the two negatives) -> 1.
    assert (a["name"], a["n"], a["accuracy"], a["recall"], a["auc"]) == ("a", 3, 1.0, 1.0, 1.0)
    # group b = r1 (y0, wrong), r3 (y1, wrong), r5 (y2, right): accuracy 1/3; recall
    #   mean(0, 0, 1) = 1/3; AUC: class 0 .3 vs .5, .2 -> 1/2; class 1 .3 vs .4, .2 -> 1/2;
    #   class 2 .6 vs .3, .2 -> 1  => macro 2/3.
    assert b["accuracy"] == pytest.approx(1 / 3)
    assert b["recall"] == pytest.approx(1 / 3)
    assert b["auc"] == pytest.approx(2 / 3)
    assert out["gaps"] == pytest.approx({"accuracy": 2 / 3, "recall": 2 / 3, "auc": 1 / 3})
    assert out["worst_group"] == "b"
    assert out["auc_definition"] == "within_group"


def test_per_group_recall_is_macro_and_nan_auc_is_skipped() -> None:
    out = per_group_metrics(PROBA3, Y3, np.array([0, 0, 0, 1, 1, 1]), ["c", "d"])
    c, d = out["groups"]
    # c = r0 (y0 right), r1 (y0 wrong), r2 (y1 right): accuracy 2/3, recall mean(1/2, 1) = 3/4
    # d = r3 (y1 wrong), r4, r5 (y2 right): accuracy 2/3, recall mean(0, 1) = 1/2
    assert (c["name"], d["name"]) == ("c", "d")
    assert c["accuracy"] == d["accuracy"] == pytest.approx(2 / 3)
    assert (c["recall"], d["recall"]) == pytest.approx((0.75, 0.5))
    assert math.isnan(c["auc"]) and math.isnan(d["auc"])  # a class missing in each group
    assert out["gaps"]["accuracy"] == 0.0
    assert out["gaps"]["recall"] == pytest.approx(0.25)
    assert math.isnan(out["gaps"]["auc"])
    assert out["worst_group_by_metric"] == {"accuracy": "c", "recall": "d", "auc": None}


def test_groups_default_to_the_classes_with_one_vs_rest_auc() -> None:
    out = per_group_metrics(PROBA3, Y3, group_names=["cat", "dog", "bird"])
    # per-class accuracies 1/2, 1/2, 1; AUCs 7/8, 6.5/8, 1
    assert [g["name"] for g in out["groups"]] == ["cat", "dog", "bird"]
    assert [g["accuracy"] for g in out["groups"]] == [0.5, 0.5, 1.0]
    assert [g["auc"] for g in out["groups"]] == pytest.approx(AUC_OVR)
    assert out["gaps"] == pytest.approx({"accuracy": 0.5, "recall": 0.5, "auc": 1 - 6.5 / 8})
    assert out["worst_group"] == "cat"  # tie with dog: first in order
    assert out["worst_group_by_metric"]["auc"] == "dog"
    assert out["auc_definition"] == "one_vs_rest"


def test_summary_is_json_able() -> None:
    summary = classification_summary(PROBA3, Y3, ["cat", "dog", "bird"])
    assert summary["n"] == 6 and summary["n_classes"] == 3
    assert summary["accuracy"] == pytest.approx(4 / 6)
    assert summary["auc"] == pytest.approx(sum(AUC_OVR) / 3)
    assert summary["gaps"] == summary["per_group"]["gaps"]
    assert [g["name"] for g in summary["per_group"]["groups"]] == ["cat", "dog", "bird"]
    text = json.dumps(json_safe(summary), allow_nan=False)
    assert json.loads(text)["per_class"][2]["name"] == "bird"


def test_bad_inputs_name_the_problem() -> None:
    with pytest.raises(DataError, match="class index 3"):
        accuracy(PROBA3, np.array([0, 0, 1, 1, 2, 3]))
    with pytest.raises(DataError, match=r"shape \[N, K\]"):
        accuracy(np.array([0.2, 0.8]), np.array([1]))
    with pytest.raises(DataError, match="class_names has 2 names"):
        per_class_metrics(PROBA3, Y3, ["a", "b"])
    with pytest.raises(DataError, match="one value per example"):
        per_group_metrics(PROBA3, Y3, np.array([0, 1]))
