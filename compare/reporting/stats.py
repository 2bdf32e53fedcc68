"""Seed statistics: means with Student-t 95% intervals, and backends compared paired by seed.

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

#: Level of every interval in the reports.
CONFIDENCE = 0.95
#: Backends "agree" on accuracy when the 95% interval of the paired difference lies inside
#: +/- this many accuracy units (0.01 = 1 percentage point).
AGREEMENT_TOLERANCE = 0.01


@dataclass(frozen=True)
class Interval:
    """A mean over ``n`` values with its two-sided t interval (NaN bounds when n < 2)."""

    mean: float
    low: float
    high: float
    n: int

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2


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


def format_interval(interval: Interval, digits: int = 3, scale: float = 1.0) -> str:
    """``"0.912 ± 0.004"`` (mean ± half width), or ``"0.912 (1 seed)"`` when n == 1."""
    if interval.n == 0:
        return "–"
    mean = interval.mean * scale
    if interval.n < 2:
        return f"{mean:.{digits}f} (1 seed)"
    return f"{mean:.{digits}f} ± {interval.half_width * scale:.{digits}f}"


def verdict(interval: Interval, tolerance: float = AGREEMENT_TOLERANCE) -> str:
    """``agree`` (interval inside +/- tolerance), ``differ`` (interval excludes 0),
    ``inconclusive`` (neither), or ``one seed: no interval`` when n < 2."""
    if interval.n < 2:
        return "one seed: no interval"
    if -tolerance <= interval.low and interval.high <= tolerance:
        return "agree"
    if interval.low > 0 or interval.high < 0:
        return "differ"
    return "inconclusive"


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
    fewer than 2 pairs or identical differences), verdict (:func:`verdict`), collapsed (the
    backends whose run of some paired seed is collapsed, e.g. ``"tf, torch"``, or ""),
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
        noised = bool(group["mechanism"].astype(str).str.startswith("dpsgd").any()) \
            if "mechanism" in group else False
        rows.append({"setting": pair.setting, "pairs": len(a),
                     "mean_difference": interval.mean, "ci_low": interval.low,
                     "ci_high": interval.high, "p_value": p_value,
                     "verdict": verdict(interval, tolerance), "collapsed": ", ".join(collapsed),
                     "noised": noised})
    return pd.DataFrame(rows, columns=["setting", "pairs", "mean_difference", "ci_low",
                                       "ci_high", "p_value", "verdict", "collapsed", "noised"])


__all__ = ["AGREEMENT_TOLERANCE", "CONFIDENCE", "Interval", "SeedPair", "format_interval",
           "mean_interval", "paired_backend_table", "seed_pairs", "verdict"]
