"""The noise tests of ``dpcompare verify`` on standardised noise vectors.

Input: ``steps`` noise vectors of one step's noised sum (the noised sum minus the same step's
sum without noise), each divided by the noise scale the accountant was given (sigma C) and
mapped to N(0, 1) by :func:`dpcore.verify.stats.gaussianise`; under an honest step every
coordinate of every vector is an independent standard normal. Each test below returns its
statistic, its acceptance region and its false-alarm rate (``alpha``, split by Bonferroni
over the tensors, coordinates or pairs its maximum runs over):

* ``noise-scale``: per parameter tensor, ``sum z^2`` over its coordinates and the steps is
  chi-square with ``n T`` degrees of freedom (two-sided): a tensor without noise (a bias left
  out) or with the wrong scale fails however small it is;
* ``noise-coordinates``: per coordinate, ``sum_t z_t^2`` is chi-square(T); its minimum over
  all coordinates (a patch of coordinates without noise: 0) and its maximum (a patch with too
  much) against the union-bound quantiles over every coordinate;
* ``noise-mean``: per coordinate ``sum_t z_t / sqrt(T)`` and per tensor
  ``sum z / sqrt(n T)`` are N(0, 1): their largest absolute value (a bias of a few
  coordinates, or of a tensor);
* ``noise-fresh``: the noise of two steps is independent: for every pair of steps the sum
  over all coordinates of ``z_t z_t'`` (identical noise in two steps gives P, the number of
  coordinates), and per tensor the products of disjoint consecutive steps (lag 1);
* ``noise-independence``: coordinates are independent: per tensor the products of disjoint
  adjacent coordinates (noise drawn for fewer coordinates and repeated), and between every
  two tensors their first coordinates (one stream restarted for each tensor);
* ``noise-keys``: two runs with different noise keys draw independent noise: the products of
  their noise vectors, pooled and per tensor.

Sums of products of independent standard normals are bounded with the exact Chernoff bound of
their moment generating function (``E e^{t XY} = (1 - t^2)^{-1/2}``), which holds for any
number of terms (no normal approximation).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping

import numpy as np
from scipy.optimize import brentq

from dpcore.verify.report import CheckResult
from dpcore.verify.stats import (
    Interval,
    chi2_interval,
    chi2_max_bound,
    chi2_min_bound,
    normal_bound,
)

#: Noise vectors by parameter tensor: key -> float32 array [steps, coordinates].
NoiseMatrix = Mapping[str, np.ndarray]


@functools.lru_cache(maxsize=4096)
def product_sum_bound(terms: int, alpha: float) -> float:
    """``x`` with ``P(|sum of terms products X_i Y_i| > x) <= alpha`` for independent
    standard normals (Chernoff bound on each tail, ``alpha / 2`` each)."""
    m = max(int(terms), 1)
    target = math.log(alpha / 2)

    def log_bound(x: float) -> float:
        t = (-m + math.sqrt(m * m + 4 * x * x)) / (2 * x)
        return -t * x - 0.5 * m * math.log1p(-t * t)

    high = 4.0 * math.sqrt(m) + 4.0 * math.log(2 / alpha) + 1.0
    while log_bound(high) > target:
        high *= 2
    return float(brentq(lambda x: log_bound(x) - target, 1e-9, high, xtol=1e-9))


def _result(check: str, test: str, statistic: float, region: Interval, alpha: float,
            detail: str) -> CheckResult:
    return CheckResult(check, test, float(statistic), region.describe(), alpha,
                       region.contains(float(statistic)), detail)


def _worst(values: dict[str, float], bound_of: dict[str, float]) -> tuple[str, float]:
    """The key whose |value| / bound is largest, and that ratio."""
    key = max(values, key=lambda k: abs(values[k]) / bound_of[k])
    return key, abs(values[key]) / bound_of[key]


def noise_scale(z: NoiseMatrix, alpha: float) -> list[CheckResult]:
    """Per tensor: ``sum z^2 / (n T)`` against the chi-square interval / (n T) at
    ``alpha / tensors`` each; reported for the tensor furthest out of (or nearest the edge
    of) its region, with every failing tensor named."""
    share = alpha / len(z)
    ratios, regions, distance = {}, {}, {}
    for key, values in z.items():
        dof = values.size
        ratio = float(np.sum(np.square(values, dtype=np.float64))) / dof
        chi = chi2_interval(dof, share)
        region = Interval(chi.low / dof, chi.high / dof)
        ratios[key], regions[key] = ratio, region
        distance[key] = ((1 - ratio) / (1 - region.low) if ratio < 1
                         else (ratio - 1) / (region.high - 1))
    worst = max(distance, key=lambda k: distance[k])
    failing = [k for k in z if not regions[k].contains(ratios[k])]
    detail = ("z = the step's noise / (sigma C); 1 for noise of the accountant's scale, 0 for "
              "a tensor without noise")
    if failing:
        detail += "; out of range: " + ", ".join(f"{k} ({ratios[k]:.4g})" for k in failing)
    return [_result("noise-scale", f"per tensor ({len(z)}): mean z^2 of {worst}",
                    ratios[worst], regions[worst], alpha, detail)]


def noise_coordinates(z: NoiseMatrix, alpha: float) -> list[CheckResult]:
    """Per coordinate ``sum_t z_t^2`` ~ chi2(T): its minimum and maximum over all of them."""
    steps = next(iter(z.values())).shape[0]
    count = sum(v.shape[1] for v in z.values())
    low = chi2_min_bound(steps, alpha / 2, count)
    high = chi2_max_bound(steps, alpha / 2, count)
    sums = {k: np.sum(np.square(v, dtype=np.float64), axis=0) for k, v in z.items()}
    kmin = min(sums, key=lambda k: sums[k].min())
    kmax = max(sums, key=lambda k: sums[k].max())
    return [
        _result("noise-coordinates", f"min over {count} coordinates of sum_t z_t^2 "
                f"(at {kmin})", float(sums[kmin].min()), Interval(low, math.inf), alpha / 2,
                f"chi2({steps}) per coordinate; 0 where a coordinate gets no noise"),
        _result("noise-coordinates", f"max over {count} coordinates of sum_t z_t^2 "
                f"(at {kmax})", float(sums[kmax].max()), Interval(-math.inf, high), alpha / 2,
                f"chi2({steps}) per coordinate; large where a coordinate gets too much noise"),
    ]


def noise_mean(z: NoiseMatrix, alpha: float) -> list[CheckResult]:
    """Largest |mean| per coordinate and per tensor, each standardised to N(0, 1)."""
    steps = next(iter(z.values())).shape[0]
    count = sum(v.shape[1] for v in z.values())
    per_coord = {k: np.abs(np.sum(v, axis=0, dtype=np.float64)) / math.sqrt(steps)
                 for k, v in z.items()}
    kc = max(per_coord, key=lambda k: per_coord[k].max())
    per_tensor = {k: abs(float(np.sum(v, dtype=np.float64))) / math.sqrt(v.size)
                  for k, v in z.items()}
    kt = max(per_tensor, key=lambda k: per_tensor[k])
    zc = normal_bound(alpha / 2, count)
    zt = normal_bound(alpha / 2, len(z))
    return [
        _result("noise-mean", f"max over {count} coordinates of |sum_t z_t| / sqrt(T) "
                f"(at {kc})", float(per_coord[kc].max()), Interval(-math.inf, zc), alpha / 2,
                "N(0, 1) per coordinate; a bias of b noise stds gives about b sqrt(T)"),
        _result("noise-mean", f"max over {len(z)} tensors of |sum z| / sqrt(n T) (at {kt})",
                per_tensor[kt], Interval(-math.inf, zt), alpha / 2,
                "N(0, 1) per tensor; a bias of b noise stds gives b sqrt(n T)"),
    ]


def noise_fresh(z: NoiseMatrix, alpha: float) -> list[CheckResult]:
    """Every pair of steps (pooled over coordinates) and lag 1 per tensor (disjoint pairs)."""
    keys = list(z)
    steps = z[keys[0]].shape[0]
    count = sum(z[k].shape[1] for k in keys)
    gram = np.zeros((steps, steps))
    for k in keys:
        v = z[k].astype(np.float64)
        gram += v @ v.T
    pairs = [(a, b) for a in range(steps) for b in range(a + 1, steps)]
    out = []
    if pairs:
        bound = product_sum_bound(count, alpha / 2 / len(pairs))
        a, b = max(pairs, key=lambda p: abs(gram[p]))
        out.append(_result(
            "noise-fresh", f"max over {len(pairs)} step pairs of |sum_j z_t z_t'| / P "
            f"(steps {a + 1}, {b + 1})", abs(gram[a, b]) / count,
            Interval(-math.inf, bound / count), alpha / 2,
            "the correlation of two steps' noise over all P coordinates; 1 for the same "
            "noise in both"))
    lag = {}
    for k in keys:
        v = z[k].astype(np.float64)
        first, second = v[0:steps - 1:2], v[1:steps:2]
        m = min(len(first), len(second))
        lag[k] = (float(np.sum(first[:m] * second[:m])), first[:m].size)
    if any(n for _, n in lag.values()):
        share = alpha / 2 / len(keys)
        bounds = {k: product_sum_bound(n, share) for k, (_, n) in lag.items()}
        key, ratio = _worst({k: s for k, (s, _) in lag.items()}, bounds)
        out.append(_result(
            "noise-fresh", f"per tensor: lag-1 products of disjoint step pairs / bound "
            f"(at {key})", ratio, Interval(-math.inf, 1.0), alpha / 2,
            "sum of z_t z_(t+1) over the pairs (1,2), (3,4)...; identical noise in "
            "consecutive steps makes it about n T / 2"))
    return out


def noise_independence(z: NoiseMatrix, alpha: float) -> list[CheckResult]:
    """Adjacent coordinates within each tensor; the first coordinates of every two tensors."""
    keys = list(z)
    out = []
    within = {}
    for k in keys:
        v = z[k].astype(np.float64)
        m = v.shape[1] // 2
        within[k] = (float(np.sum(v[:, 0:2 * m:2] * v[:, 1:2 * m:2])), v.shape[0] * m)
    tested = [k for k in keys if within[k][1]]
    if tested:
        share = alpha / 2 / len(tested)
        bounds = {k: product_sum_bound(within[k][1], share) for k in tested}
        key, ratio = _worst({k: within[k][0] for k in tested}, bounds)
        out.append(_result(
            "noise-independence", f"per tensor: products of disjoint adjacent coordinates / "
            f"bound (at {key})", ratio, Interval(-math.inf, 1.0), alpha / 2,
            "noise drawn for fewer coordinates and repeated makes neighbours equal"))
    pairs = [(a, b) for i, a in enumerate(keys) for b in keys[i + 1:]]
    if pairs:
        share = alpha / 2 / len(pairs)
        sums, bounds = {}, {}
        for a, b in pairs:
            m = min(z[a].shape[1], z[b].shape[1])
            sums[(a, b)] = float(np.sum(z[a][:, :m].astype(np.float64)
                                        * z[b][:, :m].astype(np.float64)))
            bounds[(a, b)] = product_sum_bound(z[a].shape[0] * m, share)
        key2, ratio = _worst(sums, bounds)
        out.append(_result(
            "noise-independence", f"max over {len(pairs)} tensor pairs of their first "
            f"coordinates' products / bound (at {key2[0]}, {key2[1]})", ratio,
            Interval(-math.inf, 1.0), alpha / 2,
            "one noise stream restarted for each tensor makes their first coordinates equal"))
    return out


def noise_keys(z: NoiseMatrix, other: NoiseMatrix, alpha: float) -> list[CheckResult]:
    """Products of the noise of two runs with different keys, pooled and per tensor (step t
    of one run against step t of the other)."""
    keys = list(other)
    steps = next(iter(other.values())).shape[0]
    per = {k: float(np.sum(z[k][:steps].astype(np.float64) * other[k].astype(np.float64)))
           for k in keys}
    terms = {k: other[k].size for k in keys}
    pooled = sum(per.values())
    total = sum(terms.values())
    bound = product_sum_bound(total, alpha / 2)
    share = alpha / 2 / len(keys)
    bounds = {k: product_sum_bound(terms[k], share) for k in keys}
    key, ratio = _worst(per, bounds)
    return [
        _result("noise-keys", f"sum over {steps} steps and {total // steps} coordinates of "
                "z (key 1) z (key 2), / P T", abs(pooled) / total,
                Interval(-math.inf, bound / total), alpha / 2,
                "the correlation of two runs' noise; 1 when the key is ignored"),
        _result("noise-keys", f"per tensor: products of the two runs' noise / bound (at {key})",
                ratio, Interval(-math.inf, 1.0), alpha / 2,
                "a tensor whose noise does not depend on the key"),
    ]


__all__ = ["NoiseMatrix", "noise_coordinates", "noise_fresh", "noise_independence",
           "noise_keys", "noise_mean", "noise_scale", "product_sum_bound"]
