"""Reproduction verdicts: each published cell beside ours, and each published trend.

**Cells** (:func:`cell_verdict`). A printed figure is *reproduced* when it lies inside our 95%
interval over seeds (the percentile bootstrap of the mean) widened on each side by the
metric's tolerance (:data:`TOLERANCES`), *not reproduced* (with ours minus published)
otherwise, and *not comparable* (with the reason) when the paper does not report it, we did
not run it, the preset says why not (a cell's ``not_comparable``), a run collapsed (its
figures describe a model at chance), or it has fewer than :data:`~compare.reporting.stats.
MIN_SEEDS` seeds (a measured figure only: an epsilon is computed, and the same for every
seed up to a per-seed calibration).

The tolerance: 1 percentage point for the percent metrics, the bench's agreement tolerance
for the backends (:data:`~compare.reporting.stats.AGREEMENT_TOLERANCE`): a 5-seed percentile
bootstrap interval is narrow (it ignores the paper's own seed spread, which no paper here
prints), and a difference below 1 point is not read as a difference anywhere in the reports.
For epsilon 2 % of the printed figure: printed epsilons are rounded to 2-3 digits and the
papers' sampling rates to 3 (0.0169 for 1024 / 60000 = 0.01707 moves epsilon by about 1 %).

**Trends** (:func:`trend_verdicts`). A ``trends:`` entry of a ``published:`` entry names
points in order, each a set of the paper's columns (of the trend's ``row``, or of the point's
own ``row``) and a set of our settings (of every backend, or of the trend's ``backend``):
the paper's change is its last point minus its first (the mean of each point's columns); ours
is the same contrast of our settings' means over seeds, per backend, with its Welch-
Satterthwaite t interval and p-value (:func:`compare.reporting.stats.contrast_test`). The
p-values of all of a report's trends and backends are Holm-adjusted together. Verdict: the
trend *holds* when the adjusted p is below :data:`~compare.reporting.stats.ALPHA` and our
change has the paper's sign ("in size" too when the paper's change lies inside our interval
widened by the metric's tolerance, else "in sign only"); it *does not hold* when it has the
other sign (reversed) or our change is not shown (adjusted p at or above alpha); *not
comparable* when a point has fewer
than :data:`~compare.reporting.stats.MIN_SEEDS` seeds, or, for a faithfulness metric, a
collapsed run (its saliency maps explain a model at chance). Each verdict also says whether
the paper's points and our means change monotonically.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from compare.reporting.published import (
    TREND_METRICS,
    find_row,
    paper_table,
    points_of,
    validate_trend,
)
from compare.reporting.stats import ALPHA, MIN_SEEDS, Interval, contrast_test, holm_adjusted

#: Our metric -> (tolerance, whether it is relative to the printed figure).
TOLERANCES: dict[str, tuple[float, bool]] = {
    "accuracy": (1.0, False), "auc": (1.0, False), "average_drop": (1.0, False),
    "increase_in_confidence": (1.0, False), "masked_score": (1.0, False),
    "epsilon": (0.02, True),
}
#: Metrics computed from the setting, not measured: no seed minimum for a verdict.
COMPUTED_METRICS = frozenset({"epsilon"})
#: Metrics whose figures say nothing of a collapsed model (its maps explain chance).
COLLAPSE_VOIDS = frozenset({"average_drop", "increase_in_confidence", "masked_score"})

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
NOT_COMPARABLE = "not comparable"

CELL_RULE = (
    "Verdict per row: *reproduced* when the published figure lies inside our 95% interval "
    "widened by the tolerance on each side (1 percentage point for a percent figure: the "
    "bench's agreement tolerance, since a 5-seed percentile bootstrap interval is narrow and "
    "the papers print no spread of their own; 2 % of the figure for epsilon, whose printed "
    "digits and sampling rate are rounded), *not reproduced* otherwise (by ours minus "
    f"published), *not comparable* with the reason (fewer than {MIN_SEEDS} seeds of a measured "
    "figure, a collapsed run behind a faithfulness figure, not run, not reported, or a "
    "difference of setting the preset names).")


def tolerance_of(metric: str, printed: float) -> float:
    """The tolerance of a cell of ``metric`` whose printed figure is ``printed``, in the
    paper's unit (:data:`TOLERANCES`)."""
    value, relative = TOLERANCES.get(metric, (1.0, False))
    return value * abs(printed) if relative else value


def cell_verdict(metric: str, printed: float | None, ours: Interval, collapsed: int,
                 not_comparable: str | None = None) -> tuple[str, str]:
    """(verdict, detail) of one published cell (the module's rule): ``("reproduced",
    "within 0.38 of the interval")``, ``("not reproduced", "ours -4.79")`` or
    ``("not comparable", "3 seeds, fewer than 5")``."""
    if printed is None:
        return NOT_COMPARABLE, "not reported by the paper"
    if not ours.n:
        return NOT_COMPARABLE, "not run"
    if not_comparable:
        return NOT_COMPARABLE, " ".join(str(not_comparable).split())
    if collapsed and metric in COLLAPSE_VOIDS:
        return NOT_COMPARABLE, f"{collapsed} of {ours.n} runs collapsed"
    if metric not in COMPUTED_METRICS and ours.n < MIN_SEEDS:
        return NOT_COMPARABLE, (f"{ours.n} seed{'s' if ours.n != 1 else ''}, fewer than the "
                                f"{MIN_SEEDS} a verdict needs")
    tolerance = tolerance_of(metric, printed)
    low = ours.mean if math.isnan(ours.low) else ours.low
    high = ours.mean if math.isnan(ours.high) else ours.high
    difference = ours.mean - printed
    note = f" ({collapsed} of {ours.n} runs collapsed)" if collapsed else ""
    if low - tolerance <= printed <= high + tolerance:
        return REPRODUCED, f"ours {difference:+.2f}{note}"
    return NOT_REPRODUCED, f"ours {difference:+.2f}{note}"


def verdict_summary(verdicts: Sequence[tuple[str, str]]) -> str:
    """One line ending a table: ``"Verdict: 2 reproduced, 4 not reproduced (ours -7.53 to
    -2.52), 10 not comparable (10 of them: collapsed runs)."``"""
    counts = {word: [d for v, d in verdicts if v == word]
              for word in (REPRODUCED, NOT_REPRODUCED, NOT_COMPARABLE)}
    parts = []
    if counts[REPRODUCED]:
        parts.append(f"{len(counts[REPRODUCED])} {REPRODUCED}")
    if counts[NOT_REPRODUCED]:
        diffs = [float(d.split()[1]) for d in counts[NOT_REPRODUCED]]
        span = (f"ours {min(diffs):+.2f}" if len(set(diffs)) == 1
                else f"ours {min(diffs):+.2f} to {max(diffs):+.2f}")
        parts.append(f"{len(diffs)} {NOT_REPRODUCED} ({span})")
    if counts[NOT_COMPARABLE]:
        reasons: dict[str, int] = {}
        for detail in counts[NOT_COMPARABLE]:
            key = "collapsed runs" if detail.endswith("runs collapsed") else detail
            reasons[key] = reasons.get(key, 0) + 1
        why = "; ".join(f"{n}: {r}" for r, n in reasons.items())
        parts.append(f"{len(counts[NOT_COMPARABLE])} {NOT_COMPARABLE} ({why})")
    return "Verdict: " + (", ".join(parts) if parts else "no cell") + "."


# -- trends ----------------------------------------------------------------------------------
IN_SIZE = "holds (in size)"
IN_SIGN = "holds (in sign only)"
REVERSED = "does not hold (reversed)"
NOT_SHOWN = "does not hold (no change shown)"


@dataclass(frozen=True)
class TrendVerdict:
    """One published trend against one backend's runs."""

    claim: str
    backend: str
    published_change: float  #: the paper's last point minus its first, in its unit
    published_points: tuple[float, ...]
    ours: Interval  #: our change (t interval; NaN bounds without one), in the paper's unit
    our_points: tuple[float, ...]  #: our means per point (NaN where a point has no run)
    p_value: float
    p_holm: float = math.nan
    verdict: str = ""
    detail: str = ""  #: why not comparable
    explanations: tuple[str, ...] = ()
    metric: str = "accuracy"
    #: Runs behind the points that collapsed (an accuracy trend keeps them: their accuracy is
    #: what training gave; the verdict says how many).
    collapsed: int = 0

    @property
    def collapsed_note(self) -> str:
        """``"; 9 collapsed runs among its points"`` or ""."""
        if not self.collapsed:
            return ""
        plural = "s" if self.collapsed != 1 else ""
        return f"; {self.collapsed} collapsed run{plural} among its points"

    @property
    def comparable(self) -> bool:
        return not self.detail


def _values(runs: pd.DataFrame, metric: str) -> pd.Series:
    """Each run's value of ``metric`` in the paper's unit (local-DP test columns fall back to
    ``accuracy`` for runs that are not local DP)."""
    column, factor, _ = TREND_METRICS[metric]
    values = runs[column] if column in runs else pd.Series(np.nan, index=runs.index)
    if column.startswith("accuracy_") and column.endswith("_test"):
        values = values.where(values.notna(), runs["accuracy"])
    return values.astype(float) * factor


def trend_verdicts(entries: Sequence[Mapping[str, Any]], frame: pd.DataFrame
                   ) -> list[TrendVerdict]:
    """Every trend of ``entries`` (``published:`` entries) against each backend of ``frame``'s
    finished runs, Holm-adjusted together (the module's rule)."""
    done = frame[frame["status"] == "finished"] if not frame.empty else frame
    verdicts: list[TrendVerdict] = []
    for entry in entries:
        if entry.get("table") is None:
            continue
        table = paper_table(str(entry["paper"]), str(entry["table"]))
        for trend in entry.get("trends") or []:
            points = points_of(trend)
            printed = []
            for row_keys, cols, _ in points:
                row = table.rows[find_row(table, row_keys)]
                figures = [row[table.columns.index(c)] for c in cols]
                printed.append(float(np.mean([float(f) for f in figures]))
                               if all(f is not None for f in figures) else math.nan)
            backends = sorted(set(done["backend"])) if not done.empty else []
            if trend.get("backend"):
                backends = [b for b in backends if b == trend["backend"]]
            for backend in backends:
                verdicts.append(_one_trend(trend, backend, done, points, printed))
    tested = [i for i, v in enumerate(verdicts) if v.comparable]
    adjusted = holm_adjusted([verdicts[i].p_value for i in tested])
    out = list(verdicts)
    for i, p_holm in zip(tested, adjusted, strict=True):
        v = verdicts[i]
        sign_ok = np.sign(v.ours.mean) == np.sign(v.published_change)
        if not math.isnan(p_holm) and p_holm < ALPHA:
            word = (IN_SIZE if _in_size(v) else IN_SIGN) if sign_ok else REVERSED
        else:
            word = NOT_SHOWN
        out[i] = _replace(v, p_holm=float(p_holm), verdict=word)
    return [v if v.verdict else _replace(v, verdict=NOT_COMPARABLE) for v in out]


def _in_size(v: TrendVerdict) -> bool:
    """Whether the paper's change lies inside our interval widened by the metric's
    tolerance (:data:`TOLERANCES`, absolute; for a relative one, of the paper's change)."""
    metric = v.metric if v.metric in TOLERANCES else "accuracy"
    tolerance = tolerance_of(metric, v.published_change)
    low = v.ours.mean if math.isnan(v.ours.low) else v.ours.low
    high = v.ours.mean if math.isnan(v.ours.high) else v.ours.high
    return low - tolerance <= v.published_change <= high + tolerance


def _replace(v: TrendVerdict, **changes: Any) -> TrendVerdict:
    import dataclasses

    return dataclasses.replace(v, **changes)


def _one_trend(trend: Mapping[str, Any], backend: str, done: pd.DataFrame,
               points: list[tuple[Mapping[str, Any], list[str], list[str]]],
               printed: list[float]) -> TrendVerdict:
    metric = str(trend["metric"])
    groups: list[list[dict[int, float]]] = []
    problems: list[str] = []
    means = []
    collapsed = 0
    for _, _, settings in points:
        point_groups = []
        for setting in settings:
            runs = done[(done["setting"] == setting) & (done["backend"] == backend)]
            values = _values(runs, metric)
            by_seed = {int(s): float(v) for s, v in zip(runs["seed"], values, strict=True)
                       if not math.isnan(float(v))}
            if len(by_seed) < MIN_SEEDS:
                problems.append(f"{setting}: {len(by_seed)} seed"
                                f"{'s' if len(by_seed) != 1 else ''}, fewer than {MIN_SEEDS}")
            if "collapsed" in runs and runs["collapsed"].any():
                if metric in COLLAPSE_VOIDS:
                    problems.append(f"{setting}: {int(runs['collapsed'].sum())} collapsed "
                                    "run(s)")
                collapsed += int(runs["collapsed"].sum())
            point_groups.append(by_seed)
        groups.append(point_groups)
        present = [np.mean(list(g.values())) for g in point_groups if g]
        means.append(float(np.mean(present)) if len(present) == len(point_groups)
                     else math.nan)
    first, last = groups[0], groups[-1]
    parts = [(1.0 / len(last), g) for g in last] + [(-1.0 / len(first), g) for g in first]
    interval, p_value = contrast_test(parts)
    change = printed[-1] - printed[0]
    return TrendVerdict(claim=str(trend["claim"]), backend=backend, published_change=change,
                        published_points=tuple(printed), ours=interval,
                        our_points=tuple(means), p_value=p_value,
                        detail="; ".join(problems), metric=metric, collapsed=collapsed,
                        explanations=tuple(" ".join(str(e).split())
                                           for e in trend.get("explanations") or ()))


def monotone_word(values: Sequence[float]) -> str:
    """``"falls at every step"``, ``"rises at every step"`` or ``"not monotone"`` (two
    points: ``"falls"`` / ``"rises"``)."""
    steps = np.diff(np.asarray(values, float))
    if len(values) < 2 or np.isnan(steps).any():
        return "not known"
    if (steps < 0).all():
        return "falls" + (" at every step" if len(steps) > 1 else "")
    if (steps > 0).all():
        return "rises" + (" at every step" if len(steps) > 1 else "")
    return "not monotone"


def trend_sentence(v: TrendVerdict, unit: str = "") -> str:
    """``"'Average Drop falls as epsilon grows' on tf: does not hold (no change shown): the
    paper -11.24 (falls at every step), ours +2.30 [95% t interval -1.02, +5.62], Holm p =
    0.31 (not monotone)"``."""
    head = f"'{v.claim}' on {v.backend}: {v.verdict}"
    if not v.comparable:
        return f"{head} ({v.detail})"
    interval = ("" if math.isnan(v.ours.low) else
                f" [95% t interval {v.ours.low:+.2f}, {v.ours.high:+.2f}]")
    return (f"{head}: the paper {v.published_change:+.2f}{unit} "
            f"({monotone_word(v.published_points)}), ours {v.ours.mean:+.2f}{unit}{interval}, "
            f"Holm p = {v.p_holm:.2g} ({monotone_word(v.our_points)}{v.collapsed_note})")


__all__ = ["CELL_RULE", "COLLAPSE_VOIDS", "COMPUTED_METRICS", "IN_SIGN", "IN_SIZE",
           "NOT_COMPARABLE",
           "NOT_REPRODUCED", "NOT_SHOWN", "REPRODUCED", "REVERSED", "TOLERANCES",
           "TREND_METRICS", "TrendVerdict", "cell_verdict", "monotone_word", "points_of",
           "tolerance_of", "trend_sentence", "trend_verdicts", "validate_trend",
           "verdict_summary"]
