"""The report's learning curves (per epoch, from each run's history)."""

from __future__ import annotations

from compare.reporting import plots
from compare.reporting.frames import history_frame
from compare.reporting.section import ReportData, ReportFigure, SectionOutput, add, section


@section("learning curves")
def learning_curves(data: ReportData) -> SectionOutput:
    """Test accuracy and loss after every epoch (``history.csv`` and its figure)."""
    history = history_frame(data.results)
    if history.empty:
        return SectionOutput()
    figures: list[ReportFigure] = []
    lines = ["## Learning curves", "",
             "Test accuracy and test loss after every epoch, from each run's history (mean over "
             "seeds; solid tf, dashed torch).", ""]
    if add(figures, "learning_curves.png", plots.lines_per_run_figure(
            history, "epoch", [("test_accuracy", "test accuracy"),
                               ("test_loss", "test loss (nats)")], "epoch")):
        lines += ["![learning curves](learning_curves.png)", ""]
    return SectionOutput(lines, {"history.csv": history}, figures)


__all__ = ["learning_curves"]
