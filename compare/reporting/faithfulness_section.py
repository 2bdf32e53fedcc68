"""The report's Grad-CAM faithfulness section: figures, curves, tables and saliency montages."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from compare.reporting import plots
from compare.reporting.frames import FAITHFULNESS_KEYS, SANITY_KEYS, curves_frame
from compare.reporting.montage import draw_montage
from compare.reporting.section import (
    ReportData,
    ReportFigure,
    SectionOutput,
    add,
    drawn_figure,
    section,
)
from compare.reporting.stats import error_bars_phrase, seeds_phrase
from compare.reporting.tables import markdown_table
from dpcore.metrics.calibration import TEMPERATURE_BOUNDS
from dpcore.metrics.sanity import FAIL_SPEARMAN
from dpcore.results import RunResult

#: What the faithfulness table's score columns are, and how a saturated softmax bounds them.
FAITHFULNESS_COLUMNS_NOTE = (
    "`original_score` is the mean probability of the explained class on the unmasked images, "
    "`masked_score` on the images multiplied by their Grad-CAM map. When `original_score` is "
    "near 1 (a saturated softmax), Increase in Confidence has no room to rise and Average "
    "Drop counts, roughly, the share of images whose class the mask takes away.")


@section("faithfulness")
def faithfulness(data: ReportData) -> SectionOutput:
    """Grad-CAM faithfulness: the figures per metric, the deletion/insertion curves
    (``deletion_insertion.csv``), the tables (:func:`faithfulness_tables`) and the saliency
    montages (``montages/``)."""
    results, frame, summary, montages = data.results, data.frame, data.summary, data.montages
    lines: list[str] = []
    tables: dict[str, pd.DataFrame] = {}
    figures: list[ReportFigure] = []
    if any(frame[k].notna().any() for k in FAITHFULNESS_KEYS if k in frame):
        lines += ["## Grad-CAM faithfulness", "",
                  "Collapsed runs are drawn with an x and tabled apart: their figures describe "
                  "a (nearly) constant or chance-level model, not an interpretable one. "
                  "Settings whose explanations fail the model-randomisation check are circled. "
                  "Data sets with a curve of the swept variable are drawn against it; the "
                  "others setting by setting.", ""]
        lines += _not_evaluated_note(results, frame)
        for key, label in (("average_drop", "Average Drop % (lower is better)"),
                           ("increase_in_confidence", "Increase in Confidence % (higher)"),
                           ("deletion_auc", "deletion AUC (lower is better)"),
                           ("insertion_auc", "insertion AUC (higher is better)")):
            if not frame[key].notna().any():
                continue
            if add(figures, f"{key}_vs_epsilon.png",
                   plots.metric_vs_swept_figure(frame, key, label)):
                lines += [f"![{label}]({key}_vs_epsilon.png)", ""]
            rest = plots.not_curve_rows(frame, key)
            if add(figures, f"{key}_by_setting.png", plots.by_setting_figure(
                    rest, key, f"{label}, {error_bars_phrase(rest)}")):
                lines += [f"![{label}]({key}_by_setting.png)", ""]
        curves = curves_frame(results)
        if not curves.empty:
            tables["deletion_insertion.csv"] = curves

            def pick(group: pd.DataFrame, y: str) -> pd.DataFrame:
                return group[group["curve"] == y]

            if add(figures, "deletion_insertion.png", plots.lines_per_run_figure(
                    curves, "fraction", [("deletion", "deletion: class probability"),
                                         ("insertion", "insertion: class probability")],
                    "fraction of pixels deleted / inserted", select=pick)):
                lines += ["Deletion and insertion curves (mean over the faithfulness subset "
                          "and seeds; solid tf, dashed torch):", "",
                          "![deletion and insertion curves](deletion_insertion.png)", ""]
        lines += faithfulness_tables(summary)
        lines += temperature_bound_note(frame)
    if montages:
        lines += ["### Saliency montages", "",
                  "Each model is explained on the test images its headline metrics use "
                  "(local-DP runs with `data.ldp_test_inputs: privatised`: their privatised "
                  "images, shown beside the clean ones).", ""]
        for montage in montages:
            figures.append(drawn_figure(f"montages/{montage.name}",
                                        functools.partial(draw_montage, data=montage)))
            lines += [f"![{Path(montage.name).stem}](montages/{montage.name})", ""]
    return SectionOutput(lines, tables, figures)


#: How the randomisation column of the faithfulness tables is read.
RANDOMISATION_NOTE = (
    "`randomisation`: the model-randomisation sanity check (Adebayo et al. 2018) of each "
    "seed's Grad-CAM maps: the explained layer and every layer above it re-initialised "
    "(seeded), the maps compared by Spearman rank correlation (median over the images; "
    "`randomisation_spearman`) and SSIM (`randomisation_ssim`); an explanation whose maps keep "
    f"a median Spearman above {FAIL_SPEARMAN:g} did not change with the model and *fails the "
    "randomisation check*: its faithfulness figures are tabled apart and not read as "
    "interpretability.")
#: How the calibrated table is read.
CALIBRATED_NOTE = (
    "Temperature scaling (Guo et al. 2017): one temperature T per run, fitted by minimising the "
    "NLL on the data set's validation split when it has one (`imagefolder:` with "
    "`val: validation`), else on the test images outside the faithfulness subset (disjoint "
    "from the explained images; a small test set: half of the subset, the figures on the "
    "other half; `temperature_fit` says which: validation, test, faithfulness subset), divides "
    "the logits; it changes no predicted class, only the confidence, so an over-confident "
    "model (T > 1) no longer saturates Average Drop and Increase in Confidence. Both figures "
    "are shown: as the model outputs them and after scaling.")


#: A fitted temperature within this relative distance of the fit's upper bound is "at the
#: bound" (the bounded minimiser stops within 1e-6 of beta = 1/T, about 4e-4 at T = 20).
AT_BOUND_RTOL = 1e-3


def temperature_bound_note(frame: pd.DataFrame) -> list[str]:
    """A paragraph naming, per setting and backend, the runs whose fitted temperature is at the
    upper bound of the fit (:data:`~dpcore.metrics.calibration.TEMPERATURE_BOUNDS`): their
    NLL would fall further at a larger T, so they stay over-confident after scaling and their
    calibrated figures are not those of a calibrated model. Empty when no run is there."""
    if "temperature" not in frame:
        return []
    high = TEMPERATURE_BOUNDS[1]
    temperature = pd.to_numeric(frame["temperature"], errors="coerce")
    at_bound = (temperature - high).abs() <= AT_BOUND_RTOL * high
    if not at_bound.any():
        return []
    fitted = frame[temperature.notna()]
    parts = []
    for (setting, backend), rows in fitted.groupby(["setting", "backend"], sort=False):
        hits = int(at_bound[rows.index].sum())
        if hits:
            parts.append(f"`{setting}` {backend} ({hits} of {len(rows)})")
    return [f"**Temperature at the fit's upper bound** (T = {high:g}) for "
            f"{int(at_bound.sum())} run(s): {', '.join(parts)}. Their NLL would fall further "
            "at a larger T: these models stay over-confident after scaling, so their "
            "calibrated figures are not those of a calibrated model.", ""]


def _not_evaluated_note(results: Sequence[RunResult], frame: pd.DataFrame) -> list[str]:
    """Lines naming the finished runs that have no faithfulness figures (`–` in the tables):
    those whose record says why it was skipped (``metrics["faithfulness_note"]``, local-DP
    test images outside [0, 1]) with that reason, and those trained by a grid that did not
    ask for it (e.g. ``evaluation.faithfulness: false``), with the grids; a call that trains
    retrains the latter for it (:mod:`compare.runplan`), a report written without training
    shows them as recorded. Empty when every finished run has them."""
    keys = [k for k in FAITHFULNESS_KEYS if k in frame]
    finished = frame[frame["status"] == "finished"]
    missing = finished[finished[keys].isna().all(axis=1)] if keys else finished.iloc[0:0]
    if missing.empty:
        return []
    by_id = {r.run_id: r for r in results}
    skipped = {rid for rid in missing["run_id"]
               if "faithfulness_note" in (by_id[rid].metrics if rid in by_id else {})}
    lines: list[str] = []
    if skipped:
        rows = missing[missing["run_id"].isin(skipped)]
        reasons = sorted({str(by_id[rid].metrics["faithfulness_note"]) for rid in skipped})
        lines += [f"{len(rows)} finished run(s) have no faithfulness figures (`–` below): "
                  f"{_settings(rows)}: {'; '.join(reasons)}.", ""]
    unasked = missing[~missing["run_id"].isin(skipped)]
    if not unasked.empty:
        by_grid = sorted({str(by_id[rid].grid if rid in by_id and by_id[rid].grid
                              else "an unnamed grid") for rid in unasked["run_id"]})
        lines += [f"{len(unasked)} finished run(s) have no faithfulness figures (`–` below): "
                  f"{_settings(unasked)}. They were trained by "
                  f"{', '.join(f'`{g}`' for g in by_grid)} without faithfulness, and this "
                  "report was written without retraining them; a `dpcompare compare` call "
                  "that trains retrains them for it (the same figures plus the faithfulness).",
                  ""]
    return lines


def _settings(rows: pd.DataFrame) -> str:
    return ", ".join(f"`{s}`" for s in dict.fromkeys(rows["setting"].astype(str)))


def faithfulness_tables(summary: pd.DataFrame) -> list[str]:
    """The faithfulness tables of the summary: settings whose runs neither collapsed nor
    failed the randomisation check; those with a run that fails the check (not read as
    interpretability); the collapsed ones; then raw against temperature-scaled Average Drop
    and Increase in Confidence with the fitted T. Every table has the ``randomisation``
    column and names its interval (:func:`seeds_phrase`)."""
    keys = [*FAITHFULNESS_KEYS, *SANITY_KEYS]
    rename = {f"{k}_text": k for k in keys}
    has_check = "randomisation" in summary
    faith_cols = ["setting", "backend", "seeds",
                  *[k for k in FAITHFULNESS_KEYS if f"{k}_text" in summary],
                  *(["randomisation"] if has_check else [])]
    table = summary.rename(columns=rename)
    fails = (table["randomisation_fails"] > 0) if has_check else table["collapsed"] < 0
    collapsed = table["collapsed"] > 0
    phrase = seeds_phrase(summary["seeds"])
    lines = [f"Faithfulness ({phrase}), runs that did not collapse"
             + (" and whose explanations pass the randomisation check:" if has_check else ":"),
             "", markdown_table(table[~collapsed & ~fails], faith_cols), ""]
    if "original_score_text" in summary:
        lines += [FAITHFULNESS_COLUMNS_NOTE, ""]
    if has_check:
        lines += [RANDOMISATION_NOTE, ""]
    if fails[~collapsed].any():
        lines += [f"**Explanations that fail the randomisation check** ({phrase}; at least one "
                  "seed fails; the maps do not depend on the learned weights, so these figures "
                  "are not interpretability):", "",
                  markdown_table(table[~collapsed & fails],
                                 [*faith_cols, "randomisation_spearman",
                                  "randomisation_ssim"]), ""]
    if collapsed.any():
        lines += ["Collapsed settings (at least one seed collapsed; faithfulness of a "
                  "constant or chance-level model, not comparable):", "",
                  markdown_table(table[collapsed], [*faith_cols, "collapsed"]), ""]
    calibrated = [k for k in ("temperature", "average_drop", "calibrated_average_drop",
                              "increase_in_confidence", "calibrated_increase_in_confidence",
                              "randomisation_spearman", "randomisation_ssim")
                  if f"{k}_text" in summary]
    if "temperature_fit" in table and "temperature" in calibrated:  # the split T was fitted on
        calibrated.insert(calibrated.index("temperature") + 1, "temperature_fit")
    if "calibrated_average_drop" in calibrated:
        lines += [f"Faithfulness as output and after temperature scaling, with the "
                  f"randomisation check's similarities ({phrase}):", "",
                  markdown_table(table, ["setting", "backend", "seeds", *calibrated,
                                         *(["randomisation"] if has_check else []),
                                         "collapsed"]), "",
                  CALIBRATED_NOTE, ""]
    return lines


__all__ = ["CALIBRATED_NOTE", "FAITHFULNESS_COLUMNS_NOTE", "RANDOMISATION_NOTE", "faithfulness",
           "faithfulness_tables", "temperature_bound_note"]
