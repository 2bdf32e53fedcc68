"""The statistics of ``dpcompare verify`` without a framework: their false-alarm rates hold on
honest noise and samplers (seeded simulations), and each test fails the defect it is there for,
also when the defect is 64 coordinates among a million."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import dp_event as dpe
from scipy import stats

from dpcore.sampling import poisson_batches
from dpcore.verify import noise
from dpcore.verify.accounting import AccountantView, sampling_results, sigma_result
from dpcore.verify.stats import (
    binomial_interval,
    chi2_interval,
    chi2_min_bound,
    dispersion_statistic,
    gaussianise,
    normal_bound,
)

ALPHA = 1e-4
#: A million weights in a few tensors (a conv kernel, a dense kernel, biases).
SHAPES = {"conv.kernel": 600_000, "fc.kernel": 399_900, "fc.bias": 100}
STEPS = 8


def honest(seed: int = 0, steps: int = STEPS) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal((steps, n)).astype(np.float32) for k, n in SHAPES.items()}


def all_pass(z: dict[str, np.ndarray], other: dict[str, np.ndarray]) -> list[str]:
    """Names of the failed noise tests on ``z`` (``other``: the other key's noise)."""
    results = [*noise.noise_scale(z, ALPHA), *noise.noise_coordinates(z, ALPHA),
               *noise.noise_mean(z, ALPHA), *noise.noise_fresh(z, ALPHA),
               *noise.noise_independence(z, ALPHA), *noise.noise_keys(z, other, ALPHA)]
    return sorted({r.check for r in results if not r.passed})


def test_honest_noise_passes_every_noise_test() -> None:
    for seed in range(3):
        assert all_pass(honest(seed), honest(100 + seed, 2)) == []


def test_a_64_coordinate_patch_without_noise_is_found_among_a_million() -> None:
    z = honest()
    z["conv.kernel"][:, 1000:1064] = 0.0
    assert "noise-coordinates" in all_pass(z, honest(100, 2))


def test_a_64_coordinate_bias_of_three_noise_stds_is_found_among_a_million() -> None:
    z = honest()
    z["fc.kernel"][:, 500:564] += 3.0
    assert "noise-mean" in all_pass(z, honest(100, 2))


def test_a_tensor_without_noise_and_one_with_twice_the_noise_fail_the_scale_test() -> None:
    z = honest()
    z["fc.bias"][:] = 0.0
    assert "noise-scale" in all_pass(z, honest(100, 2))
    z = honest()
    z["fc.bias"] *= 2
    assert "noise-scale" in all_pass(z, honest(100, 2))


def test_reused_noise_fails_the_freshness_test() -> None:
    z = honest()
    for k in z:
        z[k][1] = z[k][0]  # identical noise in two steps
    assert "noise-fresh" in all_pass(z, honest(100, 2))
    z = honest()
    z["fc.bias"][1::2] = z["fc.bias"][0::2]  # one tensor's noise repeated, lag 1
    assert "noise-fresh" in all_pass(z, honest(100, 2))


def test_repeated_or_restarted_noise_fails_the_independence_test() -> None:
    z = honest()
    z["fc.kernel"][:, 1::2] = z["fc.kernel"][:, 0::2]  # drawn for half and repeated
    assert "noise-independence" in all_pass(z, honest(100, 2))
    z = honest()
    z["fc.bias"][:] = z["conv.kernel"][:, :100]  # one stream restarted per tensor
    assert "noise-independence" in all_pass(z, honest(100, 2))


def test_noise_that_ignores_the_key_fails_the_key_test() -> None:
    z = honest()
    assert "noise-keys" in all_pass(z, {k: v[:2].copy() for k, v in z.items()})


def test_laplace_noise_is_gaussianised_exactly() -> None:
    rng = np.random.default_rng(1)
    g = gaussianise(rng.laplace(0.0, 1.0, 200_000), "laplace")
    assert abs(g.mean()) < 0.01 and abs(g.std() - 1) < 0.01
    assert stats.kstest(g, "norm").pvalue > 1e-3
    assert np.isfinite(gaussianise(np.array([-800.0, 800.0]), "laplace")).all()


def test_the_product_bound_is_conservative_in_simulation() -> None:
    rng = np.random.default_rng(2)
    m, trials, alpha = 20, 200_000, 0.05
    sums = np.sum(rng.standard_normal((trials, m)) * rng.standard_normal((trials, m)), axis=1)
    rate = float(np.mean(np.abs(sums) > noise.product_sum_bound(m, alpha)))
    assert rate <= alpha
    assert rate > alpha / 20  # a bound, but not a vacuous one


def test_quantile_helpers_have_their_stated_tails() -> None:
    region = chi2_interval(50, 0.01)
    assert stats.chi2.cdf(region.low, 50) == pytest.approx(0.005)
    assert stats.chi2.sf(region.high, 50) == pytest.approx(0.005)
    assert stats.chi2.cdf(chi2_min_bound(8, 0.01, 1000), 8) == pytest.approx(1e-5)
    assert normal_bound(0.01, 10) == pytest.approx(stats.norm.isf(0.0005))
    b = binomial_interval(10_000, 0.1, 0.01)
    assert stats.binom.cdf(b.low - 1, 10_000, 0.1) <= 0.005
    assert stats.binom.sf(b.high, 10_000, 0.1) <= 0.005


def _view(q_event: float, batches: list[np.ndarray], n: int, sampling: str = "poisson",
          batch_size: int = 50) -> AccountantView:
    event = dpe.SelfComposedDpEvent(dpe.PoissonSampledDpEvent(q_event, dpe.GaussianDpEvent(1.0)),
                                    len(batches))
    return AccountantView(event, 1.0, sampling, q_event, len(batches), n, batch_size,
                          math.ceil(n / batch_size), lambda: iter(batches), "test batches")


def test_the_sampling_test_takes_an_honest_poisson_sampler_and_refuses_a_wrong_rate() -> None:
    n, q = 2000, 0.025
    batches = list(poisson_batches(n, q, 400, seed=3))
    assert all(r.passed for r in sampling_results(_view(q, batches, n), ALPHA))
    assert not all(r.passed for r in sampling_results(_view(q / 2, batches, n), ALPHA))


def test_the_dispersion_test_refuses_a_weighted_sampler() -> None:
    n, q, steps = 2000, 0.025, 400
    rng = np.random.default_rng(4)
    weights = np.where(np.arange(n) < n // 2, 1.5, 0.5) * q  # mean q, not uniform
    batches = [np.flatnonzero(rng.random(n) < weights) for _ in range(steps)]
    results = sampling_results(_view(q, batches, n), ALPHA)
    failed = [r.test for r in results if not r.passed]
    assert any("dispersion" in t for t in failed), failed
    honest_counts = np.zeros(n)
    for b in poisson_batches(n, q, steps, seed=5):
        honest_counts[b] += 1
    assert abs(dispersion_statistic(honest_counts, steps, q)) < normal_bound(ALPHA)


def test_the_shuffle_test_refuses_an_example_twice_in_an_epoch() -> None:
    n, b = 100, 25
    order = np.random.default_rng(6).permutation(n)
    good = [np.sort(order[i:i + b]) for i in range(0, n, b)]
    assert all(r.passed for r in sampling_results(_view(b / n, good, n, "shuffle", b), ALPHA))
    bad = [*good[:3], np.sort(np.concatenate([good[3][:-1], good[0][:1]]))]
    assert not all(r.passed for r in sampling_results(_view(b / n, bad, n, "shuffle", b),
                                                      ALPHA))


def test_the_sigma_test_measures_the_noise_multiplier() -> None:
    rng = np.random.default_rng(7)
    view = _view(0.1, [np.arange(3)], 30)
    draws = rng.standard_normal(100_000)
    assert sigma_result(float(np.sum(draws ** 2)), draws.size, "gaussian", view, ALPHA).passed
    assert not sigma_result(float(np.sum((0.95 * draws) ** 2)), draws.size, "gaussian", view,
                            ALPHA).passed
    lap = rng.laplace(0.0, 1.0, 100_000)
    assert sigma_result(float(np.sum(np.abs(lap))), lap.size, "laplace", view, ALPHA).passed
    assert not sigma_result(float(np.sum(np.abs(1.05 * lap))), lap.size, "laplace", view,
                            ALPHA).passed
