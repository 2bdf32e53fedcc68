"""Claimed vs proved epsilon: one test per rule of dpcore.proved."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from dp_accounting import dp_event as dpe

from dpcore.accounting import epsilon_pld, epsilon_rdp
from dpcore.config import RunConfig
from dpcore.proved import (
    ADD_REMOVE,
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


def test_table_one_microbatch_flip_is_22_5_by_rdp() -> None:
    """Issue 30: noise 1.0 / 2, q = 1024/60000, 15 epochs, delta 1e-5 -> 22.5 +- 0.5."""
    proved = proved_dpsgd(facts(microbatch_size=32, steps=math.ceil(15 / Q)))
    assert proved.epsilon == pytest.approx(22.5, abs=0.5)
    assert proved.relation == ADD_REMOVE and "2C" in proved.reason


def test_shuffle_composes_one_release_per_epoch_without_amplification() -> None:
    proved = proved_dpsgd(facts(sampling="shuffle", steps=15 * 59, steps_per_epoch=59))
    expected = epsilon_rdp(dpe.SelfComposedDpEvent(dpe.GaussianDpEvent(0.5), 15), 1e-5)
    assert proved.epsilon == pytest.approx(expected, rel=1e-12)
    assert proved.relation == REPLACE_ONE
    assert "loose upper bound" in proved.reason
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
    expected = epsilon_rdp(dpe.SelfComposedDpEvent(dpe.GaussianDpEvent(0.5), 15), 1e-5)
    assert proved.epsilon == pytest.approx(expected)


def test_library_records_use_what_ran() -> None:
    tf_stock = _config(recipe="library", privacy={"mechanism": "dpsgd-gaussian",
                                                  "noise_multiplier": 1.0,
                                                  "sampling": "shuffle"})
    as_run = {"sampling_rate": 1024 / 60000, "steps": 15 * 58, "steps_per_epoch": 58}
    tf_proved = proved_for_record(tf_stock, "tf", _privacy(as_run=as_run))
    expected = epsilon_rdp(dpe.SelfComposedDpEvent(dpe.GaussianDpEvent(0.5), 15), 1e-5)
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


def test_violation_is_audited_above_proved_else_claimed() -> None:
    assert is_violation(1.5, 1.0, 1.0)
    assert not is_violation(0.5, 1.0, 1.0)
    assert is_violation(1.5, 1.0, None)  # nothing proved: the claim is the reference
    assert not is_violation(1.5, 1.0, 2.0)  # a larger proved bound still holds
    assert not is_violation(None, 1.0, 1.0)
    assert not is_violation(3.0, math.inf, math.inf)
