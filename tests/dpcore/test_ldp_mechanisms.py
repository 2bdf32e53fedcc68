"""Local-DP mechanisms: noise distribution, closed-form epsilons, DpEvents, validation."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting.pld import pld_privacy_accountant
from scipy import stats

from dpcore.config import LDP_MECHANISM_NAMES
from dpcore.errors import ConfigError, DataError, PrivacyError
from dpcore.ldp import (
    LDP_MECHANISMS,
    PROTECTS,
    DpPixMechanism,
    GaussianMechanism,
    LaplaceMechanism,
    analytic_gaussian_epsilon,
    build_mechanism,
)


def _images(n: int, h: int, w: int, c: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((n, h, w, c)).astype(np.float32)


def _pld_epsilon(event: dp_accounting.DpEvent, delta: float) -> float:
    accountant = pld_privacy_accountant.PLDAccountant()
    accountant.compose(event)
    return accountant.get_epsilon(delta)


def _balle_wang_delta(epsilon: float, sigma: float, sensitivity: float) -> float:
    """Hand-written analytic Gaussian delta(epsilon) (Balle & Wang 2018, Theorem 8), log-space."""
    a = sensitivity / (2 * sigma)
    b = epsilon * sigma / sensitivity
    return stats.norm.cdf(a - b) - math.exp(epsilon + stats.norm.logcdf(-a - b))


def test_registry_matches_config_names() -> None:
    assert tuple(LDP_MECHANISMS) == LDP_MECHANISM_NAMES


# -- noise distributions -------------------------------------------------------------------------

def test_laplace_noise_matches_configured_distribution() -> None:
    x = _images(60, 8, 8, 1)
    mech = LaplaceMechanism(scale=0.7)
    noise = (mech.apply(x, np.random.default_rng(1)) - x).ravel().astype(np.float64)
    assert stats.kstest(noise, stats.laplace(scale=0.7).cdf).pvalue > 0.01
    # ... and not some other distribution of the same family (the test has power).
    assert stats.kstest(noise, stats.laplace(scale=0.8).cdf).pvalue < 0.01


def test_gaussian_noise_matches_configured_distribution() -> None:
    x = _images(60, 8, 8, 3)
    mech = GaussianMechanism(sigma=0.3)
    noise = (mech.apply(x, np.random.default_rng(2)) - x).ravel().astype(np.float64)
    assert stats.kstest(noise, stats.norm(scale=0.3).cdf).pvalue > 0.01
    assert stats.kstest(noise, stats.norm(scale=0.33).cdf).pvalue < 0.01


def test_dp_pix_cell_noise_matches_fan_2018_scale() -> None:
    k, m, eps = 4, 3, 2.0
    x = _images(300, 8, 8, 1)
    mech = DpPixMechanism(k=k, m=m, epsilon=eps)
    out = mech.apply(x, np.random.default_rng(3)).astype(np.float64)
    # The output is constant over each k x k cell.
    blocks = out.reshape(300, 2, k, 2, k, 1)
    assert np.allclose(blocks, blocks[:, :, :1, :, :1, :], atol=1e-6)
    # Fan 2018: Lap(255 m / (k^2 eps)) in 0..255 units, i.e. m / (k^2 eps) in [0, 1] units.
    naive_means = x.astype(np.float64).reshape(300, 2, k, 2, k, 1).mean(axis=(2, 4))
    noise = (out[:, ::k, ::k, :] - naive_means).ravel()
    scale = (255 * m / (k * k * eps)) / 255
    assert stats.kstest(noise, stats.laplace(scale=scale).cdf).pvalue > 0.01


def test_dp_pix_edge_cells_get_scale_for_their_size() -> None:
    mech = DpPixMechanism(k=4, m=2, epsilon=1.0)
    rows, cols = mech.cell_sizes(10, 10)
    assert rows.tolist() == [4, 4, 2] and cols.tolist() == [4, 4, 2]
    x = _images(200, 10, 10, 3)
    out = mech.apply(x, np.random.default_rng(4)).astype(np.float64)
    starts = [0, 4, 8]
    cell_out = out[:, starts][:, :, starts]
    means = mech.pixelate(x)
    # naive reference for the cell means, including the 2-pixel-wide edge cells
    for r, r0 in enumerate(starts):
        for c, c0 in enumerate(starts):
            ref = x[:, r0:r0 + 4, c0:c0 + 4, :].astype(np.float64).mean(axis=(1, 2))
            assert np.allclose(means[:, r, c, :], ref)
    standardised = ((cell_out - means) / mech.cell_scales(10, 10)[None, :, :, None]).ravel()
    assert stats.kstest(standardised, stats.laplace(scale=1.0).cdf).pvalue > 0.01


def test_dp_pix_m_neighbourhood_privacy_loss_is_epsilon() -> None:
    """Changing m values by 1 moves the cell means by exactly epsilon worth of Laplace scale."""
    mech = DpPixMechanism(k=3, m=5, epsilon=0.8)
    h, w = 10, 7  # k divides neither side: edge cells of 1 and of 3 x 1 pixels
    base = np.zeros((1, h, w, 1))
    rng = np.random.default_rng(5)
    scales = mech.cell_scales(h, w)[None, :, :, None]
    for _ in range(20):
        changed = base.copy()
        flat = rng.choice(h * w, size=mech.m, replace=False)
        changed.reshape(-1)[flat] = 1.0
        loss = np.abs(mech.pixelate(changed) - mech.pixelate(base)) / scales
        assert loss.sum() == pytest.approx(mech.epsilon, rel=1e-12)


def test_clip_keeps_unit_range_and_no_clip_leaves_it() -> None:
    x = _images(20, 8, 8, 1)
    for mech in (LaplaceMechanism(1.0, clip=True), GaussianMechanism(1.0, clip=True),
                 DpPixMechanism(k=2, m=4, epsilon=0.5, clip=True)):
        out = mech.apply(x, np.random.default_rng(6))
        assert out.dtype == np.float32 and out.shape == x.shape
        assert out.min() >= 0.0 and out.max() <= 1.0
    unclipped = LaplaceMechanism(1.0).apply(x, np.random.default_rng(6))
    assert unclipped.min() < 0.0 and unclipped.max() > 1.0


def test_apply_is_deterministic_and_does_not_modify_input() -> None:
    x = _images(5, 8, 8, 1)
    before = x.copy()
    a = GaussianMechanism(0.5).apply(x, np.random.default_rng(7))
    b = GaussianMechanism(0.5).apply(x, np.random.default_rng(7))
    assert np.array_equal(a, b) and np.array_equal(x, before)


def test_apply_rejects_images_outside_unit_range() -> None:
    x = _images(2, 8, 8, 1) * 255
    with pytest.raises(PrivacyError, match=r"\[0, 1\]"):
        LaplaceMechanism(1.0).apply(x, np.random.default_rng(0))
    with pytest.raises(DataError, match="NHWC"):
        LaplaceMechanism(1.0).apply(np.zeros((8, 8), dtype=np.float32), np.random.default_rng(0))
    with pytest.raises(DataError, match="uint8"):
        LaplaceMechanism(1.0).apply(np.zeros((1, 8, 8, 1), np.uint8), np.random.default_rng(0))


# -- epsilons ------------------------------------------------------------------------------------

@pytest.mark.parametrize("scale", [0.5, 1.0, 4.0])
def test_laplace_epsilons_closed_form(scale: float) -> None:
    shape = (28, 28, 1)
    mech = LaplaceMechanism(scale)
    eps = mech.epsilons(shape, 1e-5)
    assert eps["per_value"]["epsilon"] == pytest.approx(1 / scale)
    assert eps["per_image"]["epsilon"] == pytest.approx(28 * 28 / scale)
    assert eps["per_value"]["delta"] == 0.0 and eps["per_image"]["delta"] == 0.0
    assert eps["protects"] == PROTECTS and "patient" in PROTECTS
    assert mech.dp_event(shape, "value") == dp_accounting.LaplaceDpEvent(scale)
    assert mech.dp_event(shape) == dp_accounting.LaplaceDpEvent(scale / 784)
    # the shared accountant agrees with the closed form (PLD at a tiny delta)
    assert _pld_epsilon(mech.dp_event(shape, "value"), 1e-12) == pytest.approx(1 / scale,
                                                                                rel=1e-3)


def test_gaussian_per_value_epsilon_matches_dp_accounting_and_balle_wang() -> None:
    mech = GaussianMechanism(sigma=1.0)
    eps = mech.epsilons((8, 8, 1), 1e-5)
    per_value = eps["per_value"]["epsilon"]
    assert per_value == pytest.approx(_pld_epsilon(dp_accounting.GaussianDpEvent(1.0), 1e-5),
                                      rel=1e-4)
    assert per_value == pytest.approx(4.3772, abs=1e-3)  # the known value at sigma 1, 1e-5
    assert _balle_wang_delta(per_value, 1.0, 1.0) == pytest.approx(1e-5, rel=1e-5)
    assert "Balle" in eps["method"]


@pytest.mark.parametrize("sigma", [0.1, 0.5, 2.0])
def test_gaussian_per_image_epsilon_is_exact(sigma: float) -> None:
    shape = (28, 28, 3)
    delta = 1e-6
    mech = GaussianMechanism(sigma)
    eps = mech.epsilons(shape, delta)
    sens = math.sqrt(28 * 28 * 3)
    assert eps["per_image"]["sensitivity"] == pytest.approx(sens)
    e = eps["per_image"]["epsilon"]
    # delta(eps) hits the target, and any smaller epsilon needs a larger delta
    assert _balle_wang_delta(e, sigma, sens) == pytest.approx(delta, rel=1e-4)
    assert _balle_wang_delta(e * 0.999, sigma, sens) > delta
    assert mech.dp_event(shape) == dp_accounting.GaussianDpEvent(sigma / sens)
    assert analytic_gaussian_epsilon(sigma, sens, delta) == e


def test_dp_pix_epsilons_formula() -> None:
    mech = DpPixMechanism(k=4, m=3, epsilon=2.0)
    eps = mech.epsilons((28, 28, 3), 1e-5)
    assert eps["per_m_neighbourhood"]["epsilon"] == 2.0
    assert eps["per_m_neighbourhood"]["epsilon_m_whole_pixels"] == 6.0
    assert eps["per_value"]["epsilon"] == pytest.approx(2.0 / 3)
    assert eps["per_image"]["epsilon"] == pytest.approx(28 * 28 * 3 * 2.0 / 3)
    # noise scale of a full cell: 255 m / (k^2 eps) in 0..255 units
    assert mech.cell_scales(28, 28)[0, 0] * 255 == pytest.approx(255 * 3 / (16 * 2.0))
    assert mech.dp_event((28, 28, 3), "m_neighbourhood") == dp_accounting.LaplaceDpEvent(0.5)
    image_event = mech.dp_event((28, 28, 3))
    assert image_event.noise_multiplier == pytest.approx(1 / eps["per_image"]["epsilon"])


def test_dp_pix_image_epsilon_bounds_a_whole_image_change() -> None:
    mech = DpPixMechanism(k=3, m=2, epsilon=1.0)
    a, b = np.zeros((1, 8, 8, 3)), np.ones((1, 8, 8, 3))
    loss = (np.abs(mech.pixelate(b) - mech.pixelate(a))
            / mech.cell_scales(8, 8)[None, :, :, None]).sum()
    assert loss == pytest.approx(mech.epsilons((8, 8, 3), 1e-5)["per_image"]["epsilon"])


# -- validation ----------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("name", "params", "match"),
    [
        ("laplace", {"scale": 0.0}, "scale=0.0"),
        ("laplace", {"scale": -1}, "scale=-1"),
        ("laplace", {"scale": math.inf}, "scale=inf"),
        ("laplace", {"scale": math.nan}, "scale=nan"),
        ("laplace", {"scale": "big"}, "scale='big'"),
        ("laplace", {"scale": True}, "scale=True"),
        ("gaussian", {"sigma": 0}, "sigma=0"),
        ("dp_pix", {"k": 0}, "k=0"),
        ("dp_pix", {"k": 2.5}, "k=2.5"),
        ("dp_pix", {"m": -3}, "m=-3"),
        ("dp_pix", {"epsilon": 0.0}, "epsilon=0.0"),
        ("dp_pix", {"epsilon": math.inf}, "epsilon=inf"),
        ("laplace", {"clip": "yes"}, "clip='yes'"),
        ("laplace", {"sigma": 1.0}, "unknown parameter"),
        ("uniform", {}, "'uniform' is not known"),
    ],
)
def test_bad_parameters_rejected(name: str, params: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as info:
        build_mechanism(name, params)
    assert "valid" in str(info.value)


def test_build_mechanism_coerces_yaml_numbers() -> None:
    mech = build_mechanism("dp_pix", {"k": 4.0, "m": 2, "epsilon": 1, "clip": True})
    assert mech == DpPixMechanism(k=4, m=2, epsilon=1.0, clip=True)
    assert isinstance(mech.k, int) and isinstance(mech.epsilon, float)
    assert mech.params() == {"k": 4, "m": 2, "epsilon": 1.0, "clip": True}
    assert mech.label() == "dp_pix-k4-m2-eps1-clip"


def test_noise_level_variants_are_validated() -> None:
    assert LaplaceMechanism(1.0).with_noise_level(2.0) == LaplaceMechanism(2.0)
    assert DpPixMechanism(k=2).with_noise_level(5).epsilon == 5.0
    with pytest.raises(ConfigError, match="sigma=-1"):
        GaussianMechanism(1.0).with_noise_level(-1)


def test_bad_level_delta_and_shape_rejected() -> None:
    with pytest.raises(ConfigError, match="level='pixel'"):
        LaplaceMechanism(1.0).dp_event((8, 8, 1), "pixel")
    with pytest.raises(ConfigError, match="delta=0"):
        GaussianMechanism(1.0).epsilons((8, 8, 1), 0)
    with pytest.raises(DataError, match="image_shape"):
        LaplaceMechanism(1.0).epsilons((8, 8), 1e-5)
