"""Seed statistics: intervals that respect a metric's range, and backends paired by seed.

Three intervals, each named wherever it is shown (:data:`INTERVAL_NAMES`):

* **bootstrap** (:func:`bootstrap_interval`): the 95% percentile bootstrap interval of a
  mean over seeds (scipy.stats.bootstrap, seeded, so reports are deterministic). Every
  resampled mean lies between the smallest and the largest value, so the interval never
  leaves the metric's range: the interval of bounded means (accuracy, AUC, Average Drop...).
  With few seeds it is narrow (3 seeds give 10 distinct resampled means), which is why a
  verdict from fewer than :data:`MIN_SEEDS` seeds is printed "preliminary".
* **Wilson** (:func:`wilson_interval`): one run's test accuracy as a binomial proportion over
  its test set (scipy.stats.binomtest), where one run is the unit (a setting with one seed).
* **t** (:func:`mean_interval`): the Student-t interval of a mean, for unbounded quantities
  only: the per-seed differences between backends (the paired comparison).

Both backends of one cell share the seed, hence the sampler's batches and the initial
weights, so the two accuracies of a seed form a pair; the comparison is on the per-seed
differences (torch minus tf). The t quantiles and the paired test come from scipy.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pandas as pd
from scipy import stats

from dpcore.mechanisms import noises_gradients

#: Level of every interval in the reports.
CONFIDENCE = 0.95
#: A verdict (agree / differ) from fewer seeds than this is printed "preliminary": under
#: DP-SGD each backend draws its own noise, and the library benchmarks average 5 runs.
MIN_SEEDS = 5
#: Resamples of :func:`bootstrap_interval` and the seed of its generator (fixed: a report
#: rebuilt from the same runs shows the same intervals).
BOOTSTRAP_RESAMPLES = 9999
BOOTSTRAP_SEED = 0
#: How each interval method is named in tables and figure labels.
INTERVAL_NAMES = {"t": "95% t interval", "bootstrap": "95% percentile bootstrap interval",
                  "wilson": "95% Wilson interval"}
#: Backends "agree" on accuracy when the 95% interval of the paired difference lies inside
#: +/- this many accuracy units (0.01 = 1 percentage point).
AGREEMENT_TOLERANCE = 0.01


@dataclass(frozen=True)
class Interval:
    """A mean over ``n`` values with its two-sided interval (NaN bounds when there is none).

    ``method`` names the interval: ``t``, ``bootstrap`` or ``wilson`` (:data:`INTERVAL_NAMES`).
    """

    mean: float
    low: float
    high: float
    n: int
    method: str = "t"

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    def error_bar(self) -> tuple[float, float]:
        """(below, above): the distances from the mean to the bounds, for an asymmetric
        error bar (0, 0 without an interval), so a bar ends exactly at the bounds."""
        if math.isnan(self.low) or math.isnan(self.high):
            return 0.0, 0.0
        return max(0.0, self.mean - self.low), max(0.0, self.high - self.mean)


def mean_interval(values: Sequence[float] | np.ndarray, level: float = CONFIDENCE) -> Interval:
    """Mean and t interval of the finite ``values``: mean +/- t_{n-1} * sd / sqrt(n)."""
    arr = np.asarray([v for v in values if v is not None and np.isfinite(v)], dtype=float)
    n = int(arr.size)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    mean = float(arr.mean())
    if n < 2:
        return Interval(mean, math.nan, math.nan, n)
    half = float(stats.t.ppf(0.5 + level / 2, n - 1) * arr.std(ddof=1) / math.sqrt(n))
    return Interval(mean, mean - half, mean + half, n)


def bootstrap_interval(values: Sequence[float] | np.ndarray, level: float = CONFIDENCE,
                       seed: int = BOOTSTRAP_SEED) -> Interval:
    """Mean of the finite ``values`` and its percentile bootstrap interval (method
    ``bootstrap``; NaN bounds when n < 2). All values equal: the interval is that value.

    Guarantee: ``min(values) <= low <= mean <= high <= max(values)``, so a metric's range is
    never left. Deterministic: ``seed`` fixes scipy's resampling.
    """
    arr = np.asarray([v for v in values if v is not None and np.isfinite(v)], dtype=float)
    n = int(arr.size)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0, "bootstrap")
    mean = float(arr.mean())
    if n < 2:
        return Interval(mean, math.nan, math.nan, n, "bootstrap")
    if np.ptp(arr) == 0:
        return Interval(mean, mean, mean, n, "bootstrap")
    result = stats.bootstrap((arr,), np.mean, confidence_level=level, vectorized=True,
                             n_resamples=BOOTSTRAP_RESAMPLES, method="percentile",
                             random_state=np.random.default_rng(seed))
    low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    # percentiles of means of the values: inside [min, max] up to float rounding
    return Interval(mean, max(low, float(arr.min())), min(high, float(arr.max())), n,
                    "bootstrap")


def wilson_interval(accuracy: float, n_test: int, level: float = CONFIDENCE) -> Interval:
    """One run's test accuracy (a fraction of ``n_test`` examples) with its Wilson score
    interval (method ``wilson``; n counts the one run). Inside [0, 1] by construction.

    Raises:
        ValueError: ``n_test < 1`` or an accuracy outside [0, 1].
    """
    if n_test < 1 or not 0.0 <= accuracy <= 1.0:
        raise ValueError(f"accuracy={accuracy!r} on n_test={n_test!r}: need an accuracy in "
                         "[0, 1] over at least 1 test example")
    ci = stats.binomtest(round(accuracy * n_test), n_test).proportion_ci(level, "wilson")
    return Interval(float(accuracy), float(ci.low), float(ci.high), 1, "wilson")


def format_interval(interval: Interval, digits: int = 3, scale: float = 1.0) -> str:
    """``"0.912 ± 0.004"`` (t: mean ± half width), ``"0.912 [0.905, 0.918]"`` (bootstrap
    and Wilson, asymmetric: mean [low, high]), or ``"0.912 (1 seed)"`` without an interval."""
    if interval.n == 0:
        return "–"
    mean = interval.mean * scale
    if math.isnan(interval.low) or math.isnan(interval.high):
        return f"{mean:.{digits}f} (1 seed)"
    if interval.method == "t":
        return f"{mean:.{digits}f} ± {interval.half_width * scale:.{digits}f}"
    return (f"{mean:.{digits}f} [{interval.low * scale:.{digits}f}, "
            f"{interval.high * scale:.{digits}f}]")


def verdict(interval: Interval, tolerance: float = AGREEMENT_TOLERANCE, *,
            collapsed: bool = False) -> str:
    """``agree`` (interval inside +/- tolerance), ``differ`` (interval excludes 0),
    ``inconclusive`` (neither), or ``one seed: no interval`` when n < 2.

    Never ``agree`` when ``collapsed`` (a run of the pair is collapsed or at chance: two such
    models agree about nothing): ``inconclusive (collapsed run)`` instead. An ``agree`` or
    ``differ`` from fewer than :data:`MIN_SEEDS` seeds gets ``" (preliminary: n seeds)"``.
    """
    if interval.n < 2:
        return "one seed: no interval"
    if -tolerance <= interval.low and interval.high <= tolerance:
        word = "agree"
    elif interval.low > 0 or interval.high < 0:
        word = "differ"
    else:
        return "inconclusive"
    if collapsed and word == "agree":
        return "inconclusive (collapsed run)"
    if interval.n < MIN_SEEDS:
        return f"{word} (preliminary: {interval.n} seeds)"
    return word


def verdict_word(text: str) -> str:
    """The verdict without its qualifier: ``agree``, ``differ``, ``inconclusive`` or ``one
    seed: no interval`` (``"differ (preliminary: 3 seeds)"`` -> ``"differ"``)."""
    return text.split(" (", 1)[0]


class SeedPair(NamedTuple):
    """One setting's runs paired by seed across two backends (seeds run on both only)."""

    setting: str
    runs: pd.DataFrame  #: every finished run of the setting with the metric, both backends
    first_runs: pd.DataFrame  #: the first backend's runs of the paired seeds, indexed by seed
    second_runs: pd.DataFrame  #: the second backend's, in the same seed order
    differences: np.ndarray  #: second minus first of the metric, per paired seed


def seed_pairs(frame: pd.DataFrame, metric: str = "accuracy", first: str = "tf",
               second: str = "torch") -> Iterator[SeedPair]:
    """The finished runs of ``frame`` with ``metric``, per setting (in first-seen order),
    paired by seed; settings without a seed on both backends are skipped. The one pairing
    that the paired table and the paired-differences figure share."""
    done = frame[(frame["status"] == "finished") & frame[metric].notna()]
    for setting, group in done.groupby("setting", sort=False):
        a = group[group["backend"] == first].set_index("seed")
        b = group[group["backend"] == second].set_index("seed")
        seeds = sorted(set(a.index) & set(b.index))
        if seeds:
            yield SeedPair(str(setting), group, a.loc[seeds], b.loc[seeds],
                           b.loc[seeds, metric].to_numpy(float)
                           - a.loc[seeds, metric].to_numpy(float))


def paired_backend_table(
    frame: pd.DataFrame, metric: str = "accuracy", first: str = "tf", second: str = "torch",
    tolerance: float = AGREEMENT_TOLERANCE,
) -> pd.DataFrame:
    """Per setting: ``second - first`` on ``metric``, paired by seed.

    Columns: setting, pairs (seeds finished on both backends), mean_difference, ci_low,
    ci_high (95% t interval of the mean difference), p_value (scipy's paired t test; NaN with
    fewer than 2 pairs or identical differences), verdict (:func:`verdict`: never ``agree``
    with a collapsed run; "preliminary" under :data:`MIN_SEEDS` pairs), preliminary (True
    when fewer than :data:`MIN_SEEDS` pairs), collapsed (the backends whose run of some
    paired seed is collapsed, e.g. ``"tf, torch"``, or ""),
    noised (True for a DP-SGD setting: each backend adds noise from its own generator, so a
    pair shares batches and initial weights but not the noise draw).
    ``frame`` is :func:`compare.reporting.frames.results_frame` output.
    """
    rows = []
    for pair in seed_pairs(frame, metric, first, second):
        a, b, group = pair.first_runs, pair.second_runs, pair.runs
        interval = mean_interval(pair.differences)
        p_value = math.nan
        if len(a) > 1 and np.ptp(pair.differences) > 0:
            p_value = float(stats.ttest_rel(b[metric].to_numpy(float),
                                            a[metric].to_numpy(float)).pvalue)
        collapsed = [name for name, side in ((first, a), (second, b))
                     if "collapsed" in side and side["collapsed"].any()]
        noised = bool(group["mechanism"].map(noises_gradients).any()) \
            if "mechanism" in group else False
        rows.append({"setting": pair.setting, "pairs": len(a),
                     "mean_difference": interval.mean, "ci_low": interval.low,
                     "ci_high": interval.high, "p_value": p_value,
                     "verdict": verdict(interval, tolerance, collapsed=bool(collapsed)),
                     "preliminary": len(a) < MIN_SEEDS, "collapsed": ", ".join(collapsed),
                     "noised": noised})
    return pd.DataFrame(rows, columns=["setting", "pairs", "mean_difference", "ci_low",
                                       "ci_high", "p_value", "verdict", "preliminary",
                                       "collapsed", "noised"])


__all__ = ["AGREEMENT_TOLERANCE", "BOOTSTRAP_RESAMPLES", "BOOTSTRAP_SEED", "CONFIDENCE",
           "INTERVAL_NAMES", "MIN_SEEDS", "Interval", "SeedPair", "bootstrap_interval",
           "format_interval", "mean_interval", "paired_backend_table", "seed_pairs", "verdict",
           "verdict_word", "wilson_interval"]
