"""Seed statistics: intervals that respect a metric's range, and backends paired by seed.

Three intervals, each named wherever it is shown (:data:`INTERVAL_NAMES`):

* **bootstrap** (:func:`bootstrap_interval`): the 95% percentile bootstrap interval of a
  mean over seeds (scipy.stats.bootstrap, seeded, so reports are deterministic). Every
  resampled mean lies between the smallest and the largest value, so the interval never
  leaves the metric's range: the interval of bounded means (accuracy, AUC, Average Drop...).
  With few seeds it is narrow (3 seeds give 10 distinct resampled means).
* **Wilson** (:func:`wilson_interval`): one run's test accuracy as a binomial proportion over
  its test set (scipy.stats.binomtest), where one run is the unit (a setting with one seed).
* **t** (:func:`mean_interval`): the Student-t interval of a mean, for unbounded quantities
  only: the per-seed differences between backends (the paired comparison), and only from
  :data:`MIN_SEEDS` seeds on (below, the seeds' differences are shown instead).

Both backends of one cell share the seed, hence the sampler's batches and the initial
weights, so the two accuracies of a seed form a pair; the comparison is on the per-seed
differences (torch minus tf). The t quantiles and the paired test come from scipy.

**Corrected for the report's comparisons.** A report compares the backends in every setting
at once, so its verdicts rest on Holm-adjusted p-values (:func:`holm_adjusted`, statsmodels'
``multipletests(method="holm")``): "differ" when the Holm-adjusted paired t test is below
:data:`ALPHA` (family: the settings with at least :data:`MIN_SEEDS` pairs whose differences
are not all equal), "agree" when the Holm-adjusted equivalence test (two one-sided t tests
against +/- :data:`AGREEMENT_TOLERANCE`, :func:`equivalence_p_value`) is below
:data:`ALPHA` / 2 (family: the settings with at least :data:`MIN_SEEDS` pairs). For a single
setting the two rules are the unadjusted 95% t interval's: excluding 0, and lying inside the
band.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
from scipy import stats

from compare.reporting.frames import FAITHFULNESS_KEYS, SANITY_KEYS
from dpcore.mechanisms import noises_gradients

#: Level of every interval in the reports.
CONFIDENCE = 0.95
#: Fewest seeds for a t interval and a verdict (agree / differ) on paired differences: with
#: fewer the t quantile (12.7 for 2 seeds, 4.30 for 3) makes the interval say little, under
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
#: Family-wise error rate of a report's verdicts (Holm): "differ" needs a Holm-adjusted
#: two-sided p below it, "agree" a Holm-adjusted equivalence p below half of it (each one-sided
#: test at ALPHA / 2: for one setting, the 95% t interval inside the band).
ALPHA = 0.05


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
    never left. Deterministic: ``seed`` fixes scipy's resampling, and the values are sorted
    first, so the same values in any order give the same interval (the resampling draws
    positions: unsorted, one setting's interval would differ between two tables that list its
    seeds in different orders).
    """
    arr = np.sort(np.asarray([v for v in values if v is not None and np.isfinite(v)],
                             dtype=float))
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
    ``inconclusive`` (neither); ``one seed: no interval`` when n < 2 and ``n seeds: no
    interval`` below :data:`MIN_SEEDS` (no verdict: a t interval from so few seeds rests on a
    spread estimated from n - 1 degrees of freedom, :func:`few_seeds_reason`).

    Never ``agree`` when ``collapsed`` (a run of the pair is collapsed or at chance: two such
    models agree about nothing): ``inconclusive (collapsed run)`` instead.
    """
    if interval.n < 2:
        return "one seed: no interval"
    if interval.n < MIN_SEEDS:
        return f"{interval.n} seeds: no interval"
    if -tolerance <= interval.low and interval.high <= tolerance:
        word = "agree"
    elif interval.low > 0 or interval.high < 0:
        word = "differ"
    else:
        return "inconclusive"
    if collapsed and word == "agree":
        return "inconclusive (collapsed run)"
    return word


def few_seeds_reason(n: int, level: float = CONFIDENCE) -> str:
    """Why no t interval is given from ``n`` (2 to :data:`MIN_SEEDS` - 1) seeds: the t
    quantile with n - 1 degrees of freedom beside the normal one, e.g. "with 2 seeds the 95%
    t quantile is 12.7, against 1.96 with many, so the interval mostly shows how little 2
    values say about their spread"."""
    t = float(stats.t.ppf(0.5 + level / 2, n - 1))
    normal = float(stats.norm.ppf(0.5 + level / 2))
    return (f"with {n} seeds the {100 * level:g}% t quantile is {t:.3g}, against "
            f"{normal:.2f} with many, so the interval mostly shows how little {n} values say "
            "about their spread")


def verdict_word(text: str) -> str:
    """The verdict without its qualifier: ``agree``, ``differ``, ``inconclusive``, ``one
    seed: no interval`` or ``n seeds: no interval`` (``"inconclusive (collapsed run)"`` ->
    ``"inconclusive"``)."""
    return text.split(" (", 1)[0]


def holm_adjusted(p_values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm-adjusted p-values (statsmodels ``multipletests(method="holm")``) over the finite
    entries of ``p_values``; a NaN entry (no test) stays NaN and is not counted as a
    comparison. Guarantee: rejecting where the adjusted p is below alpha keeps the chance of
    any false rejection among the tests at most alpha."""
    from statsmodels.stats.multitest import multipletests

    values = np.asarray(p_values, dtype=float)
    out = np.full(values.shape, math.nan)
    finite = np.isfinite(values)
    if finite.any():
        out[finite] = multipletests(values[finite], method="holm")[1]
    return out


def difference_p_value(differences: Sequence[float] | np.ndarray) -> float:
    """Two-sided p-value of the paired t test that the mean of ``differences`` is 0 (scipy's
    one-sample t test on the per-seed differences, the same as ``ttest_rel`` on the pairs);
    NaN with fewer than 2 values or when every difference is the same (no spread, no test)."""
    arr = np.asarray(differences, dtype=float)
    if arr.size < 2 or np.ptp(arr) == 0:
        return math.nan
    return float(stats.ttest_1samp(arr, 0.0).pvalue)


def equivalence_p_value(differences: Sequence[float] | np.ndarray,
                        tolerance: float = AGREEMENT_TOLERANCE) -> float:
    """p-value of the equivalence test that the mean of ``differences`` lies inside
    ``(-tolerance, +tolerance)`` (two one-sided t tests, TOST: the larger of the p-values of
    "mean <= -tolerance" and "mean >= +tolerance"). Below 0.025 for exactly the differences
    whose 95% t interval lies inside the band. With no spread (every difference equal): 0
    inside the band, 1 outside; NaN with fewer than 2 values.
    (Hand-written: scipy has no TOST; statsmodels' ``ttost_paired`` needs the pairs, and is
    the same computation.)"""
    arr = np.asarray(differences, dtype=float)
    n = int(arr.size)
    if n < 2:
        return math.nan
    mean, sd = float(arr.mean()), float(arr.std(ddof=1))
    if sd == 0.0:
        return 0.0 if abs(mean) < tolerance else 1.0
    se = sd / math.sqrt(n)
    p_above_low = float(stats.t.sf((mean + tolerance) / se, n - 1))  # H0: mean <= -tolerance
    p_below_high = float(stats.t.cdf((mean - tolerance) / se, n - 1))  # H0: mean >= tolerance
    return max(p_above_low, p_below_high)


def corrected_verdict(pairs: int, p_holm: float, equivalence_p_holm: float, *,
                      collapsed: bool = False) -> str:
    """The verdict of one setting from its Holm-adjusted p-values (:func:`holm_adjusted`):
    ``agree`` (equivalence p below :data:`ALPHA` / 2), else ``differ`` (p below
    :data:`ALPHA`), else ``inconclusive``; no verdict below :data:`MIN_SEEDS` pairs (as
    :func:`verdict`), and never ``agree`` with a collapsed run."""
    if pairs < 2:
        return "one seed: no interval"
    if pairs < MIN_SEEDS:
        return f"{pairs} seeds: no interval"
    if not math.isnan(equivalence_p_holm) and equivalence_p_holm < ALPHA / 2:
        return "inconclusive (collapsed run)" if collapsed else "agree"
    if not math.isnan(p_holm) and p_holm < ALPHA:
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
    ci_high (95% t interval of the mean difference, unadjusted; NaN below :data:`MIN_SEEDS`
    pairs), p_value (scipy's paired t test; NaN below :data:`MIN_SEEDS` pairs or with
    identical differences), p_holm (Holm-adjusted over the table's settings with a p_value),
    equivalence_p (:func:`equivalence_p_value` against +/- ``tolerance``; NaN below
    :data:`MIN_SEEDS` pairs), equivalence_p_holm (Holm-adjusted over the table's settings
    with one), verdict (:func:`corrected_verdict` of the adjusted p-values: none below
    :data:`MIN_SEEDS` pairs, never ``agree`` with a collapsed run), min_difference /
    max_difference (over the paired seeds),
    seed_differences (every seed's difference in points, ``"+0.30, -1.20"``), collapsed (the
    backends whose run of some paired seed is collapsed, e.g. ``"tf, torch"``, or ""),
    noised (True for a DP-SGD setting: each backend adds noise from its own generator, so a
    pair shares batches and initial weights but not the noise draw).
    ``frame`` is :func:`compare.reporting.frames.results_frame` output.
    """
    rows = []
    for pair in seed_pairs(frame, metric, first, second):
        a, b, group = pair.first_runs, pair.second_runs, pair.runs
        interval = mean_interval(pair.differences)
        p_value = equivalence = math.nan
        if len(a) >= MIN_SEEDS:
            p_value = difference_p_value(pair.differences)
            equivalence = equivalence_p_value(pair.differences, tolerance)
        if len(a) < MIN_SEEDS:  # too few seeds for a t interval (few_seeds_reason)
            interval = Interval(interval.mean, math.nan, math.nan, interval.n)
        collapsed = [name for name, side in ((first, a), (second, b))
                     if "collapsed" in side and side["collapsed"].any()]
        noised = bool(group["mechanism"].map(noises_gradients).any()) \
            if "mechanism" in group else False
        rows.append({"setting": pair.setting, "pairs": len(a),
                     "mean_difference": interval.mean, "ci_low": interval.low,
                     "ci_high": interval.high, "p_value": p_value, "p_holm": math.nan,
                     "equivalence_p": equivalence, "equivalence_p_holm": math.nan,
                     "verdict": "", "has_collapsed": bool(collapsed),
                     "min_difference": float(pair.differences.min()),
                     "max_difference": float(pair.differences.max()),
                     "seed_differences": ", ".join(f"{100 * d:+.2f}"
                                                   for d in pair.differences),
                     "collapsed": ", ".join(collapsed), "noised": noised})
    table = pd.DataFrame(rows, columns=[*PAIRED_COLUMNS, "has_collapsed"])
    if table.empty:
        return table[PAIRED_COLUMNS]
    table["p_holm"] = holm_adjusted(table["p_value"].to_numpy(float))
    table["equivalence_p_holm"] = holm_adjusted(table["equivalence_p"].to_numpy(float))
    table["verdict"] = [corrected_verdict(int(r.pairs), float(r.p_holm),
                                          float(r.equivalence_p_holm),
                                          collapsed=bool(r.has_collapsed))
                        for r in table.itertuples()]
    return table[PAIRED_COLUMNS]


#: Columns of :func:`paired_backend_table`.
PAIRED_COLUMNS = ["setting", "pairs", "mean_difference", "ci_low", "ci_high", "p_value",
                  "p_holm", "equivalence_p", "equivalence_p_holm", "verdict",
                  "min_difference", "max_difference", "seed_differences", "collapsed",
                  "noised"]


def holm_family_text(paired: pd.DataFrame) -> str:
    """How many comparisons each Holm adjustment of ``paired`` (:func:`paired_backend_table`)
    counts: ``"Holm over the 3 settings with a test"``, or "" when no setting has one."""
    tested = int(paired["p_value"].notna().sum()) if "p_value" in paired else 0
    equivalence = int(paired["equivalence_p"].notna().sum()) if "equivalence_p" in paired \
        else 0
    if not tested and not equivalence:
        return ""
    if tested == equivalence:
        return f"Holm over the {tested} setting{'s' if tested != 1 else ''} with a test"
    return (f"Holm over the {tested} setting{'s' if tested != 1 else ''} with a difference "
            f"test and the {equivalence} with an equivalence test")


def contrast_interval(parts: Sequence[tuple[float, Mapping[int, float]]]) -> Interval:
    """``sum(coef * mean(group))`` over independent groups, with its 95% Welch-Satterthwaite
    t interval (for two groups ``+a, -b`` this is Welch's interval of ``a - b``).

    A group given twice (the same mapping object) has its coefficients added first, so a
    baseline that two effects subtract counts once with coefficient -2.
    (Hand-written: scipy offers Welch's interval for two groups, not for a contrast of
    several.)

    Returns:
        The interval; NaN bounds when some group has fewer than 2 values; ``n`` is the smallest
        group size.
    """
    return contrast_test(parts)[0]


def contrast_test(parts: Sequence[tuple[float, Mapping[int, float]]]
                  ) -> tuple[Interval, float]:
    """:func:`contrast_interval` and the two-sided p-value of "the contrast is 0" from the same
    Welch-Satterthwaite t distribution (NaN without an interval; 0 or 1 when no group has
    any spread: the contrast is then known exactly)."""
    merged: dict[int, list[Any]] = {}
    for coef, values in parts:
        merged.setdefault(id(values), [0.0, values])[0] += coef
    terms = [(float(c), np.asarray(list(v.values()), float)) for c, v in merged.values()
             if abs(c) > 1e-12]
    if not terms or any(x.size == 0 for _, x in terms):
        return Interval(math.nan, math.nan, math.nan, 0), math.nan
    mean = float(sum(c * x.mean() for c, x in terms))
    n = int(min(x.size for _, x in terms))
    if n < 2:
        return Interval(mean, math.nan, math.nan, n), math.nan
    shares = [c * c * x.var(ddof=1) / x.size for c, x in terms]
    se2 = float(sum(shares))
    if se2 == 0.0:
        return Interval(mean, mean, mean, n), (1.0 if mean == 0.0 else 0.0)
    dof = se2 ** 2 / sum(s * s / (x.size - 1) for s, (_, x) in zip(shares, terms, strict=True))
    se = math.sqrt(se2)
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, dof) * se)
    p_value = float(2 * stats.t.sf(abs(mean) / se, dof))
    return Interval(mean, mean - half, mean + half, n), p_value


def seeds_phrase(counts: pd.Series) -> str:
    """How a table's figures were aggregated, naming the interval: "mean [95% percentile
    bootstrap interval] over 3 seeds", "one seed: accuracy with its 95% Wilson interval over
    the test set", or the same for the seeds in column `seeds` when the counts differ."""
    values = sorted(set(int(c) for c in counts.dropna()))
    boot, wilson = INTERVAL_NAMES["bootstrap"], INTERVAL_NAMES["wilson"]
    one = (f"one seed: test accuracy with its {wilson} over the test set, other metrics "
           "no interval")
    if values == [1]:
        return one
    if len(values) == 1:
        return f"mean [{boot}] over {values[0]} seeds"
    return f"mean [{boot}] over the seeds in column `seeds`; {one}"


#: What the error bars of the seed-aggregated figures are (:mod:`compare.reporting.plots`).
ERROR_BARS = f"mean, {INTERVAL_NAMES['bootstrap']} over seeds"


def error_bars_phrase(frame: pd.DataFrame) -> str:
    """What the error bars of a by-setting figure of ``frame``'s finished runs are (pass the
    rows the figure draws): :data:`ERROR_BARS`, "one seed: no interval" when no setting (per
    panel and backend, as :func:`summary_table` groups) has two seeds (the bootstrap needs
    two), or both when some settings have one seed."""
    finished = frame[frame["status"] == "finished"]
    seeds = finished.groupby(["setting", "backend"])["seed"].nunique()
    if seeds.empty or int(seeds.max()) < 2:
        return "one seed: no interval"
    if int(seeds.min()) < 2:
        return f"{ERROR_BARS}; none for a setting of one seed"
    return ERROR_BARS


#: How a summary column's cells read: the mean and its interval (see :func:`seeds_phrase`).
INTERVAL_COLUMN = "(mean [95% interval])"

#: Metrics whose interval over seeds is the percentile bootstrap (all of the summary's:
#: bounded means stay in their range, and the constant epsilon of a setting gets a point).
SUMMARY_METRICS = ("accuracy", "auc", "accuracy_gap", "recall_gap", "auc_gap", "epsilon",
                   "noise_multiplier")


def summary_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (setting, backend) of the finished runs: seeds, collapsed runs, and for each metric
    its mean, interval bounds (``_low``/``_high``) and a formatted ``_text``
    ("0.912 [0.905, 0.918]"). The interval is the 95% percentile bootstrap over seeds
    (:func:`~compare.reporting.stats.bootstrap_interval`: never outside the metric's range);
    a setting with one seed gets the 95% Wilson interval of its test accuracy over its test
    set (:func:`~compare.reporting.stats.wilson_interval`) and no interval for the rest."""
    if frame.empty:
        return frame
    finished = frame[frame["status"] == "finished"]
    metrics = [*SUMMARY_METRICS, *FAITHFULNESS_KEYS, *SANITY_KEYS]
    metrics = [m for m in metrics if m in finished and finished[m].notna().any()]
    rows = []
    for (setting, backend), group in finished.groupby(["setting", "backend"], sort=False):
        row: dict[str, Any] = {"setting": setting, "backend": backend, "seeds": len(group),
                               "panel": group["panel"].iloc[0],
                               "mechanism": group["mechanism"].iloc[0],
                               "collapsed": int(group["collapsed"].sum())}
        if "randomisation_check" in group:
            row.update(randomisation_summary(group["randomisation_check"]))
        if "temperature_fit" in group:  # the split(s) T was fitted on, over the seeds
            row["temperature_fit"] = ", ".join(sorted(set(group["temperature_fit"]) - {""})) \
                or "–"
        for metric in metrics:
            interval = bootstrap_interval(group[metric].to_numpy(float))
            if metric == "epsilon" and np.isinf(group[metric]).all():
                interval = Interval(math.inf, math.nan, math.nan, len(group))  # non-private
            n_test = group["n_test"].iloc[0] if "n_test" in group else math.nan
            if (metric == "accuracy" and interval.n == 1 and not pd.isna(n_test)
                    and int(n_test) > 0):
                interval = wilson_interval(interval.mean, int(n_test))
            row[f"{metric}_mean"] = interval.mean
            row[f"{metric}_low"] = interval.low
            row[f"{metric}_high"] = interval.high
            digits = 2 if metric in PERCENT_METRICS else 3
            row[f"{metric}_text"] = format_interval(interval, digits) if interval.n else "–"
        rows.append(row)
    return pd.DataFrame(rows)


#: Metrics in percent (two decimals in the tables).
PERCENT_METRICS = ("average_drop", "increase_in_confidence", "calibrated_average_drop",
                   "calibrated_increase_in_confidence")


def randomisation_summary(verdicts: pd.Series) -> dict[str, Any]:
    """A setting's model-randomisation checks over its seeds (``"passes"`` / ``"fails"`` /
    ``""`` per run): ``randomisation_fails`` (runs that fail) and ``randomisation`` (text:
    ``"passes (3 of 3)"``, ``"fails (1 of 3)"``, or ``"–"`` when no run has the check)."""
    checked = verdicts[verdicts.isin(["passes", "fails"])]
    fails = int((checked == "fails").sum())
    if checked.empty:
        return {"randomisation_fails": 0, "randomisation": "–"}
    text = (f"fails ({fails} of {len(checked)})" if fails
            else f"passes ({len(checked)} of {len(checked)})")
    return {"randomisation_fails": fails, "randomisation": text}


__all__ = ["AGREEMENT_TOLERANCE", "ALPHA", "BOOTSTRAP_RESAMPLES", "BOOTSTRAP_SEED",
           "CONFIDENCE", "ERROR_BARS", "INTERVAL_COLUMN", "INTERVAL_NAMES", "MIN_SEEDS",
           "PAIRED_COLUMNS", "PERCENT_METRICS", "SUMMARY_METRICS", "Interval", "SeedPair",
           "bootstrap_interval", "contrast_interval", "contrast_test", "corrected_verdict",
           "difference_p_value", "equivalence_p_value", "error_bars_phrase",
           "few_seeds_reason", "format_interval", "holm_adjusted", "holm_family_text",
           "mean_interval", "paired_backend_table", "randomisation_summary", "seed_pairs",
           "seeds_phrase", "summary_table", "verdict", "verdict_word", "wilson_interval"]
