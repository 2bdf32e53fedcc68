"""Membership-inference audit: an overfitted non-private model is detected, a DP model at a
small epsilon stays within its bound, a false claim is flagged, and the dict is as documented.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest

from dpcore.config import DataSpec, ModelSpec, PrivacySpec, RunConfig, TrainSpec
from dpcore.errors import ConfigError, DataError
from dpcore.evaluation.membership import (
    AUDIT_KEYS,
    MIN_EXAMPLES,
    claimed_accountant,
    claimed_privacy,
    run_membership_audit,
)
from dpcore.metrics.audit import advantage_upper_bound
from tests.backends.train_helpers import digits16

N = 120  # members and non-members each: small enough that 30 epochs memorise them


def _train(privacy: PrivacySpec, epochs: float) -> Any:
    from torchpipe.train import train

    config = RunConfig(
        data=DataSpec(name="digits"), model=ModelSpec(name="cnn4"), privacy=privacy,
        train=TrainSpec(epochs=epochs, batch_size=60, lr=0.01, optimizer="adam"), seed=0,
    )
    return train(config, digits16(N, N), progress=False)


def _audit(trained: Any, epsilon: float | None, delta: float | None) -> dict[str, Any]:
    from torchpipe.predict import predict_proba

    ds = digits16(N, N)
    return run_membership_audit(lambda x: predict_proba(trained, x), ds.x_train, ds.y_train,
                                ds.x_test, ds.y_test, epsilon=epsilon, delta=delta, seed=0)


@pytest.fixture(scope="module")
def overfitted() -> Any:
    """cnn4, non-private, 30 epochs of Adam on 120 digits: train accuracy 1, test ~0.85."""
    return _train(PrivacySpec(mechanism="none"), epochs=30)


@pytest.fixture(scope="module")
def overfitted_audit(overfitted: Any) -> dict[str, Any]:
    return _audit(overfitted, None, None)


def test_overfitted_model_is_detected(overfitted_audit: dict[str, Any]) -> None:
    audit = overfitted_audit
    assert audit["member_accuracy"] > audit["nonmember_accuracy"]
    assert audit["member_mean_loss"] < audit["nonmember_mean_loss"]
    # measured here: threshold AUC ~0.69-0.75, logistic regression ~0.65-0.71
    assert audit["attacks"]["threshold_attack"]["auc"] > 0.6, audit["attacks"]
    assert audit["attacks"]["logistic_regression"]["auc"] > 0.55, audit["attacks"]
    assert audit["attack_auc"] > 0.6 and audit["advantage"] > 0.2
    # our held-out estimate agrees: its interval excludes "no advantage"
    assert audit["loss_threshold"]["ci_low"] > 0.0
    # no DP claim: nothing to violate
    assert audit["bound"] == 1.0 and audit["private"] is False
    assert audit["suspected_privacy_bug"] is False


def test_false_small_epsilon_claim_is_flagged(overfitted: Any) -> None:
    """The same model claimed to be (0.05, 1e-5)-DP: its advantage beats the bound (~0.025)."""
    audit = _audit(overfitted, 0.05, 1e-5)
    assert audit["bound"] == pytest.approx(advantage_upper_bound(0.05, 1e-5))
    assert audit["loss_threshold"]["ci_low"] > audit["bound"]
    assert audit["suspected_privacy_bug"] is True


def test_dp_model_at_small_epsilon_stays_within_bound() -> None:
    # noise 4, q = 0.5, 4 steps: epsilon ~0.64 (PLD) at delta 1e-3. A given noise multiplier
    # rather than a target epsilon: calibrating it at q = 0.5 would take seconds.
    trained = _train(PrivacySpec(mechanism="dpsgd-gaussian", noise_multiplier=4.0,
                                 max_grad_norm=1.0, delta=1e-3), epochs=2)
    epsilon, delta, _ = claimed_privacy(trained.result.privacy)
    assert epsilon is not None and epsilon < 1.0 and delta == 1e-3
    audit = _audit(trained, epsilon, delta)
    assert audit["private"] is True
    assert audit["bound"] == pytest.approx(advantage_upper_bound(epsilon, 1e-3))
    assert audit["bound"] < advantage_upper_bound(1.0, 1e-3)
    assert audit["loss_threshold"]["ci_low"] <= audit["bound"]
    assert audit["loss_threshold"]["heldout_advantage"] <= audit["bound"]
    assert audit["suspected_privacy_bug"] is False


def test_audit_dict_has_the_documented_keys(overfitted_audit: dict[str, Any]) -> None:
    audit = overfitted_audit
    assert set(audit) == set(AUDIT_KEYS)
    assert audit["n_members"] == audit["n_nonmembers"] == N
    assert set(audit["attacks"]) == {"threshold_attack", "logistic_regression"}
    for figures in audit["attacks"].values():
        assert set(figures) == {"auc", "advantage", "epsilon_lower_bound"}
        assert 0.0 <= figures["auc"] <= 1.0 and 0.0 <= figures["advantage"] <= 1.0
    best = audit["attacks"][audit["best_attack"]]
    assert audit["advantage"] == best["advantage"]
    assert audit["attack_auc"] == max(a["auc"] for a in audit["attacks"].values())
    assert {"heldout_advantage", "ci_low", "ci_high", "auc"} <= set(audit["loss_threshold"])
    assert audit["library"]["tensorflow-empirical-privacy"] == "0.1.0"
    assert json.loads(json.dumps(audit, allow_nan=False)) == audit  # JSON-able as is


def _memorising_predictor(x_train: np.ndarray, y_train: np.ndarray, k: int) -> Any:
    """Confident on the training inputs (right class), uniform elsewhere."""
    known = {row.tobytes(): int(label) for row, label in zip(x_train, y_train, strict=True)}

    def predict(x: np.ndarray) -> np.ndarray:
        out = np.full((len(x), k), 1.0 / k)
        for i, row in enumerate(x):
            if row.tobytes() in known:
                out[i] = 0.01 / (k - 1)
                out[i, known[row.tobytes()]] = 0.99
        return out

    return predict


def test_seeded_subsets_are_reproducible_and_sized() -> None:
    rng = np.random.default_rng(1)
    x_train, y_train = rng.normal(size=(80, 4)), rng.integers(0, 3, 80)
    x_test, y_test = rng.normal(size=(50, 4)), rng.integers(0, 3, 50)
    predict = _memorising_predictor(x_train, y_train, 3)
    first = run_membership_audit(predict, x_train, y_train, x_test, y_test,
                                 epsilon=math.inf, delta=None, seed=3)
    again = run_membership_audit(predict, x_train, y_train, x_test, y_test,
                                 epsilon=math.inf, delta=None, seed=3)
    assert first == again
    assert first["n_members"] == first["n_nonmembers"] == 50  # min of the two sizes
    assert first["attack_auc"] == pytest.approx(1.0) and first["bound"] == 1.0
    sized = run_membership_audit(predict, x_train, y_train, x_test, y_test,
                                 epsilon=0.1, delta=1e-5, n=20, epsilon_accountant="pld")
    assert sized["n_members"] == 20 and sized["suspected_privacy_bug"] is True
    # the record names the epsilon its bound uses and that epsilon's accountant
    assert (sized["epsilon"], sized["epsilon_accountant"]) == (0.1, "pld")
    assert (first["epsilon"], first["epsilon_accountant"]) == (None, None)  # no claim


def test_bad_arguments_name_the_value() -> None:
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(30, 2)), rng.integers(0, 2, 30)
    predict = _memorising_predictor(x, y, 2)
    with pytest.raises(ConfigError, match="n=31"):
        run_membership_audit(predict, x, y, x, y, epsilon=None, delta=None, n=31)
    with pytest.raises(ConfigError, match="delta"):
        run_membership_audit(predict, x, y, x, y, epsilon=1.0, delta=None)
    with pytest.raises(ConfigError, match="NO_SUCH_ATTACK"):
        run_membership_audit(predict, x, y, x, y, epsilon=None, delta=None,
                             attacks=["NO_SUCH_ATTACK"])
    small = MIN_EXAMPLES - 1
    with pytest.raises(DataError, match=f"got {small}"):
        run_membership_audit(predict, x[:small], y[:small], x, y, epsilon=None, delta=None)
    with pytest.raises(DataError, match="non-finite"):
        run_membership_audit(lambda v: np.full((len(v), 2), np.nan), x, y, x, y,
                             epsilon=None, delta=None)


def test_claimed_privacy_of_each_mechanism() -> None:
    dp = {"mechanism": "dpsgd-gaussian", "epsilon_rdp": 2.0, "epsilon_pld": 1.5, "delta": 1e-5}
    assert claimed_privacy(dp)[:2] == (1.5, 1e-5)
    assert "epsilon_pld" in claimed_privacy(dp)[2]
    assert claimed_privacy({"mechanism": "none", "epsilon_rdp": None, "delta": 1e-3})[0] is None
    ldp = claimed_privacy({"mechanism": "ldp", "delta": 1e-3})
    assert ldp[0] is None and "labels" in ldp[2]


def test_claimed_accountant_names_the_accountant_of_the_claimed_epsilon() -> None:
    dp = {"mechanism": "dpsgd-gaussian", "epsilon_rdp": 2.0, "epsilon_pld": 1.5, "delta": 1e-5}
    assert claimed_accountant(dp) == "pld"
    assert claimed_accountant({**dp, "epsilon_rdp": 1.0}) == "rdp"
    assert claimed_accountant({**dp, "epsilon_pld": None}) == "rdp"  # PLD not computed
    assert claimed_accountant({"mechanism": "none", "epsilon_rdp": math.inf}) is None
    assert claimed_accountant({"mechanism": "ldp", "epsilon_rdp": 3.0}) is None
