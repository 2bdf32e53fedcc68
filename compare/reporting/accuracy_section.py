"""The report's accuracy and AUC section."""

from __future__ import annotations

import pandas as pd

from compare.reporting import plots
from compare.reporting.frames import marked_splits
from compare.reporting.ldp_eval import ldp_evaluation_section
from compare.reporting.section import ReportData, ReportFigure, SectionOutput, add, section
from compare.reporting.stats import (
    INTERVAL_COLUMN,
    error_bars_phrase,
    format_interval,
    seeds_phrase,
    wilson_interval,
)
from compare.reporting.tables import markdown_table
from dpcore.mechanisms import is_non_private, privatises_images
from dpcore.scoring import LOGITS, SOFTMAX_FLOAT32


@section("accuracy")
def accuracy(data: ReportData) -> SectionOutput:
    """Accuracy and AUC: the figures by setting and against the swept variable, the table
    per setting and backend, the collapsed runs, and the local-DP evaluation."""
    frame, summary = data.frame, data.summary
    figures: list[ReportFigure] = []
    lines = [f"## Accuracy and AUC ({seeds_phrase(summary['seeds'])})", ""]
    scoring = auc_scoring_sentence(frame)
    if scoring:
        lines += [scoring, ""]
    marked, split = marked_splits(frame)
    if add(figures, "accuracy_by_setting.png", plots.by_setting_figure(
            marked, "accuracy", f"{split} accuracy ({error_bars_phrase(frame)})")):
        lines += ["Every setting, one panel per data set and grid axis (x = collapsed run; "
                  "dotted: majority-class rate):", "",
                  "![accuracy by setting](accuracy_by_setting.png)", ""]
    if add(figures, "accuracy_vs_epsilon.png", plots.metric_vs_swept_figure(
            frame, "accuracy", "test accuracy")):
        lines += [curve_caption(frame), "",
                  "![privacy-utility curve](accuracy_vs_epsilon.png)", ""]
    if frame["auc"].notna().any():
        if add(figures, "auc_vs_epsilon.png",
               plots.metric_vs_swept_figure(frame, "auc", "test AUC")):
            lines += ["![AUC vs the swept variable](auc_vs_epsilon.png)", ""]
        rest, split = marked_splits(plots.not_curve_rows(frame, "auc"))
        if add(figures, "auc_by_setting.png", plots.by_setting_figure(
                rest, "auc", f"{split} AUC ({error_bars_phrase(rest)})")):
            lines += ["![AUC by setting](auc_by_setting.png)", ""]
    table = summary.assign(collapsed=summary["collapsed"].map(
        lambda n: f"collapsed ({n})" if n else ""))
    names = {"accuracy_text": f"accuracy {INTERVAL_COLUMN}", "auc_text": f"auc {INTERVAL_COLUMN}",
             "epsilon_mean": "epsilon"}
    cols = ["setting", "backend", "seeds", "accuracy_text", "auc_text", "epsilon_mean",
            "collapsed"]
    lines += [markdown_table(table.rename(columns=names), [names.get(c, c) for c in cols]), ""]
    bad = frame[frame["collapsed"]]
    if not bad.empty:
        bad = bad.assign(**{"accuracy [95% Wilson]": [
            format_interval(wilson_interval(float(a), int(n)))
            if not (pd.isna(a) or pd.isna(n) or int(n) < 1) else "–"
            for a, n in zip(bad["accuracy"], bad["n_test"], strict=True)]})
        lines += ["Collapsed runs (predictions almost all one class, or at chance: test "
                  "accuracy not above the majority-class rate by a one-sided binomial test at "
                  "5% on the run's test set; the accuracy's 95% Wilson interval beside it):",
                  "", markdown_table(bad, ["setting", "backend", "seed",
                                           "accuracy [95% Wilson]", "majority_rate",
                                           "collapse_reason"]), ""]
    if frame["mechanism"].map(privatises_images).any():
        lines += ["`epsilon` is the central DP-SGD epsilon: local-DP runs train without DP-SGD "
                  "(∞ here); their per-value and per-image epsilons are in the Local DP section.",
                  ""]
        lines += ldp_evaluation_section(frame)
    return SectionOutput(lines, {}, figures)


#: Settings a mixed-scoring sentence names before it counts the rest.
MAX_NAMED_SETTINGS = 6


def auc_scoring_sentence(frame: pd.DataFrame) -> str | None:
    """How the AUCs of the report were scored (the run table's ``auc_scoring``): from the
    logits, from the float32 softmax, or a mix of both (named by setting); None when no run
    has an AUC."""
    scored = frame[frame["auc_scoring"].astype(str) != ""]
    if scored.empty:
        return None
    by_method = scored.groupby("auc_scoring", sort=True)["run_id"].count().to_dict()
    logits, softmax = by_method.get(LOGITS, 0), by_method.get(SOFTMAX_FLOAT32, 0)
    ties = ("where a model is saturated, its float32 probabilities round to exactly 0 or 1 "
            "and tie, which pulls its AUC towards 0.5")
    if not softmax:
        return (f"AUC scored from the logits for {_all(logits)} (the per-class log-odds, "
                "which rank the test examples as the exact softmax does).")
    if not logits:
        return (f"AUC scored from the float32 softmax for {_all(softmax)}: {ties} "
                "(`python -m benchmarks.auc_scoring` re-scores such runs from their logits).")
    settings = sorted(set(scored.loc[scored["auc_scoring"] == SOFTMAX_FLOAT32, "setting"]))
    named = ", ".join(settings[:MAX_NAMED_SETTINGS]) + (
        f" and {len(settings) - MAX_NAMED_SETTINGS} more settings"
        if len(settings) > MAX_NAMED_SETTINGS else "")
    return (f"This report mixes two AUC scorings: {_runs(logits)} from the logits, "
            f"{_runs(softmax)} from the float32 softmax ({named}); {ties}, so "
            "an AUC of one kind is not comparable with one of the other where models "
            "saturate.")


def _runs(n: int) -> str:
    return f"{n} run{'s' if n != 1 else ''}"


def _all(n: int) -> str:
    return "the one run" if n == 1 else f"all {n} runs"


def curve_caption(frame: pd.DataFrame) -> str:
    """The caption of the accuracy curve: what is on x (epsilon, or the clip norm of a clip
    sweep) and which reference lines the panels have (a dashed non-private line only where
    the grid has a non-private run)."""
    finished = frame[frame["status"] == "finished"]
    x = plots.swept_variable(finished) if not finished.empty else "epsilon"
    title = ("Privacy-utility curve" if x == "epsilon"
             else "Test accuracy against the clip norm C (the swept variable)")
    references = ["dotted: majority-class rate"]
    if finished["mechanism"].map(is_non_private).any():
        references.insert(0, "dashed: non-private run of the same panel")
    return f"{title}, one panel per data set ({'; '.join(references)}):"


__all__ = ["accuracy", "auc_scoring_sentence", "curve_caption"]
