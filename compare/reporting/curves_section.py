"""The report's learning curves (per epoch, from each run's history)."""

from __future__ import annotations

from compare.reporting import plots
from compare.reporting.frames import TRAINING_SET_MARK, history_frame, marked_splits
from compare.reporting.section import ReportData, ReportFigure, SectionOutput, add, section


@section("learning curves")
def learning_curves(data: ReportData) -> SectionOutput:
    """Test accuracy and loss after every epoch (``history.csv`` and its figure)."""
    history = history_frame(data.results)
    if history.empty:
        return SectionOutput()
    figures: list[ReportFigure] = []
    marked, split = marked_splits(history)  # the figure marks training-set settings
    measured_on = {"test": "test ", "training-set": "training-set "}.get(split, "")
    lines = ["## Learning curves", "",
             f"{measured_on.capitalize() or 'The '}accuracy and {measured_on}loss after every "
             "epoch, from each run's history (mean over seeds; solid tf, dashed torch).", ""]
    if split not in ("test", "training-set"):
        lines += [f"Settings marked `{TRAINING_SET_MARK.strip()}` are measured on the training "
                  "set (eval_split: train), the others on the test set.", ""]
    if add(figures, "learning_curves.png", plots.lines_per_run_figure(
            marked, "epoch", [("test_accuracy", f"{measured_on}accuracy"),
                              ("test_loss", f"{measured_on}loss (nats)")], "epoch")):
        lines += ["![learning curves](learning_curves.png)", ""]
    return SectionOutput(lines, {"history.csv": history}, figures)


__all__ = ["learning_curves"]
