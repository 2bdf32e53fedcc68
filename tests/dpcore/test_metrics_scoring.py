"""How a run's metrics are scored (dpcore.scoring) and the test outputs a record keeps
(dpcore.outputs): AUCs from the logits where the float32 softmax ties, the scoring a record
names (and the one a record without it is read with), the kept outputs' exact round trip and
size limit, and the recomputation of a record's metrics from its outputs."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from dpcore.errors import DataError
from dpcore.metrics import roc_auc
from dpcore.outputs import MAX_KEPT_VALUES, TestOutputs, kept_outputs
from dpcore.results import RunResult, validate_result_dict
from dpcore.scoring import (
    LOGITS,
    LOSS_TOLERANCE,
    RUN_SCORING,
    SOFTMAX_FLOAT32,
    UNRECORDED_SCORING,
    recomputation_differences,
    recompute_metrics,
    rescored,
    rescored_results,
    scored_metrics,
    scoring_of,
    softmax_float32,
)


def saturated_binary() -> tuple[np.ndarray, np.ndarray]:
    """Logits whose float32 softmax is exactly [0, 1] for every example of class 1 and two of
    class 0, though the logits rank all class-1 examples above those two: the softmax AUC
    ties them, the logits' AUC is 1."""
    margin = np.array([40.0, 50.0, 60.0, 35.0, 36.0, -3.0, -2.0], np.float32)
    logits = np.stack([np.zeros_like(margin), margin], axis=1)
    y = np.array([1, 1, 1, 0, 0, 0, 0])
    return logits, y


# ------------------------------------------------------------------------------- the scoring
def test_the_auc_is_scored_from_the_logits_where_the_float32_softmax_ties() -> None:
    logits, y = saturated_binary()
    proba = softmax_float32(logits)
    assert (proba[:5, 1] == np.float32(1.0)).all()  # five examples tied at exactly 1
    # by hand: positives tie with 2 of 4 negatives (each pair half-ordered) -> 1 - 0.5 * 6/12
    assert roc_auc(proba, y) == pytest.approx(0.75)
    metrics = scored_metrics(proba, logits, y, ("cat", "dog"))
    assert metrics["auc"] == 1.0
    assert metrics["scoring"] == {"accuracy": SOFTMAX_FLOAT32, "loss": SOFTMAX_FLOAT32,
                                  "auc": LOGITS} == dict(RUN_SCORING)
    assert [c["auc"] for c in metrics["per_class"]] == [1.0, 1.0]
    assert [g["auc"] for g in metrics["per_group"]["groups"]] == [1.0, 1.0]
    # the figures of the predicted class and the loss are the softmax's, as without logits
    alone = scored_metrics(proba, None, y, ("cat", "dog"))
    assert alone["scoring"]["auc"] == SOFTMAX_FLOAT32 and alone["auc"] == pytest.approx(0.75)
    for key in ("accuracy", "loss", "n", "n_classes"):
        assert metrics[key] == alone[key]
    assert metrics["accuracy"] == pytest.approx(5 / 7)


def test_non_finite_logits_fall_back_to_the_softmax_and_say_so() -> None:
    logits, y = saturated_binary()
    broken = logits.copy()
    broken[0, 1] = np.inf
    metrics = scored_metrics(softmax_float32(logits), broken, y)
    assert metrics["scoring"]["auc"] == SOFTMAX_FLOAT32
    assert metrics["auc"] == pytest.approx(0.75)


def test_explicit_groups_score_their_auc_from_the_logits() -> None:
    logits, y = saturated_binary()
    groups = np.array([0, 1, 0, 1, 0, 1, 0])
    metrics = scored_metrics(softmax_float32(logits), logits, y, None, groups, ("a", "b"))
    assert metrics["per_group"]["auc_definition"] == "within_group"
    assert [g["name"] for g in metrics["per_group"]["groups"]] == ["a", "b"]
    assert [g["auc"] for g in metrics["per_group"]["groups"]] == [1.0, 1.0]


def test_a_record_without_scoring_is_read_as_the_float32_softmax() -> None:
    assert scoring_of({"auc": 0.7}) == dict(UNRECORDED_SCORING) == {
        "accuracy": SOFTMAX_FLOAT32, "loss": SOFTMAX_FLOAT32, "auc": SOFTMAX_FLOAT32}
    assert scoring_of({"scoring": {"auc": LOGITS}})["auc"] == LOGITS


# ---------------------------------------------------------------------------- kept outputs
def test_kept_outputs_round_trip_bit_for_bit_with_groups() -> None:
    rng = np.random.default_rng(0)
    logits = (rng.normal(size=(50, 3)) * 30).astype(np.float32)
    y, groups = rng.integers(0, 3, 50), rng.integers(0, 2, 50)
    kept = kept_outputs(logits, y, groups=groups, group_names=("site a", "site b"))
    assert kept is not None
    raw = json.loads(json.dumps(kept.to_record()))
    assert "/" not in raw["logits"] and "+" not in raw["logits"]  # URL-safe base64
    back = TestOutputs.from_record(raw)
    assert back.logits.dtype == np.float32 and back.logits.tobytes() == logits.tobytes()
    np.testing.assert_array_equal(back.labels, y)
    np.testing.assert_array_equal(back.groups, groups)
    assert back.group_names == ("site a", "site b")


def test_only_small_finite_outputs_are_kept() -> None:
    y = np.zeros(1024, np.int64)
    assert kept_outputs(np.zeros((1024, 2), np.float32), y) is not None  # 2048 values
    assert MAX_KEPT_VALUES == 2048
    assert kept_outputs(np.zeros((1025, 2), np.float32), np.zeros(1025)) is None
    assert kept_outputs(np.zeros((4, 2), np.float32), y[:4], limit=7) is None
    assert kept_outputs(None, y) is None
    nan = np.zeros((4, 2), np.float32)
    nan[1, 1] = np.nan
    assert kept_outputs(nan, y[:4]) is None


def test_damaged_outputs_are_refused_naming_the_run() -> None:
    kept = kept_outputs(np.ones((4, 2), np.float32), np.array([0, 1, 0, 1]))
    assert kept is not None
    raw = kept.to_record()
    with pytest.raises(DataError, match=r"^abc-tf: unreadable test outputs"):
        TestOutputs.from_record({**raw, "logits": raw["logits"][:-4]}, "abc-tf")
    with pytest.raises(DataError, match=r"abc-tf: unreadable test outputs"):
        TestOutputs.from_record({**raw, "n": 5}, "abc-tf")  # 8 floats are not [5, 2]
    with pytest.raises(DataError, match=r"unknown encoding 'x'; valid: 'zlib9-base64url-le/1'"):
        TestOutputs.from_record({**raw, "encoding": "x"}, "abc-tf")


# ------------------------------------------------------------------------ the record field
def _result(metrics: dict, outputs: TestOutputs | None, status: str = "finished"
            ) -> RunResult:
    return RunResult(
        run_id="0123456789abcdef-torch", config={"data": {}, "model": {}, "privacy": {},
                                                 "train": {}, "seed": 0},
        config_hash="0123456789abcdef", backend="torch", seed=0, status=status,
        dataset={"name": "toy", "fingerprint": "f", "n_train": 1, "n_test": 7,
                 "class_names": ["cat", "dog"]},
        privacy={"mechanism": "none", "noise_multiplier": None, "delta": None, "steps": 1,
                 "sampling_rate": 1.0, "epsilon_rdp": None, "epsilon_pld": None,
                 "dp_event": {}},
        metrics=metrics, test_outputs=None if outputs is None else outputs.to_record())


def test_the_record_holds_its_outputs_only_when_kept() -> None:
    logits, y = saturated_binary()
    outputs = kept_outputs(logits, y)
    assert outputs is not None
    with_outputs = _result({"auc": 1.0}, outputs).to_dict()
    validate_result_dict(with_outputs)
    assert RunResult.from_dict(with_outputs).test_outputs == outputs.to_record()
    without = _result({"auc": 1.0}, None).to_dict()
    assert "test_outputs" not in without  # the keys of a record that keeps none
    validate_result_dict(without)
    with pytest.raises(Exception, match="test_outputs"):
        validate_result_dict({**with_outputs, "test_outputs": {"n": 7}})


# --------------------------------------------------------------------------- recomputation
def _recorded(logits: np.ndarray, y: np.ndarray) -> tuple[dict, TestOutputs]:
    """Metrics as a run records them (its backend's float32 softmax stands in as numpy's),
    and its kept outputs."""
    outputs = kept_outputs(logits, y)
    assert outputs is not None
    metrics = scored_metrics(softmax_float32(logits).astype(np.float64), logits, y,
                             ("cat", "dog"))
    return json.loads(json.dumps(metrics, default=float)), outputs


def test_recomputed_metrics_equal_the_recorded_ones() -> None:
    logits, y = saturated_binary()
    recorded, outputs = _recorded(logits, y)
    recomputed = recompute_metrics(outputs, ("cat", "dog"))
    assert recomputation_differences(recorded, recomputed) == []
    assert recomputed["auc"] == recorded["auc"] and recomputed["per_class"] == \
        recorded["per_class"]


def test_recomputation_names_each_figure_that_differs() -> None:
    logits, y = saturated_binary()
    recorded, outputs = _recorded(logits, y)
    recomputed = recompute_metrics(outputs, ("cat", "dog"))
    assert recorded["per_class"][1]["recall"] == 1.0
    edited = {**recorded, "auc": 0.75,
              "per_class": [recorded["per_class"][0],
                            {**recorded["per_class"][1], "recall": 0.5}]}
    problems = recomputation_differences(edited, recomputed)
    assert problems == ["auc: recorded 0.75, recomputed 1.0",
                        "per_class[1].recall: recorded 0.5, recomputed 1.0"]
    # the loss: within LOSS_TOLERANCE (the backends' softmax kernels round otherwise)
    near = recorded["loss"] * (1 + LOSS_TOLERANCE / 2)
    assert recomputation_differences({**recorded, "loss": near}, recomputed) == []
    far = recorded["loss"] * (1 + 10 * LOSS_TOLERANCE)
    assert [p.split(":")[0] for p in recomputation_differences(
        {**recorded, "loss": far}, recomputed)] == ["loss"]


def test_rescored_replaces_what_the_outputs_determine_and_keeps_the_rest() -> None:
    logits, y = saturated_binary()
    recorded, outputs = _recorded(logits, y)
    stale = {**recorded, "auc": 0.75, "note": "kept"}
    result = _result(stale, outputs)
    new = rescored(result)
    assert new.metrics["auc"] == 1.0 and new.metrics["note"] == "kept"
    assert result.metrics["auc"] == 0.75  # the record itself is left as it is
    plain = _result(stale, None)
    assert rescored(plain) is plain
    unfinished = dataclasses.replace(result, status="failed")
    assert rescored(unfinished) is unfinished
    scored, problems = rescored_results([result, plain])
    assert [r.metrics["auc"] for r in scored] == [1.0, 0.75]
    assert len(problems) == 1 and problems[0].startswith(
        "run 0123456789abcdef-torch: its metrics differ from those its test outputs give "
        "(1 figure(s); first: auc: recorded 0.75, recomputed 1.0)")
    assert rescored_results([_result(recorded, outputs)])[1] == []


def test_numpy_float32_softmax_is_a_softmax() -> None:
    logits, _ = saturated_binary()
    p = softmax_float32(logits)
    assert p.dtype == np.float32 and np.allclose(p.sum(axis=1), 1.0)
    assert math.isclose(float(softmax_float32(np.array([[0.0, 0.0]]))[0, 0]), 0.5)
