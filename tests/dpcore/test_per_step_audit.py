"""The per-step canary audit (dpcore.audit.per_step): its null distribution, its false-alarm
rate by simulation, what it flags, and the residuals of a run's trace."""

from __future__ import annotations

import numpy as np
import pytest

from dpcore.architectures import architecture
from dpcore.audit.canary_records import canary_records
from dpcore.audit.per_step import (
    CLIP_TEXT,
    NOT_FRESH_TEXT,
    CanaryTrace,
    clip_check,
    null_moments,
    per_step_audit,
    per_step_findings,
    threshold,
)
from dpcore.config import ModelSpec
from dpcore.errors import ConfigError

T, M = 60, 40
SCALE = 1.7


def _noise(rng: np.random.Generator, kind: str, shape: tuple[int, ...]) -> np.ndarray:
    if kind == "gaussian":
        return rng.normal(0.0, SCALE, shape)
    return rng.laplace(0.0, SCALE, shape)


def _keys(m: int = M) -> list[str]:
    return ["a.kernel"] * (m - m // 4) + ["a.bias"] * (m // 4)


@pytest.mark.parametrize("kind", ["gaussian", "laplace"])
def test_null_moments_match_a_simulation(kind: str) -> None:
    rng = np.random.default_rng(0)
    mean, var = null_moments(3, T, kind)
    ratios = np.array([per_step_audit(_noise(rng, kind, (T, 3)), ["a"] * 3, kind, SCALE,
                                      alpha=0.5).value for _ in range(3000)])
    assert ratios.mean() == pytest.approx(mean, abs=4 * np.sqrt(var / 3000))
    assert ratios.var() == pytest.approx(var, rel=0.12)


@pytest.mark.parametrize("kind", ["gaussian", "laplace"])
def test_an_honest_run_is_flagged_at_about_the_stated_rate(kind: str) -> None:
    """Family-wise false alarms over 2 tensors at alpha = 0.05: 1000 simulated honest runs."""
    rng = np.random.default_rng(1)
    alarms = sum(per_step_audit(_noise(rng, kind, (T, M)), _keys(), kind, SCALE,
                                alpha=0.05).flagged for _ in range(1000))
    assert 25 <= alarms <= 80  # binomial(1000, 0.05): 50 +- 7


def _honest(rng: np.random.Generator, kappa: float, momentum: float, kind: str = "gaussian"
            ) -> np.ndarray:
    """Residuals of an honest run whose real gradients drift, change with the batch, and
    respond to every earlier step's noise through the weights (heavy-ball momentum: the
    weights move by -lr * sum of earlier updates), with response ``kappa`` per unit of
    noise: e_t = z_t + a_t - kappa * sum_s c_(t-s) z_s."""
    z = _noise(rng, kind, (T, M))
    drift = np.cumsum(rng.normal(0.0, 0.3, (T, M)), axis=0) + rng.normal(0.0, 0.8, (T, M))
    velocity, moved, out = np.zeros(M), np.zeros(M), np.empty((T, M))
    for t in range(T):
        out[t] = z[t] + drift[t] - kappa * moved
        velocity = momentum * velocity + z[t]
        moved = moved + velocity
    return out


@pytest.mark.parametrize(("kappa", "momentum"), [(0.3, 0.0), (-0.5, 0.0), (-0.9, 0.0),
                                                 (-0.19, 0.9), (-0.05, 0.9)])
def test_real_gradients_that_respond_to_earlier_noise_raise_no_false_alarm(
        kappa: float, momentum: float) -> None:
    """Whatever the real gradients do, fresh noise cannot be predicted: at alpha = 0.05 an
    honest run is flagged at most about 5 % of the time (here: the responses that lower the
    statistic most, e.g. kappa = -1 + momentum^2)."""
    rng = np.random.default_rng(2)
    audits = [per_step_audit(_honest(rng, kappa, momentum), _keys(), "gaussian", SCALE,
                             alpha=0.05) for _ in range(300)]
    assert sum(a.flagged for a in audits) <= 25  # binomial(300, 0.05): 15 +- 4
    assert np.mean([a.value for a in audits]) >= 0.99


@pytest.mark.parametrize(("name", "make"), [
    ("one draw reused at every step", lambda rng: np.tile(rng.normal(0, SCALE, M), (T, 1))),
    ("one draw per epoch of 10 steps",
     lambda rng: np.repeat(rng.normal(0, SCALE, (T // 10, M)), 10, axis=0)),
    ("lag-1 correlation 0.3", lambda rng: _ar1(rng, 0.3)),
    ("a tenth of the noise", lambda rng: rng.normal(0, SCALE / 10, (T, M))),
])
def test_noise_that_is_not_fresh_is_flagged(name: str, make: object) -> None:
    rng = np.random.default_rng(3)
    audit = per_step_audit(make(rng), _keys(), "gaussian", SCALE)  # type: ignore[operator]
    assert audit.flagged, name
    assert audit.value < audit.threshold


def test_noise_missing_in_one_tensor_only_is_flagged_there() -> None:
    rng = np.random.default_rng(4)
    residuals = rng.normal(0, SCALE, (T, M))
    keys = _keys()
    bias = np.asarray(keys) == "a.bias"
    residuals[:, bias] = rng.normal(0, 0.01, (T, int(bias.sum()))) + 0.3
    audit = per_step_audit(residuals, keys, "gaussian", SCALE)
    assert audit.flagged and audit.tensor == "a.bias"
    assert audit.tensors["a.kernel"].ratio >= audit.tensors["a.kernel"].threshold


def _ar1(rng: np.random.Generator, rho: float) -> np.ndarray:
    out = np.empty((T, M))
    out[0] = rng.normal(0, SCALE, M)
    for t in range(1, T):
        out[t] = rho * out[t - 1] + np.sqrt(1 - rho * rho) * rng.normal(0, SCALE, M)
    return out


def test_the_threshold_is_stricter_with_more_coordinates_and_steps() -> None:
    assert threshold(100, 200, "gaussian", 1e-3) > threshold(10, 200, "gaussian", 1e-3)
    assert threshold(10, 400, "gaussian", 1e-3) > threshold(10, 50, "gaussian", 1e-3)
    assert 0 < threshold(1, 3, "gaussian", 1e-3) < threshold(1, 3, "laplace", 0.5) < 1


def test_bad_input_is_refused() -> None:
    with pytest.raises(ConfigError, match="noise scale"):
        per_step_audit(np.zeros((3, 2)), ["a", "a"], "gaussian", 0.0)
    with pytest.raises(ConfigError, match="do not match"):
        per_step_audit(np.zeros((3, 2)), ["a"], "gaussian", 1.0)
    with pytest.raises(ConfigError, match=">= 2 steps"):
        null_moments(4, 1, "gaussian")
    with pytest.raises(ConfigError, match="noise kind"):
        per_step_audit(np.zeros((3, 1)), ["a"], "uniform", 1.0)


def test_the_trace_keeps_observed_minus_the_canaries_clipped_contribution() -> None:
    arch = architecture(ModelSpec(name="custom", layers=[
        {"type": "Flatten", "name": "flat"}, {"type": "Dense", "name": "a", "units": 4}]),
        (1, 1, 3), 4)
    # canary 0 on a.kernel[0, 1] (touches a.bias[1]); canary 1 on a.bias[1]
    records = canary_records(arch, ["a.kernel", "a.bias"], [1, 1], 100.0, "l2")
    trace = CanaryTrace.of(records, clip_norm=1.0, kind="l2")
    assert {k: list(v) for k, v in trace.coordinates().items()} == {"a.bias": [1],
                                                                   "a.kernel": [1]}
    trace.sampled(np.array([True, True]))
    trace.observed({"a.kernel": np.array([5.0]), "a.bias": np.array([7.0])})
    step = 1.0 / np.sqrt(2.0)  # canary 0 clipped to norm 1 over two coordinates
    np.testing.assert_allclose(trace.residuals[0], [5.0 - step, 7.0 - step - 1.0])
    trace.sampled(np.array([False, False]))
    trace.observed({"a.kernel": np.array([5.0]), "a.bias": np.array([7.0])})
    np.testing.assert_allclose(trace.residuals[1], [5.0, 7.0])
    assert trace.audit("gaussian", 1.0) is None  # two steps: no statistic yet
    trace.sampled(np.array([False, False]))
    trace.observed({"a.kernel": np.array([5.0]), "a.bias": np.array([7.0])})
    audit = trace.audit("gaussian", 1.0)
    assert audit is not None and audit.steps == 3
    assert set(audit.tensors) == {"a.kernel", "a.bias"}
    with pytest.raises(ConfigError, match="without a sampled step"):
        trace.observed({"a.kernel": np.array([5.0]), "a.bias": np.array([7.0])})
    assert trace.masks[0].tolist() == [True, True] and trace.masks[1].tolist() == [False, False]
    assert trace.signs.tolist() == [1.0, 1.0]


Q = 0.05  # each canary's chance to join a step


def _sampling(rng: np.random.Generator, steps: int = 110) -> np.ndarray:
    return rng.random((steps, M)) < Q


def _signs(rng: np.random.Generator) -> np.ndarray:
    return rng.choice([-1.0, 1.0], M)


def test_the_clip_check_of_an_honest_engine_is_standard_normal() -> None:
    """Residuals of an honest engine (fresh noise plus real gradients that drift and respond
    to the noise) do not depend on whether the canary joined the step: Z is about N(0, 1)
    and flags about 5 % of 1000 runs at alpha = 0.05."""
    rng = np.random.default_rng(4)
    values = []
    for _ in range(1000):
        residuals = np.concatenate([_honest(rng, -0.5, 0.0), _honest(rng, 0.3, 0.0)])[:110]
        check = clip_check(residuals, _sampling(rng), _signs(rng), 1.0, alpha=0.05)
        assert check is not None
        values.append(check.value)
    values_arr = np.array(values)
    assert abs(values_arr.mean()) < 0.1 and values_arr.std() == pytest.approx(1.0, abs=0.1)
    assert 25 <= int((np.abs(values_arr) > 1.96).sum()) <= 80  # binomial(1000, 0.05)


@pytest.mark.parametrize("passed", [100.0, 4.0, 1.5, 0.0])
def test_a_canary_that_is_not_clipped_to_c_is_flagged(passed: float) -> None:
    """An engine that lets a canary's gradient through at ``passed`` times its clipped
    contribution shifts the residual by (passed - 1) C towards its gradient in each step that
    samples it (noise std SCALE = 1.7 C; nothing clipped is 100; 0: the canary lost, as when
    a chunk's sum is clipped as one record)."""
    rng = np.random.default_rng(5)
    sampled, signs = _sampling(rng), _signs(rng)
    residuals = rng.normal(0.0, SCALE, sampled.shape) + (passed - 1.0) * sampled * signs
    check = clip_check(residuals, sampled, signs, 1.0)
    assert check is not None and check.flagged and abs(check.value) > check.threshold
    assert np.sign(check.value) == np.sign(passed - 1.0)
    assert check.mean_shift == pytest.approx(passed - 1.0, abs=0.6)
    honest = clip_check(rng.normal(0.0, SCALE, sampled.shape), sampled, signs, 1.0)
    assert honest is not None and not honest.flagged


def test_the_clip_check_needs_a_sampled_and_two_missed_steps() -> None:
    sampled = np.zeros((5, M), bool)
    assert clip_check(np.ones((5, M)), sampled, np.ones(M), 1.0) is None
    with pytest.raises(ConfigError, match="do not match"):
        clip_check(np.ones((5, M)), np.zeros((4, M), bool), np.ones(M), 1.0)


def test_findings_of_a_stored_per_step_audit() -> None:
    assert per_step_findings(None) == []
    assert per_step_findings({"flagged": False}) == []  # a record without a clipping check
    assert per_step_findings({"flagged": True, "clip": {"flagged": True}}) == [
        NOT_FRESH_TEXT, CLIP_TEXT]
    assert per_step_findings({"flagged": False, "clip": {"flagged": True}}) == [CLIP_TEXT]
