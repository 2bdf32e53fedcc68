"""The statistics of ``dpcompare verify``: each test's statistic and its threshold at a stated
false-alarm rate, framework-neutral (numpy and scipy).

Every function here returns the acceptance region of a test whose *false-alarm rate* (the
probability that an honest step fails it) is at most the ``alpha`` it is given, exactly
(chi-square, gamma, normal and binomial quantiles) or by a stated union bound (Bonferroni over
the coordinates or tensors a maximum or a minimum runs over). The noise tests work on
*standardised* noise: the noise a step added, divided by its scale, then mapped to a standard
normal by the probability integral transform of its law (:func:`gaussianise`), so one set of
tests serves the Gaussian and the Laplace sampler.

Hand-written over scipy (no library offers these tests on a stream of high-dimensional noise
vectors); each is a textbook test, named where it is used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import special, stats

from dpcore.errors import ConfigError

#: Noise laws :func:`gaussianise` knows (the names of :data:`dpcore.mechanisms.NOISE_SAMPLERS`).
NOISE_LAWS = ("gaussian", "laplace")


def gaussianise(scaled: np.ndarray, law: str) -> np.ndarray:
    """Noise divided by its scale, mapped to N(0, 1) under the law it should follow.

    Args:
        scaled: noise / scale: Gaussian noise / its std, Laplace noise / its scale b.
        law: ``gaussian`` (returned as it is, float64) or ``laplace`` (the probability integral
            transform ``Phi^-1(F_Laplace(x))``, computed from the log of the tail on each side
            so that no precision is lost far out).

    Returns:
        float64 values that are i.i.d. N(0, 1) exactly when the input follows the law.
    """
    x = np.asarray(scaled, dtype=np.float64)
    if law == "gaussian":
        return x
    if law == "laplace":
        log_tail = math.log(0.5) - np.abs(x)  # log P(L > |x|) of a standard Laplace
        return -np.sign(x) * special.ndtri_exp(log_tail)
    raise ConfigError(f"noise law {law!r} is not known; valid: {', '.join(NOISE_LAWS)}")


@dataclass(frozen=True)
class Interval:
    """An acceptance region ``[low, high]`` of a statistic (either end may be infinite)."""

    low: float
    high: float

    def contains(self, value: float) -> bool:
        """True when ``value`` lies in the region (NaN never does)."""
        return bool(self.low <= value <= self.high)

    def describe(self) -> str:
        """The region in words: ``[a, b]``, ``<= b`` or ``>= a``."""
        if math.isinf(self.low) and math.isinf(self.high):
            return "any value"
        if math.isinf(self.low):
            return f"<= {self.high:.6g}"
        if math.isinf(self.high):
            return f">= {self.low:.6g}"
        return f"[{self.low:.6g}, {self.high:.6g}]"


def chi2_interval(dof: float, alpha: float) -> Interval:
    """Two-sided region of a sum of ``dof`` squared standard normals: false-alarm rate
    ``alpha`` (``alpha / 2`` in each tail)."""
    _check_alpha(alpha)
    return Interval(float(stats.chi2.ppf(alpha / 2, dof)), float(stats.chi2.isf(alpha / 2, dof)))


def normal_bound(alpha: float, count: int = 1) -> float:
    """``z`` with ``P(max of count |N(0, 1)| > z) <= alpha`` by the union bound (Bonferroni):
    the two-sided normal quantile at ``alpha / count``."""
    _check_alpha(alpha)
    return float(stats.norm.isf(alpha / (2 * max(int(count), 1))))


def chi2_min_bound(dof: float, alpha: float, count: int) -> float:
    """``x`` with ``P(min of count chi2(dof) values < x) <= alpha`` (union bound): the lower
    ``alpha / count`` quantile of chi2(dof). A coordinate whose noise is missing sums to 0."""
    _check_alpha(alpha)
    return float(stats.chi2.ppf(alpha / max(int(count), 1), dof))


def chi2_max_bound(dof: float, alpha: float, count: int) -> float:
    """``x`` with ``P(max of count chi2(dof) values > x) <= alpha`` (union bound)."""
    _check_alpha(alpha)
    return float(stats.chi2.isf(alpha / max(int(count), 1), dof))


def binomial_interval(trials: int, p: float, alpha: float) -> Interval:
    """Two-sided region of a Binomial(trials, p) count: each tail at most ``alpha / 2``."""
    _check_alpha(alpha)
    if not 0 < p <= 1:
        raise ConfigError(f"binomial p={p!r} is not valid; valid: (0, 1]")
    low = float(stats.binom.ppf(alpha / 2, trials, p))
    high = float(stats.binom.isf(alpha / 2, trials, p))
    # ppf/isf give the quantiles; the region [low, high] has tails <= alpha / 2 each when its
    # ends are the quantiles themselves (P(X < low) <= alpha/2, P(X > high) <= alpha/2)
    return Interval(low, high)


def dispersion_statistic(counts: np.ndarray, trials: int, p: float) -> float:
    """Standardised Pearson dispersion of per-example inclusion counts under i.i.d.
    Binomial(trials, p) inclusion (Poisson sampling): ``(X - N) / sqrt(Var X)`` with
    ``X = sum_i (c_i - trials p)^2 / (trials p (1 - p))``, whose exact mean is N (examples)
    and exact variance ``N (2 + (1 - 6 p (1 - p)) / (trials p (1 - p)))``; approximately
    N(0, 1) for the thousands of examples a data set holds (central limit over examples).
    A sampler that favours some examples (a weighted sampler) makes it large."""
    c = np.asarray(counts, dtype=np.float64)
    n = len(c)
    pq = p * (1.0 - p)
    if n == 0 or pq <= 0 or trials < 1:
        return 0.0
    x = float(np.sum((c - trials * p) ** 2) / (trials * pq))
    var = n * (2.0 + (1.0 - 6.0 * pq) / (trials * pq))
    return (x - n) / math.sqrt(var)


def union_alpha(alphas: list[float]) -> float:
    """The false-alarm rate of a set of tests, by the union bound (capped at 1)."""
    return float(min(1.0, sum(alphas)))


def _check_alpha(alpha: float) -> None:
    if not 0 < alpha < 1:
        raise ConfigError(f"false-alarm rate alpha={alpha!r} is not valid; valid: (0, 1)")


__all__ = ["NOISE_LAWS", "Interval", "binomial_interval", "chi2_interval", "chi2_max_bound",
           "chi2_min_bound", "dispersion_statistic", "gaussianise", "normal_bound",
           "union_alpha"]
