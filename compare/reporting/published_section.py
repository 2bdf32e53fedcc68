"""The report's "Published vs ours" section (Markdown), from a grid's ``published:`` entries
(:mod:`compare.reporting.published`) and the runs' table
(:func:`compare.reporting.frames.results_frame`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from compare.reporting.published import METRICS, find_row, load_paper, paper_table
from compare.reporting.section import ReportData, SectionOutput, section
from compare.reporting.stats import INTERVAL_NAMES, Interval, bootstrap_interval
from compare.reporting.tables import fmt, markdown_table

#: RunResult backend -> the library name the papers print.
LIBRARY_OF = {"tf": "TF Privacy", "torch": "Opacus"}


@dataclass(frozen=True)
class CellFigure:
    """One printed cell of a paper table beside one backend's runs of its setting."""

    cell: Mapping[str, Any]  #: the ``published:`` entry's cell (row, column, setting, metric)
    backend: str
    printed: float | None  #: the paper's figure as printed; None when not reported
    ours: Interval  #: mean [95% percentile bootstrap] over seeds, paper's unit; n 0: not run
    unit: str  #: what the figure is (:data:`~compare.reporting.published.METRICS`)
    collapsed: int  #: how many of the runs collapsed

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
            figures.append(CellFigure(cell, backend,
                                      None if printed is None else float(printed),
                                      bootstrap_interval(values), unit, collapsed))
    return figures


def comparison_rows(entry: Mapping[str, Any], frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (paper cell, backend): the printed figure, ours (mean [95% percentile
    bootstrap interval] over seeds, in the paper's unit: never outside the metric's range),
    the number of seeds, ours minus published, and whether our run collapsed."""
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
            "our setting": f"{cell['setting']} ({LIBRARY_OF.get(figure.backend, figure.backend)})",
            "metric": figure.unit,
            "collapsed": "collapsed" if figure.collapsed else "",
        })
    return pd.DataFrame(rows)


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
        lines += ["Our figure beside each cell:", "", markdown_table(rows), ""]
        lines += _bullets("Deviations (why our setting differs)", entry.get("deviations"))
        lines += _bullets("Assumed where the paper is ambiguous", entry.get("assumed"))
        lines += _bullets("The paper's own notes", list(table.notes))
    return lines


def _bullets(title: str, items: Sequence[str] | None) -> list[str]:
    if not items:
        return []
    return [f"{title}:", "", *[f"- {' '.join(str(i).split())}" for i in items], ""]


@section("published")
def published(data: ReportData) -> SectionOutput:
    """The published figures beside ours (:func:`published_section`)."""
    return SectionOutput(published_section(data.context.published, data.frame))

__all__ = ["LIBRARY_OF", "CellFigure", "cell_figures", "comparison_rows", "published",
           "published_section"]
