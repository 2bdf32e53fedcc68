"""The report's "Published vs ours" section (Markdown), from a grid's ``published:`` entries
(:mod:`compare.reporting.published`) and the runs' table
(:func:`compare.reporting.frames.results_frame`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from compare.reporting.published import METRICS, find_row, load_paper, paper_table
from compare.reporting.section import ReportData, SectionOutput, section
from compare.reporting.stats import INTERVAL_NAMES, bootstrap_interval
from compare.reporting.tables import fmt, markdown_table

#: RunResult backend -> the library name the papers print.
LIBRARY_OF = {"tf": "TF Privacy", "torch": "Opacus"}


def comparison_rows(entry: Mapping[str, Any], frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (paper cell, backend): the printed figure, ours (mean [95% percentile
    bootstrap interval] over seeds, in the paper's unit: never outside the metric's range),
    the number of seeds, ours minus published, and whether our run collapsed."""
    table = paper_table(str(entry["paper"]), str(entry["table"]))
    done = frame[frame["status"] == "finished"] if not frame.empty else frame
    rows = []
    for cell in entry.get("cells") or []:
        printed = table.rows[find_row(table, cell["row"])][table.columns.index(cell["column"])]
        column, factor, unit = METRICS[cell["metric"]]
        backends = [cell["backend"]] if "backend" in cell else sorted(
            set(done["backend"]) if not done.empty else [])
        for backend in backends:
            runs = done[(done["setting"] == cell["setting"]) & (done["backend"] == backend)] \
                if not done.empty else done
            values = runs[column].to_numpy(float) * factor if not runs.empty else []
            interval = bootstrap_interval(values)
            if interval.n == 0:
                ours = "not run"
            elif interval.n == 1:
                ours = f"{interval.mean:.2f} (1 seed)"
            else:
                ours = (f"{interval.mean:.2f} [{interval.low:.2f}, {interval.high:.2f}] "
                        f"({interval.n} seeds)")
            published = math.nan if printed is None else float(printed)
            diff = interval.mean - published if interval.n and printed is not None else math.nan
            rows.append({
                "paper row": ", ".join(f"{k}={v}" for k, v in cell["row"].items()),
                "paper column": cell["column"],
                "published": "not reported" if printed is None else fmt(published, 4),
                "ours": ours, "ours − published": fmt(round(diff, 2), 4),
                "our setting": f"{cell['setting']} ({LIBRARY_OF.get(backend, backend)})",
                "metric": unit,
                "collapsed": "collapsed" if "collapsed" in runs and runs["collapsed"].any()
                else "",
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

__all__ = ["LIBRARY_OF", "comparison_rows", "published", "published_section"]
