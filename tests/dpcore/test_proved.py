"""Claimed vs proved epsilon: one test per rule of dpcore.proved."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from dp_accounting import dp_event as dpe

from dpcore.accounting import epsilon_pld, epsilon_rdp
from dpcore.config import RunConfig
from dpcore.proved import (
    ADD_REMOVE,
    PROVED_RULES,
    REPLACE_ONE,
    StepFacts,
    claimed_epsilon,
    figures_of_result,
    is_violation,
    privacy_figures,
    proved_dpsgd,
    proved_for_record,
)

Q = 1024 / 60000


def facts(**changes: object) -> StepFacts:
    base = dict(mechanism="dpsgd-gaussian", noise_multiplier=1.0, sampling="poisson",
                sampling_rate=Q, steps=879, steps_per_epoch=59, delta=1e-5)
    base.update(changes)
    return StepFacts(**base)  # type: ignore[arg-type]


def poisson_eps(sigma: float, q: float, steps: int, delta: float) -> float:
    event = dpe.SelfComposedDpEvent(dpe.PoissonSampledDpEvent(q, dpe.GaussianDpEvent(sigma)),
                                    steps)
    value = epsilon_rdp(event, delta)
    assert value is not None
    return value


def test_poisson_per_example_fixed_divisor_is_the_claim() -> None:
    proved = proved_dpsgd(facts())
    assert proved.epsilon == pytest.approx(poisson_eps(1.0, Q, 879, 1e-5), rel=1e-12)
    assert proved.relation == ADD_REMOVE and proved.accountant == "rdp"


def test_poisson_microbatches_have_no_proved_epsilon() -> None:
    """The sigma / 2 rule assumed one example touches one microbatch; the engines' grouping
    (sorted batch, consecutive groups) breaks it (see the constructed case below)."""
    proved = proved_dpsgd(facts(microbatch_size=32, steps=math.ceil(15 / Q)))
    assert proved.epsilon is None and proved.relation == ""
    assert "consecutive groups of 32" in proved.reason and "no bound" in proved.reason
    assert proved_dpsgd(facts(microbatch_size=1)).epsilon is not None


def _clipped_sum(grads: np.ndarray, groups: list[np.ndarray], clip: float) -> np.ndarray:
    """Sum over groups of the group's mean gradient clipped to L2 norm ``clip``."""
    total = np.zeros(grads.shape[1])
    for group in groups:
        mean = grads[group].mean(axis=0)
        total += mean * min(1.0, clip / max(np.linalg.norm(mean), 1e-300))
    return total


def _consecutive(n: int, k: int) -> list[np.ndarray]:
    """The engines' microbatches of a sorted batch of n: consecutive groups of k (the last
    may be short), as ``tfpipe.dp.microbatch_means`` / ``torchpipe.dp.microbatch_means`` cut
    each chunk."""
    return [np.arange(i, min(i + k, n)) for i in range(0, n, k)]


def test_removing_one_example_moves_the_engine_grouped_sum_by_31_c() -> None:
    """A batch of 63 gradients (vectors standing for them) in groups of k = 2: every group of
    the batch averages to 0 (the clipped sum is 0); without its first example every group of
    the shifted grouping averages to w, |w| >= C, so the clipped sum is 31 C, not the 2 C the
    microbatch rule assumed. Groups fixed by the examples' identity move it by at most 2 C."""
    clip, k = 1.0, 2
    w = np.array([3.0, 4.0]) / 5.0 * 10 * clip  # |w| = 10 C: each shifted group clips to C
    a = -62 * w
    grads = np.empty((63, 2))
    for j in range(31):
        grads[2 * j] = 2 * j * w + a
        grads[2 * j + 1] = -(2 * j * w + a)
    grads[62] = 62 * w + a  # = 0
    with_all = _clipped_sum(grads, _consecutive(63, k), clip)
    without_first = _clipped_sum(grads[1:], _consecutive(62, k), clip)
    assert np.linalg.norm(with_all) == pytest.approx(0.0, abs=1e-9)
    assert np.linalg.norm(without_first - with_all) == pytest.approx(31 * clip)
    # a grouping fixed by identity (example i in group i // k whoever else is sampled)
    identity = [g[g != 0] for g in _consecutive(63, k)]
    moved = _clipped_sum(grads, [g for g in identity if len(g)], clip) - with_all
    assert np.linalg.norm(moved) <= 2 * clip + 1e-9


def test_shuffle_composes_one_release_per_epoch_by_pld_with_rdp_beside() -> None:
    proved = proved_dpsgd(facts(sampling="shuffle", steps=15 * 59, steps_per_epoch=59))
    event = dpe.SelfComposedDpEvent(dpe.GaussianDpEvent(0.5), 15)
    assert proved.accountant == "pld"
    assert proved.epsilon == pytest.approx(epsilon_pld(event, 1e-5), rel=1e-12)
    assert proved.epsilon_rdp == pytest.approx(epsilon_rdp(event, 1e-5), rel=1e-12)
    # the 15-epoch flip of reports/mnist-gap-attribution: 62.24 by PLD beside 65.42 by RDP
    assert proved.epsilon == pytest.approx(62.24, abs=0.01)
    assert proved.epsilon_rdp == pytest.approx(65.42, abs=0.01)
    assert proved.relation == REPLACE_ONE
    assert "loose upper bound" in proved.reason and "by RDP" in proved.reason
    assert proved.epsilon > poisson_eps(1.0, Q, 15 * 59, 1e-5)  # far above the claim


def test_shuffle_with_microbatches_is_the_same_per_epoch_bound() -> None:
    plain = proved_dpsgd(facts(sampling="shuffle", steps=15 * 59))
    micro = proved_dpsgd(facts(sampling="shuffle", steps=15 * 59, microbatch_size=32))
    assert micro.epsilon == pytest.approx(plain.epsilon)
    assert "22.4" in micro.reason or "22.5" in micro.reason  # the Poisson figure, as a note


@pytest.mark.parametrize("changes", [
    {"divisor": "actual batch size"}, {"divisor": "actual microbatch count"},
    {"input_scaling": "standardised"}, {"eval_split": "train"},
])
def test_unprovable_settings_have_no_proved_epsilon_and_say_why(changes: dict) -> None:
    proved = proved_dpsgd(facts(**changes))
    assert proved.epsilon is None
    assert "no bound" in proved.reason


def test_laplace_uses_pld() -> None:
    proved = proved_dpsgd(facts(mechanism="dpsgd-laplace", noise_multiplier=2.0, steps=50))
    event = dpe.SelfComposedDpEvent(dpe.PoissonSampledDpEvent(Q, dpe.LaplaceDpEvent(2.0)), 50)
    assert proved.accountant == "pld"
    assert proved.epsilon == pytest.approx(epsilon_pld(event, 1e-5), rel=1e-9)


def _privacy(mechanism: str = "dpsgd-gaussian", **extra: object) -> dict:
    out = {"mechanism": mechanism, "noise_multiplier": 1.0, "delta": 1e-5, "steps": 879,
           "steps_completed": 879, "sampling_rate": Q, "expected_batch_size": 1024,
           "n_examples": 60000, "epsilon_rdp": poisson_eps(1.0, Q, 879, 1e-5),
           "epsilon_pld": None}
    out.update(extra)
    return out


def _config(**sections: object) -> dict:
    raw = {"privacy": {"mechanism": "dpsgd-gaussian", "noise_multiplier": 1.0,
                       "sampling": "poisson"}}
    raw.update(sections)
    return RunConfig.from_dict(raw).to_dict()


def test_record_of_a_harmonised_run_proves_its_claim() -> None:
    figures = privacy_figures(_config(), "torch", _privacy())
    assert figures["epsilon_proved"] == pytest.approx(figures["epsilon_claimed"])


def test_record_of_the_microbatch_flip_is_the_shuffle_bound() -> None:
    config = _config(privacy={"mechanism": "dpsgd-gaussian", "noise_multiplier": 1.0,
                              "sampling": "shuffle"},
                     train={"batch_size": 1024},
                     factors={"microbatch_size": 32, "normalisation": "microbatches"})
    proved = proved_for_record(config, "tf", _privacy(steps=15 * 59, steps_completed=15 * 59))
    event = dpe.SelfComposedDpEvent(dpe.GaussianDpEvent(0.5), 15)
    assert proved.epsilon == pytest.approx(epsilon_pld(event, 1e-5))
    figures = privacy_figures(config, "tf", _privacy(steps=15 * 59, steps_completed=15 * 59))
    assert figures["epsilon_proved_rdp"] == pytest.approx(epsilon_rdp(event, 1e-5))
    assert figures["epsilon_proved_accountant"] == "pld"


def test_library_records_use_what_ran() -> None:
    tf_stock = _config(recipe="library", privacy={"mechanism": "dpsgd-gaussian",
                                                  "noise_multiplier": 1.0,
                                                  "sampling": "shuffle"})
    as_run = {"sampling_rate": 1024 / 60000, "steps": 15 * 58, "steps_per_epoch": 58}
    tf_proved = proved_for_record(tf_stock, "tf", _privacy(as_run=as_run))
    expected = epsilon_pld(dpe.SelfComposedDpEvent(dpe.GaussianDpEvent(0.5), 15), 1e-5)
    assert tf_proved.epsilon == pytest.approx(expected)
    torch_stock = _config(recipe="library")
    run = {"sampling_rate": 1 / 59, "steps": 15 * 59, "steps_per_epoch": 59}
    torch_proved = proved_for_record(torch_stock, "torch", _privacy(as_run=run))
    assert torch_proved.epsilon == pytest.approx(poisson_eps(1.0, 1 / 59, 15 * 59, 1e-5))


def test_harmonised_actual_divisor_under_poisson_is_not_proved() -> None:
    config = _config(factors={"normalisation": "actual"})
    assert proved_for_record(config, "tf", _privacy()).epsilon is None


def test_local_dp_proves_the_per_image_epsilon() -> None:
    privacy = {"mechanism": "ldp", "ldp": {"epsilon_per_image": 12.5}}
    figures = privacy_figures({"privacy": {}}, "tf", privacy)
    assert figures["epsilon_claimed"] == figures["epsilon_proved"] == 12.5
    assert figures["epsilon_proved_accountant"] == "ldp"


def test_non_private_is_infinite() -> None:
    figures = privacy_figures({"privacy": {}}, "tf", {"mechanism": "none"})
    assert figures["epsilon_claimed"] == figures["epsilon_proved"] == math.inf
    assert claimed_epsilon({"mechanism": "none"}) == math.inf


def test_a_fault_keeps_the_specified_bound_and_says_broken() -> None:
    config = _config(factors={"fault": "no_noise"}, audit_canaries={"count": 10})
    proved = proved_for_record(config, "tf", _privacy())
    assert proved.epsilon == pytest.approx(poisson_eps(1.0, Q, 879, 1e-5))
    assert "DELIBERATELY BROKEN" in proved.reason


def test_old_records_get_both_figures() -> None:
    old = SimpleNamespace(config=_config(), backend="torch", privacy=_privacy())
    assert figures_of_result(old)["epsilon_proved"] == pytest.approx(
        _privacy()["epsilon_rdp"])


def test_figures_stored_under_other_rules_are_recomputed_current_ones_kept() -> None:
    """A shuffled record that stored its proved figure by the former rules (RDP, no rules
    version) shows the current one (PLD, RDP beside); one stored under the current rules
    keeps what it stored."""
    config = _config(privacy={"mechanism": "dpsgd-gaussian", "noise_multiplier": 1.0,
                              "sampling": "shuffle"}, train={"batch_size": 1024})
    privacy = _privacy(steps=15 * 59, steps_completed=15 * 59)
    event = dpe.SelfComposedDpEvent(dpe.GaussianDpEvent(0.5), 15)
    stale = {**privacy, "epsilon_claimed": 3.4, "epsilon_proved": epsilon_rdp(event, 1e-5),
             "epsilon_proved_reason": "former rules", "epsilon_proved_relation": REPLACE_ONE,
             "epsilon_proved_accountant": "rdp"}
    figures = figures_of_result(SimpleNamespace(config=config, backend="tf", privacy=stale))
    assert figures["epsilon_proved"] == pytest.approx(epsilon_pld(event, 1e-5))
    assert figures["epsilon_proved_rdp"] == pytest.approx(epsilon_rdp(event, 1e-5))
    assert figures["epsilon_proved_rules"] == PROVED_RULES
    current = {**stale, "epsilon_proved_rules": PROVED_RULES, "epsilon_proved_rdp": None}
    kept = figures_of_result(SimpleNamespace(config=config, backend="tf", privacy=current))
    assert kept["epsilon_proved"] == stale["epsilon_proved"]
    assert kept["epsilon_proved_reason"] == "former rules"


def test_violation_is_audited_above_proved_else_claimed() -> None:
    assert is_violation(1.5, 1.0, 1.0)
    assert not is_violation(0.5, 1.0, 1.0)
    assert is_violation(1.5, 1.0, None)  # nothing proved: the claim is the reference
    assert not is_violation(1.5, 1.0, 2.0)  # a larger proved bound still holds
    assert not is_violation(None, 1.0, 1.0)
    assert not is_violation(3.0, math.inf, math.inf)
