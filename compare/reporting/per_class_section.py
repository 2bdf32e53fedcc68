"""The report's per-class section: recall per class and the per-class gaps."""

from __future__ import annotations

from compare.reporting import plots
from compare.reporting.frames import per_class_frame
from compare.reporting.section import ReportData, ReportFigure, SectionOutput, add, section
from compare.reporting.tables import markdown_table


@section("per class")
def per_class(data: ReportData) -> SectionOutput:
    """Per-class recall (``per_class.csv`` and its heat maps) and the per-class gaps."""
    frame, summary = data.frame, data.summary
    per_class = per_class_frame(data.results)
    if per_class.empty:
        return SectionOutput()
    figures: list[ReportFigure] = []
    lines = ["## Per-class accuracy (recall)", ""]
    collapsed = {f"{s}|{b}" for s, b in zip(summary["setting"], summary["backend"],
                                            strict=True)
                 if int(summary.set_index(["setting", "backend"]).loc[(s, b), "collapsed"])}
    if add(figures, "per_class.png", plots.per_class_figure(per_class, collapsed)):
        lines += ["Mean recall over seeds per class:", "", "![per-class accuracy](per_class.png)",
                  ""]
    if frame["recall_gap"].notna().any():
        binary = bool((frame["n_classes"].dropna() == 2).all())
        lines += ["### Per-class gaps", "",
                  "Gap = best minus worst class recall (the data sets here have no group "
                  "labels, so these are per-class gaps, not a fairness measure)."
                  + (" The one-vs-rest AUC gap is 0 by construction for a binary task and is "
                     "left out." if binary else ""), ""]
        cols = ["setting", "backend", "seeds", "recall_gap_text"]
        if not binary and "auc_gap_text" in summary:
            cols.append("auc_gap_text")
        lines += [markdown_table(summary.rename(columns={"recall_gap_text": "recall gap",
                                                         "auc_gap_text": "AUC gap"}),
                                 [{"recall_gap_text": "recall gap",
                                   "auc_gap_text": "AUC gap"}.get(c, c) for c in cols]), ""]
    return SectionOutput(lines, {"per_class.csv": per_class}, figures)


__all__ = ["per_class"]
