"""Membership-advantage bound and empirical advantage with its interval."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from dpcore.errors import ConfigError, DataError
from dpcore.metrics import advantage_upper_bound, empirical_advantage, exceeds_bound


def test_bound_closed_forms() -> None:
    # eps = 0: (1 - 1 + 2 delta) / (1 + 1) = delta
    assert advantage_upper_bound(0.0, 1e-5) == pytest.approx(1e-5, rel=1e-12)
    assert advantage_upper_bound(0.0, 0.0) == 0.0
    # eps = 1, delta = 0: (e - 1) / (e + 1) = 1.718281828 / 3.718281828 = 0.4621171573
    assert advantage_upper_bound(1.0, 0.0) == pytest.approx(0.4621171573, abs=1e-10)
    # eps = 1, delta = 1e-5: (e - 1 + 2e-5) / (e + 1)
    e = math.e
    assert advantage_upper_bound(1.0, 1e-5) == pytest.approx((e - 1 + 2e-5) / (e + 1))
    # no privacy, and very large epsilons, give 1 without overflow
    assert advantage_upper_bound(math.inf, 1e-5) == 1.0
    assert advantage_upper_bound(1e6, 0.0) == 1.0
    bounds = [advantage_upper_bound(eps, 1e-5) for eps in (0.5, 1, 5, 10)]
    assert bounds == sorted(bounds)


def test_bound_rejects_invalid_parameters() -> None:
    with pytest.raises(ConfigError, match="epsilon=-1"):
        advantage_upper_bound(-1.0, 1e-5)
    with pytest.raises(ConfigError, match="delta=2"):
        advantage_upper_bound(1.0, 2.0)


def test_perfectly_separated_scores() -> None:
    rng = np.random.default_rng(0)
    members, nonmembers = rng.uniform(2, 3, 200), rng.uniform(0, 1, 200)
    result = empirical_advantage(members, nonmembers)
    assert result["advantage"] == 1.0 and result["auc"] == 1.0
    assert result["heldout_advantage"] == 1.0 and (result["tpr"], result["fpr"]) == (1.0, 0.0)
    # Clopper-Pearson at 1 - 0.05/2 on 100 / 100 evaluation scores: TPR_low solves
    # p^100 = 0.0125 -> 0.0125 ** (1/100); FPR_high = 1 - TPR_low by symmetry.
    tpr_low = 0.0125 ** (1 / 100)
    assert result["ci_low"] == pytest.approx(tpr_low - (1 - tpr_low))
    assert result["ci_high"] == pytest.approx(1.0)
    assert exceeds_bound(result, advantage_upper_bound(1.0, 1e-5))
    assert not exceeds_bound(result, advantage_upper_bound(math.inf, 1e-5))


def test_identical_distributions_are_near_zero_within_the_interval() -> None:
    rng = np.random.default_rng(1)
    members, nonmembers = rng.normal(size=2000), rng.normal(size=2000)
    for method in ("clopper-pearson", "bootstrap"):
        result = empirical_advantage(members, nonmembers, method=method, seed=2)
        assert result["ci_low"] <= 0.0 <= result["ci_high"]
        assert result["ci_low"] <= result["heldout_advantage"] <= result["ci_high"]
        assert abs(result["heldout_advantage"]) < 0.1
        assert abs(result["auc"] - 0.5) < 0.05
        assert not exceeds_bound(result, advantage_upper_bound(0.0, 1e-5))


def test_false_alarms_are_rare_when_nothing_leaks() -> None:
    # The interval's guarantee: with identically distributed scores the true advantage is 0,
    # so ci_low > 0 may happen in at most 5 % of runs (Clopper-Pearson + Bonferroni is
    # conservative). The in-sample max over thresholds, in contrast, is biased upwards: its
    # mean is of order 1/sqrt(n) (the one-sided KS statistic), not 0.
    rng = np.random.default_rng(5)
    alarms, in_sample = 0, []
    for seed in range(200):
        members, nonmembers = rng.normal(size=100), rng.normal(size=100)
        result = empirical_advantage(members, nonmembers, seed=seed)
        alarms += result["ci_low"] > 0.0
        in_sample.append(result["advantage"])
    assert alarms / 200 <= 0.05
    assert np.mean(in_sample) > 0.05


def test_shifted_scores_cover_the_true_advantage() -> None:
    # members ~ N(1, 1), non-members ~ N(0, 1): the best threshold is 0.5 and the true
    # advantage is Phi(0.5) - Phi(-0.5) = 0.3829; a threshold chosen from data is close.
    rng = np.random.default_rng(3)
    result = empirical_advantage(rng.normal(1, 1, 4000), rng.normal(0, 1, 4000))
    assert result["ci_low"] < 0.3829 < result["ci_high"] + 0.01
    assert result["ci_low"] > 0.3
    assert exceeds_bound(result, advantage_upper_bound(0.5, 1e-5))  # tanh(.25) = 0.2449
    assert not exceeds_bound(result, advantage_upper_bound(1.0, 1e-5))  # 0.4621


def test_bootstrap_is_seeded() -> None:
    rng = np.random.default_rng(4)
    m, u = rng.normal(0.3, 1, 300), rng.normal(0, 1, 300)
    a = empirical_advantage(m, u, method="bootstrap", n_bootstrap=500, seed=7)
    b = empirical_advantage(m, u, method="bootstrap", n_bootstrap=500, seed=7)
    assert a == b and a["n_bootstrap"] == 500


def test_exceeds_bound_edge_cases() -> None:
    assert not exceeds_bound({"ci_low": 0.2}, 0.2)  # strictly above only
    assert exceeds_bound({"ci_low": 0.21}, 0.2)
    assert not exceeds_bound({"ci_low": None}, 0.0)
    assert not exceeds_bound({"ci_low": float("nan")}, 0.0)


def test_bad_inputs_name_the_problem() -> None:
    with pytest.raises(DataError, match="at least 2 scores"):
        empirical_advantage(np.array([1.0]), np.array([0.0, 1.0]))
    with pytest.raises(DataError, match="non-finite"):
        empirical_advantage(np.array([1.0, np.nan]), np.array([0.0, 1.0]))
    with pytest.raises(ConfigError, match="method='exact'"):
        empirical_advantage(np.ones(4), np.zeros(4), method="exact")  # type: ignore[arg-type]


scores = arrays(np.float64, st.integers(2, 30), elements=st.floats(-5, 5, allow_nan=False))


@settings(max_examples=40, deadline=None)
@given(scores, scores, st.integers(0, 10))
def test_advantage_ranges(m: np.ndarray, u: np.ndarray, seed: int) -> None:
    result = empirical_advantage(m, u, seed=seed)
    assert 0.0 <= result["advantage"] <= 1.0 and 0.0 <= result["auc"] <= 1.0
    assert -1.0 <= result["ci_low"] <= result["heldout_advantage"] <= result["ci_high"] <= 1.0
