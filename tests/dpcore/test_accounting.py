"""The shared ledger against closed forms, the libraries, and calibration round trips."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import dp_event as dpe
from dp_accounting.rdp import rdp_privacy_accountant

from dpcore.accounting import (
    calibrate_noise_multiplier,
    dpsgd_event,
    epsilon_pld,
    epsilon_rdp,
    plan_privacy,
)
from dpcore.config import PrivacySpec, RunConfig, TrainSpec
from dpcore.errors import ConfigError


def test_gaussian_rdp_closed_form_without_sampling() -> None:
    # Without subsampling, T Gaussian steps with noise sigma have RDP T * alpha / (2 sigma^2);
    # epsilon(delta) = min_alpha [ rdp(alpha) + log(1/delta)/(alpha-1) ] with the conversion
    # dp_accounting uses (Canonne-Kamath-Steinke 2020, Prop. 12): + log((alpha-1)/alpha)
    # - (log(delta) + log(alpha))/(alpha-1).
    sigma, steps, delta = 3.0, 10, 1e-5
    orders = np.array(rdp_privacy_accountant.DEFAULT_RDP_ORDERS, dtype=float)
    rdp = steps * orders / (2 * sigma**2)
    accountant = rdp_privacy_accountant.RdpAccountant(orders.tolist())
    accountant.compose(dpe.SelfComposedDpEvent(dpe.GaussianDpEvent(sigma), steps))
    # the accountant's RDP curve equals the closed form at every order
    np.testing.assert_allclose(accountant._rdp, rdp, rtol=1e-12)
    eps_closed = np.min(
        rdp + np.log((orders - 1) / orders) - (math.log(delta) + np.log(orders)) / (orders - 1)
    )
    event = dpsgd_event("dpsgd-gaussian", sigma, 1.0, steps)
    assert epsilon_rdp(event, delta) == pytest.approx(eps_closed, rel=1e-9)


def test_laplace_without_sampling_is_pure_dp() -> None:
    # T Laplace steps of scale b (sensitivity 1) compose to epsilon = T / b (pure DP); the PLD
    # accountant reaches that at any delta (up to its discretisation).
    event = dpsgd_event("dpsgd-laplace", 4.0, 1.0, 8)
    assert epsilon_pld(event, 1e-9) == pytest.approx(8 / 4.0, abs=2e-3)
    # dp_accounting's RDP has no subsampled-Laplace bound: reported as unsupported, not guessed
    assert epsilon_rdp(dpsgd_event("dpsgd-laplace", 4.0, 0.5, 8), 1e-5) is None


def test_library_benchmark_setting_ordering() -> None:
    event = dpsgd_event("dpsgd-gaussian", 1.0, 0.0169, 60 * 59)
    rdp, pld = epsilon_rdp(event, 1e-5), epsilon_pld(event, 1e-5)
    assert rdp is not None and pld is not None
    assert 0 < pld < rdp < 10  # PLD is tighter than RDP
    assert rdp == pytest.approx(6.906, abs=0.01)


def test_zero_noise_is_not_private() -> None:
    event = dpsgd_event("dpsgd-gaussian", 0.0, 0.1, 5)
    assert isinstance(event, dpe.NonPrivateDpEvent)
    assert epsilon_rdp(event, 1e-5) == math.inf


@pytest.mark.parametrize(
    ("mechanism", "target", "q", "steps"),
    [
        ("dpsgd-gaussian", 1.0, 256 / 60000, 1000),
        ("dpsgd-gaussian", 8.0, 0.01, 300),
        ("dpsgd-laplace", 2.0, 0.01, 200),
    ],
)
def test_calibration_round_trip_within_one_percent(
    mechanism: str, target: float, q: float, steps: int
) -> None:
    noise = calibrate_noise_multiplier(mechanism, target, 1e-5, q, steps)
    event = dpsgd_event(mechanism, noise, q, steps)
    achieved = epsilon_rdp(event, 1e-5) if mechanism == "dpsgd-gaussian" else epsilon_pld(
        event, 1e-5
    )
    assert achieved is not None
    assert achieved <= target * 1.0001
    assert achieved == pytest.approx(target, rel=0.01)


def test_calibration_rejects_bad_targets() -> None:
    with pytest.raises(ConfigError, match="target_epsilon"):
        calibrate_noise_multiplier("dpsgd-gaussian", 0.0, 1e-5, 0.1, 10)
    with pytest.raises(ConfigError, match="delta"):
        calibrate_noise_multiplier("dpsgd-gaussian", 1.0, 1.0, 0.1, 10)
    with pytest.raises(ConfigError, match="cannot be calibrated"):
        calibrate_noise_multiplier("none", 1.0, 1e-5, 0.1, 10)


def test_plan_privacy_for_each_mechanism() -> None:
    train = TrainSpec(epochs=2, batch_size=100)
    dp = plan_privacy(RunConfig(privacy=PrivacySpec(mechanism="dpsgd-gaussian",
                                                    target_epsilon=3.0), train=train), 5000)
    assert dp.calibrated and dp.delta == pytest.approx(1e-5)  # below 1/(10 N), N = 5000
    assert dp.batches.steps == 100 and dp.epsilon_rdp == pytest.approx(3.0, rel=0.01)
    plain = plan_privacy(RunConfig(train=train), 5000)
    assert plain.epsilon_rdp == math.inf and plain.noise_multiplier == 0.0
    shuffle = plan_privacy(
        RunConfig(privacy=PrivacySpec(mechanism="dpsgd-gaussian", noise_multiplier=1.0,
                                      sampling="shuffle"), train=train), 5000)
    assert "shuffle" in shuffle.accounting_note
    record = dp.to_dict()
    assert record["dp_event"]["class_name"] == "SelfComposedDpEvent"
    assert record["steps"] == 100


def test_calibrator_registry_rejects_unknown_names_listing_the_registered_ones() -> None:
    from dpcore.accountants import ACCOUNTANTS
    from dpcore.accounting import CALIBRATORS, get_calibrator

    assert {"rdp", "pld"} <= set(CALIBRATORS) <= set(ACCOUNTANTS)  # each one is declared
    with pytest.raises(ConfigError) as err:
        calibrate_noise_multiplier("dpsgd-gaussian", 1.0, 1e-5, 0.1, 10, accountant="moments")
    message = str(err.value)
    assert "'moments'" in message and "\n" not in message
    assert f"valid: {', '.join(CALIBRATORS)}" in message
    with pytest.raises(ConfigError, match="'moments' is not known to the calibrators"):
        get_calibrator("moments")


def test_prv_is_registered_by_the_torch_backend_not_by_dpcore() -> None:
    """dpcore alone knows rdp and pld (it never imports torch); asking it for prv names the
    backend that registers it; loading that backend registers it."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from dpcore.accounting import calibrate_noise_multiplier, CALIBRATORS\n"
        "from dpcore.errors import ConfigError\n"
        "assert list(CALIBRATORS) == ['rdp', 'pld'], CALIBRATORS\n"
        "try:\n"
        "    calibrate_noise_multiplier('dpsgd-gaussian', 1.0, 1e-5, 0.1, 10, accountant='prv')\n"
        "except ConfigError as exc:\n"
        "    print(exc)\n"
        "assert 'torch' not in sys.modules\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert "calibration_accountant='prv' is not known to the calibrators; valid: rdp, pld" in out
    assert "torch backend" in out
