"""dpcore.tuning: the law of K, Papernot & Steinke's bounds (against the public
RepeatAndSelectDpEvent path, hand-computed values and limit cases), the plain composition and
the calibration of the per-run budget to a total."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import dp_event as dpe
from dp_accounting.rdp import rdp_privacy_accountant as rdp
from scipy.stats import norm

from dpcore.accounting import dpsgd_event, epsilon_rdp
from dpcore.errors import ConfigError
from dpcore.tuning import (
    CandidateSteps,
    RepetitionLaw,
    ScoreMechanism,
    accuracy_sensitivity,
    auc_sensitivity,
    calibrate_selection,
    full_grid_epsilon,
    parse_law,
    selection_curve,
    selection_epsilon,
)
from dpcore.tuning.bound import ORDERS, epsilon_of_curve, rdp_curve, repetition_curve

DELTA = 1e-5
LAWS = [RepetitionLaw.truncated_negative_binomial(1, 0.1),
        RepetitionLaw.truncated_negative_binomial(0.5, 0.05),
        RepetitionLaw.truncated_negative_binomial(0, 0.02),
        RepetitionLaw.poisson(10)]


def gaussian_rdp(sigma: float) -> np.ndarray:
    """RDP of the Gaussian mechanism (sensitivity 1): lambda / (2 sigma^2) (Mironov 2017)."""
    return np.array(ORDERS) / (2 * sigma**2)


def test_law_means_and_draws() -> None:
    assert RepetitionLaw.truncated_negative_binomial(1, 0.1).mean == pytest.approx(10)
    # eta = 0.5: E[K] = eta (1 - gamma) / (gamma (1 - gamma^eta))
    assert LAWS[1].mean == pytest.approx(0.5 * 0.95 / (0.05 * (1 - 0.05**0.5)))
    assert LAWS[2].mean == pytest.approx((1 / 0.02 - 1) / math.log(1 / 0.02))
    rng = np.random.default_rng(1)
    for law in LAWS:
        draws = np.array([law.sample(rng) for _ in range(20000)])
        assert draws.mean() == pytest.approx(law.mean, rel=0.05), law
        assert draws.min() >= (0 if law.kind == "poisson" else 1)
    # geometric: P[K = 1] = gamma
    draws = np.array([LAWS[0].sample(rng) for _ in range(20000)])
    assert (draws == 1).mean() == pytest.approx(0.1, abs=0.01)
    assert RepetitionLaw.truncated_negative_binomial(2, 1.0).sample(rng) == 1


def test_law_refuses_bad_parameters() -> None:
    with pytest.raises(ConfigError, match=r"gamma=0\.0 .*valid: a number in \(0, 1\]"):
        RepetitionLaw.truncated_negative_binomial(1, 0)
    with pytest.raises(ConfigError, match="eta=-1.0"):
        RepetitionLaw.truncated_negative_binomial(-1, 0.5)
    with pytest.raises(ConfigError, match="mu=0.0"):
        RepetitionLaw.poisson(0)
    with pytest.raises(ConfigError, match="valid: tnb:ETA:GAMMA"):
        parse_law("geometric:10")
    assert parse_law("tnb:1:0.1") == LAWS[0] and parse_law("poisson:10") == LAWS[3]
    assert RepetitionLaw.from_dict(LAWS[1].to_dict()) == LAWS[1]
    with pytest.raises(ConfigError, match="unknown keys"):
        RepetitionLaw.from_dict({"kind": "poisson", "mu": 1, "lam": 2})


@pytest.mark.parametrize("law", LAWS, ids=lambda law: law.describe())
def test_bound_equals_dp_accountings_public_event_on_one_candidate(law: RepetitionLaw) -> None:
    event = dpsgd_event("dpsgd-gaussian", 1.2, 0.05, 300)
    public = rdp.RdpAccountant(list(ORDERS))
    public.compose(dpe.RepeatAndSelectDpEvent(event, law.mean, law.shape))
    assert selection_epsilon([event], law, DELTA) == pytest.approx(
        public.get_epsilon(DELTA), rel=1e-12)


def test_theorem_2_by_hand_on_the_gaussian_mechanism() -> None:
    """Papernot & Steinke 2022, Theorem 2: for K ~ TNB(eta, gamma), the selection is
    (lambda, eps(lambda) + (1 + eta)(1 - 1/lh) eps(lh) + (1 + eta) log(1/gamma) / lh
    + log(E[K]) / (lambda - 1))-RDP for every lh >= 1; take the best lh, then use that RDP is
    non-decreasing in lambda."""
    sigma = 3.0
    base = gaussian_rdp(sigma)
    assert np.allclose(rdp_curve(dpe.GaussianDpEvent(sigma)), base)  # the accountant's curve
    for law in LAWS[:3]:
        eta, gamma = law.eta, law.gamma
        assert eta is not None and gamma is not None
        orders = np.array(ORDERS)
        c = (1 + eta) * min((1 - 1 / lh) * e + math.log(1 / gamma) / lh
                            for lh, e in zip(orders, base, strict=True))
        by_hand = base + c + math.log(law.mean) / (orders - 1)
        by_hand = np.minimum.accumulate(by_hand[::-1])[::-1]  # monotone in the order
        assert np.allclose(selection_curve(base, law), by_hand, rtol=1e-7)


def test_theorem_6_is_sandwiched_by_independent_deltas() -> None:
    """Theorem 6 (Poisson mu): eps(lambda) + mu * delta_hat + log(mu) / (lambda - 1), with
    delta_hat the base's delta at epsilon log(1 + 1/(lambda - 1)). Any valid delta_hat lies
    between the Gaussian's exact delta (Balle & Wang 2018) and the basic RDP conversion."""
    sigma, mu = 4.0, 10.0
    base = gaussian_rdp(sigma)
    got = selection_curve(base, RepetitionLaw.poisson(mu))
    for i, lam in enumerate(ORDERS[:40]):
        eps_hat = math.log1p(1 / (lam - 1))
        exact = (norm.cdf(1 / (2 * sigma) - eps_hat * sigma)
                 - math.exp(eps_hat) * norm.cdf(-1 / (2 * sigma) - eps_hat * sigma))
        basic = math.exp(min(0.0, min((a - 1) * (e - eps_hat)
                                      for a, e in zip(ORDERS, base, strict=True))))
        rest = base[i] + math.log(mu) / (lam - 1)
        assert rest + mu * exact - 1e-12 <= got[i] <= rest + mu * basic + 1e-12


def test_k_equal_one_is_the_base_mechanism_up_to_theorem_2s_constant() -> None:
    event = dpsgd_event("dpsgd-gaussian", 1.0, 0.02, 1000)
    base = epsilon_rdp(event, DELTA)
    assert base is not None
    once = RepetitionLaw.truncated_negative_binomial(1, 1.0)
    assert once.mean == 1 and once.sample(np.random.default_rng(0)) == 1
    got = selection_epsilon([event], once, DELTA)
    # (1 + eta) min (1 - 1/lh) eps(lh) at gamma = 1: small, smallest near lh = 1.1
    curve = rdp_curve(event)
    c = 2 * min((1 - 1 / a) * e for a, e in zip(ORDERS, curve, strict=True))
    assert base <= got <= epsilon_of_curve(curve + c, DELTA) + 1e-9
    assert got < 1.15 * base


def test_the_bound_grows_as_log_of_the_expected_repetitions() -> None:
    event = dpsgd_event("dpsgd-gaussian", 1.0, 0.02, 1000)
    eps = [selection_epsilon([event], RepetitionLaw.truncated_negative_binomial(1, 10.0**-j),
                             DELTA) for j in range(1, 5)]
    steps = np.diff(eps)  # E[K] = 10, 100, 1000, 10000
    assert np.all(steps > 0)
    assert steps.max() / steps.min() < 1.5  # about the same step per factor 10 of E[K]
    assert eps[-1] < 3 * eps[0]  # nowhere near 1000 times


def test_a_draw_among_candidates_costs_the_worst_candidate() -> None:
    cheap = dpsgd_event("dpsgd-gaussian", 2.0, 0.02, 500)
    dear = dpsgd_event("dpsgd-gaussian", 0.8, 0.02, 500)
    assert np.array_equal(repetition_curve([cheap, dear]),
                          np.maximum(rdp_curve(cheap), rdp_curve(dear)))
    law = LAWS[0]
    both = selection_epsilon([cheap, dear], law, DELTA)
    assert both >= selection_epsilon([dear], law, DELTA) > selection_epsilon([cheap], law, DELTA)
    grid = full_grid_epsilon([cheap, dear], DELTA)
    assert grid["rdp"] == pytest.approx(epsilon_rdp(dpe.ComposedDpEvent([cheap, dear]), DELTA))
    assert grid["pld"] is not None and grid["pld"] <= grid["rdp"]


def test_score_sensitivities() -> None:
    assert accuracy_sensitivity(942) == 1 / 942
    labels = np.array([0] * 30 + [1] * 10)
    assert auc_sensitivity(labels) == 1 / 9
    with pytest.raises(ConfigError, match="class counts"):
        auc_sensitivity(np.array([0, 0, 1]))
    with pytest.raises(ConfigError, match="score metric 'loss'"):
        ScoreMechanism("loss", 0.01, 0.001)
    score = ScoreMechanism("accuracy", 0.01, 1 / 942)
    assert score.noise_multiplier == pytest.approx(9.42)


def test_calibration_meets_the_total() -> None:
    candidates = [CandidateSteps(0.2, 5), CandidateSteps(0.2, 10), CandidateSteps(0.2, 5)]
    score = ScoreMechanism("accuracy", 0.1, 1 / 40)
    law = RepetitionLaw.truncated_negative_binomial(1, 0.5)
    budget = calibrate_selection(candidates, 2.0, law, score, DELTA)
    assert 2.0 * 0.99 <= budget.selection_epsilon <= 2.0
    assert budget.per_run_epsilon < budget.repetition_epsilon < budget.selection_epsilon
    assert budget.noise_multipliers[0] == budget.noise_multipliers[2]
    for c, nm in zip(candidates, budget.noise_multipliers, strict=True):
        run = epsilon_rdp(dpsgd_event("dpsgd-gaussian", nm, c.sampling_rate, c.steps), DELTA)
        assert run == pytest.approx(budget.per_run_epsilon, rel=1e-3)
    with pytest.raises(ConfigError, match="costs epsilon .* above the target 0.5"):
        calibrate_selection(candidates, 0.5, law, ScoreMechanism("accuracy", 0.01, 1 / 40),
                            DELTA)


def test_draws_are_seeded_and_the_best_noised_score_wins() -> None:
    from dpcore.tuning import SelectionDraws, winner

    law = RepetitionLaw.truncated_negative_binomial(1, 0.2)
    a, b = SelectionDraws(law, 11, 5), SelectionDraws(law, 11, 5)
    assert (a.k, a.candidates) == (b.k, b.candidates) and len(a.candidates) == a.k >= 1
    assert all(0 <= i < 11 for i in a.candidates)
    score = ScoreMechanism("accuracy", 0.01, 1 / 942)
    noised = [a.noised(x, score) for x in (0.9, None, 0.5)]
    assert noised == [b.noised(x, score) for x in (0.9, None, 0.5)]
    assert abs(noised[1]) < 0.1  # a diverged run scores 0, plus noise
    assert winner(noised) == 0 and winner([0.2, 0.7, 0.7]) == 1 and winner([]) is None
    seen = {SelectionDraws(RepetitionLaw.poisson(0.01), 3, s).k for s in range(200)}
    assert 0 in seen  # a Poisson K may be 0: nothing is released then
