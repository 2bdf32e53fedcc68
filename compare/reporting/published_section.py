"""The report's "Published vs ours" section (Markdown), from a grid's ``published:`` entries
(:mod:`compare.reporting.published`) and the runs' table
(:func:`compare.reporting.frames.results_frame`): each cell with its verdict and each table
ending in one, then the paper's trends against ours (:mod:`compare.reporting.reproduction`).
Our runs are named by what ran (:func:`compare.reporting.labels.what_ran`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from compare.reporting.labels import LIBRARY_OF, what_ran
from compare.reporting.published import METRICS, find_row, load_paper, paper_table
from compare.reporting.reproduction import (
    CELL_RULE,
    IN_SIZE,
    TREND_METRICS,
    TrendVerdict,
    cell_verdict,
    trend_sentence,
    trend_verdicts,
    verdict_summary,
)
from compare.reporting.section import ReportData, SectionOutput, section
from compare.reporting.stats import INTERVAL_NAMES, Interval, bootstrap_interval
from compare.reporting.tables import fmt, markdown_table


@dataclass(frozen=True)
class CellFigure:
    """One printed cell of a paper table beside one backend's runs of its setting."""

    cell: Mapping[str, Any]  #: the ``published:`` entry's cell (row, column, setting, metric)
    backend: str
    printed: float | None  #: the paper's figure as printed; None when not reported
    ours: Interval  #: mean [95% percentile bootstrap] over seeds, paper's unit; n 0: not run
    unit: str  #: what the figure is (:data:`~compare.reporting.published.METRICS`)
    collapsed: int  #: how many of the runs collapsed
    recipe: str = "harmonised"  #: the runs' recipe (``harmonised`` or ``library``)

    @property
    def label(self) -> str:
        """The setting and what ran: ``"eps=1 (harmonised step, TF backend)"``."""
        return f"{self.cell['setting']} ({what_ran(self.backend, self.recipe)})"

    @property
    def verdict(self) -> tuple[str, str]:
        """(verdict, detail) by :func:`compare.reporting.reproduction.cell_verdict`."""
        return cell_verdict(str(self.cell["metric"]), self.printed, self.ours, self.collapsed,
                            self.cell.get("not_comparable"))

    @property
    def difference(self) -> float:
        """Ours minus published (NaN when either is missing)."""
        if not self.ours.n or self.printed is None:
            return math.nan
        return self.ours.mean - self.printed


def cell_figures(entry: Mapping[str, Any], frame: pd.DataFrame) -> list[CellFigure]:
    """One :class:`CellFigure` per (paper cell, backend) of ``entry`` (a ``published:`` entry
    with a table), from the finished runs of ``frame``: the figures both the Markdown
    comparison and the LaTeX table (:mod:`compare.latex`) print."""
    table = paper_table(str(entry["paper"]), str(entry["table"]))
    done = frame[frame["status"] == "finished"] if not frame.empty else frame
    figures = []
    for cell in entry.get("cells") or []:
        printed = table.rows[find_row(table, cell["row"])][table.columns.index(cell["column"])]
        column, factor, unit = METRICS[cell["metric"]]
        backends = [cell["backend"]] if "backend" in cell else sorted(
            set(done["backend"]) if not done.empty else [])
        for backend in backends:
            runs = done[(done["setting"] == cell["setting"]) & (done["backend"] == backend)] \
                if not done.empty else done
            values = runs[column].to_numpy(float) * factor if not runs.empty else []
            collapsed = int(runs["collapsed"].sum()) if "collapsed" in runs else 0
            recipes = sorted(set(runs["recipe"].astype(str))) if "recipe" in runs else []
            figures.append(CellFigure(cell, backend,
                                      None if printed is None else float(printed),
                                      bootstrap_interval(values), unit, collapsed,
                                      recipes[0] if len(recipes) == 1 else "harmonised"))
    return figures


def comparison_rows(entry: Mapping[str, Any], frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (paper cell, backend): the printed figure, ours (mean [95% percentile
    bootstrap interval] over seeds, in the paper's unit: never outside the metric's range),
    the number of seeds, ours minus published, what ran, whether our run collapsed, and the
    verdict (:func:`compare.reporting.reproduction.cell_verdict`)."""
    rows = []
    for figure in cell_figures(entry, frame):
        interval, cell = figure.ours, figure.cell
        if interval.n == 0:
            ours = "not run"
        elif interval.n == 1:
            ours = f"{interval.mean:.2f} (1 seed)"
        else:
            ours = (f"{interval.mean:.2f} [{interval.low:.2f}, {interval.high:.2f}] "
                    f"({interval.n} seeds)")
        rows.append({
            "paper row": ", ".join(f"{k}={v}" for k, v in cell["row"].items()),
            "paper column": cell["column"],
            "published": "not reported" if figure.printed is None
            else fmt(figure.printed, 4),
            "ours": ours, "ours − published": fmt(round(figure.difference, 2), 4),
            "our setting": figure.label,
            "metric": figure.unit,
            "collapsed": "collapsed" if figure.collapsed else "",
            "verdict": _verdict_text(*figure.verdict),
        })
    return pd.DataFrame(rows)


def _verdict_text(word: str, detail: str) -> str:
    return word if word == "reproduced" else f"{word}: {detail}"


def published_section(entries: Sequence[Mapping[str, Any]], frame: pd.DataFrame) -> list[str]:
    """Markdown lines of "Published vs ours" (empty without entries)."""
    if not entries:
        return []
    lines = ["## Published vs ours", "",
             "Figures as printed in the paper (never corrected); ours are the mean "
             f"[{INTERVAL_NAMES['bootstrap']}] over seeds, in the paper's unit; the difference "
             "is ours minus published. The deviations below explain the differences of setting.",
             ""]
    for entry in entries:
        paper = load_paper(str(entry["paper"]))
        source = " ".join(str(paper.get("source", "")).split())
        if entry.get("table") is None:
            lines += [f"### {entry['paper']}", "", f"Source: {source}", "",
                      " ".join(str(entry["no_table"]).split()), ""]
            lines += _bullets("Deviations", entry.get("deviations"))
            continue
        table = paper_table(str(entry["paper"]), str(entry["table"]))
        lines += [f"### {table.paper}: {table.name}", "", f"Source: {source}", ""]
        if table.setting:
            shown = "; ".join(f"{k}: {v}" for k, v in table.setting.items()
                              if not isinstance(v, Mapping))
            lines += [f"The paper's setting: {shown}.", ""]
        printed = pd.DataFrame([list(r) for r in table.rows], columns=list(table.columns))
        printed = printed.astype(object).where(printed.notna(), "not reported")
        lines += ["The paper's table as printed:", "", markdown_table(printed), ""]
        rows = comparison_rows(entry, frame)
        verdicts = [f.verdict for f in cell_figures(entry, frame)]
        lines += ["Our figure beside each cell:", "", markdown_table(rows), "",
                  CELL_RULE, "", verdict_summary(verdicts), ""]
        lines += _bullets("Deviations (why our setting differs)", entry.get("deviations"))
        lines += _bullets("Assumed where the paper is ambiguous", entry.get("assumed"))
        lines += _bullets("The paper's own notes", list(table.notes))
    lines += trends_lines(entries, frame)
    return lines


TREND_RULE = (
    "Each trend: the paper's change from its first to its last point (the mean of each "
    "point's columns) against ours (the same contrast of our settings' means over seeds, per "
    "backend, with its 95% Welch-Satterthwaite t interval); the p-values of all of this "
    "report's trends are Holm-adjusted together. *Holds*: adjusted p below 0.05 and our change "
    "has the paper's sign, *in size* when the paper's change lies inside our interval widened "
    "by the tolerance of the cells' rule, else *in sign only*; *does not hold*: the other sign "
    "(reversed), or no change shown "
    "(adjusted p at or above 0.05); *not comparable*: a point with fewer than 5 seeds, or a "
    "collapsed run behind a faithfulness figure. 'Falls / rises at every step' or 'not "
    "monotone' describe the paper's points and our means in order.")


def trends_lines(entries: Sequence[Mapping[str, Any]], frame: pd.DataFrame) -> list[str]:
    """The "Trends" subsection: every trend verdict (:func:`compare.reporting.reproduction.
    trend_verdicts`) with the differences of setting the preset names as possible reasons;
    [] without trends."""
    verdicts = trend_verdicts(entries, frame)
    if not verdicts:
        return []
    units = _trend_units(entries)
    lines = ["### Trends: the paper's against ours", "", TREND_RULE, ""]
    lines += [f"- {trend_sentence(v, units.get(v.claim, ''))}." for v in verdicts]
    lines.append("")
    reasons = {v.claim: v.explanations for v in verdicts if v.explanations
               and v.verdict != IN_SIZE}
    for claim, explanations in reasons.items():
        lines += [f"Differences of setting that could explain '{claim}': "
                  + "; ".join(explanations) + ".", ""]
    return lines


def _trend_units(entries: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Trend claim -> the unit its changes are printed in (" points" for percent figures)."""
    out = {}
    for entry in entries:
        for trend in entry.get("trends") or []:
            unit = TREND_METRICS[str(trend["metric"])][2]
            out[str(trend["claim"])] = " points" if unit.endswith("%") else ""
    return out


def trend_headline(entries: Sequence[Mapping[str, Any]], frame: pd.DataFrame) -> str | None:
    """The headline's reproduction sentence: each trend's verdict per backend, by how much,
    and (where it does not hold) the differences of setting that could explain it; None
    without trends."""
    verdicts = trend_verdicts(entries, frame)
    if not verdicts:
        return None
    units = _trend_units(entries)
    by_claim: dict[str, list[TrendVerdict]] = {}
    for v in verdicts:
        by_claim.setdefault(v.claim, []).append(v)
    parts = []
    reasons: list[str] = []
    for claim, group in by_claim.items():
        unit = units.get(claim, "")
        backends = "; ".join(_short(v, unit) for v in group)
        if not all(v.verdict == IN_SIZE for v in group):
            for reason in (e for v in group for e in v.explanations):
                if reason not in reasons:  # each once, though both backends' verdicts give it
                    reasons.append(reason)
        parts.append(f"'{claim}' (the paper {group[0].published_change:+.2f}{unit}): "
                     f"{backends}")
    why = ("" if not reasons else
           "; differences of setting that could explain those that do not hold in size: "
           + "; ".join(reasons))
    return ("Reproduction of the paper's trends (Holm-adjusted over the report's "
            f"{sum(v.comparable for v in verdicts)} trend tests; rule under 'Published vs "
            "ours'): " + "; ".join(parts) + why + ".")


def cells_headline(entries: Sequence[Mapping[str, Any]], frame: pd.DataFrame) -> str | None:
    """The headline's sentence on the published cells: each table's verdict counts
    (:func:`compare.reporting.reproduction.verdict_summary`); None without a table."""
    parts = []
    for entry in entries:
        if entry.get("table") is None or not entry.get("cells"):
            continue
        verdicts = [f.verdict for f in cell_figures(entry, frame)]
        summary = verdict_summary(verdicts).removeprefix("Verdict: ").rstrip(".")
        parts.append(f"{entry['paper']} {entry['table']}: {summary}")
    if not parts:
        return None
    return ("Published figures beside ours (rule under 'Published vs ours'): "
            + "; ".join(parts) + ".")


def _short(v: TrendVerdict, unit: str) -> str:
    if not v.comparable:
        return f"{v.backend} not comparable ({v.detail})"
    interval = ("" if math.isnan(v.ours.low) else f" [{v.ours.low:+.2f}, {v.ours.high:+.2f}]")
    return f"{v.backend} {v.verdict}, ours {v.ours.mean:+.2f}{unit}{interval}{v.collapsed_note}"


def _bullets(title: str, items: Sequence[str] | None) -> list[str]:
    if not items:
        return []
    return [f"{title}:", "", *[f"- {' '.join(str(i).split())}" for i in items], ""]


@section("published")
def published(data: ReportData) -> SectionOutput:
    """The published figures beside ours (:func:`published_section`)."""
    return SectionOutput(published_section(data.context.published, data.frame))

__all__ = ["LIBRARY_OF", "TREND_RULE", "CellFigure", "cell_figures", "comparison_rows",
           "cells_headline", "published", "published_section", "trend_headline",
           "trends_lines"]
