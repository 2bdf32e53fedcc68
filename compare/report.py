"""Reports from a results store: ``report.md`` + CSV tables + PNG plots.

Every number in a report comes from a stored :class:`~dpcore.results.RunResult`. The header
states the exact command, the library versions, the data used and the wall time; then come
the headline (generated sentences), the published figures beside ours, and the sections. The
parts live in :mod:`compare.reporting` (one job per module); this module puts them together
and keeps the entry points other code calls (:class:`ReportContext`, :func:`write_report`,
:func:`command_line`, and the table helpers re-exported below).
"""

from __future__ import annotations

import dataclasses
import math
import sys
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from compare.montage import MontageData, draw_montage
from compare.report_context import ReportContext  # re-exported: callers import it from here
from compare.reporting import plots
from compare.reporting.attribution_section import attribution_section
from compare.reporting.audited_column import companion_view, companions_sentence
from compare.reporting.claims_section import claims_section
from compare.reporting.findings_section import findings_section
from compare.reporting.frames import (
    FAITHFULNESS_KEYS,
    SANITY_KEYS,
    curves_frame,
    front_end_mismatches,
    history_frame,
    per_class_frame,
    results_frame,
)
from compare.reporting.headline import headline
from compare.reporting.ldp_eval import ldp_evaluation_section
from compare.reporting.privacy_section import privacy_section
from compare.reporting.published_section import published_section
from compare.reporting.stats import (
    AGREEMENT_TOLERANCE,
    INTERVAL_NAMES,
    MIN_SEEDS,
    Interval,
    bootstrap_interval,
    format_interval,
    paired_backend_table,
    wilson_interval,
)
from compare.reporting.tables import markdown_table
from dpcore.errors import DpCompareError
from dpcore.metrics.sanity import FAIL_SPEARMAN
from dpcore.results import ResultsStore, RunResult, atomic_write_bytes, utc_now


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


def time_ratio_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per backend and DP setting: the median over seeds of its seconds per epoch, over the
    median of the matching non-private run (same backend, data set, model, epochs and fixed
    front end, cached or not: see :func:`front_end_mismatches`; not a pooled denominator).
    Settings without a matching non-private run are left out."""
    data = frame[(frame["status"] == "finished") & frame["epoch_seconds"].notna()]
    rows = []
    keys = ["backend", "dataset", "model", "epochs"]
    if "front_end" in data and not front_end_mismatches(data).empty:
        keys.append("front_end")
    for key, group in data.groupby(keys):
        public = group[group["mechanism"] == "none"]
        if public.empty:
            continue
        plain = float(public.groupby("setting")["epoch_seconds"].median().iloc[0])
        for setting, sub in group[group["mechanism"] != "none"].groupby("setting", sort=False):
            dp_time = float(sub["epoch_seconds"].median())
            rows.append({**dict(zip(keys, key, strict=True)), "setting": setting,
                         "seeds": len(sub), "median_epoch_seconds": dp_time,
                         "non_private_median_epoch_seconds": plain,
                         "ratio_to_non_private": dp_time / plain if plain else math.nan})
    return pd.DataFrame(rows)


def engines_used(results: Sequence[RunResult]) -> str:
    """How each backend's DP runs computed per-example gradients, from their RunResults:
    e.g. ``tf: fast engine (2 runs); torch: reference engine (Opacus grad-sample mode hooks)
    (2 runs)``.

    Performance-only (the engines compute the same update); stated so that the times in a
    report can be read. Non-private runs are not counted.
    """
    counts: dict[str, dict[str, int]] = {}
    for r in results:
        if r.config["privacy"]["mechanism"] not in ("dpsgd-gaussian", "dpsgd-laplace"):
            continue
        perf = r.perf or {}
        engine = perf.get("engine_used", perf.get("engine"))
        if engine == "library":
            how = f"library recipe: {perf.get('trainer', '?')}"
        elif engine is None and perf.get("grad_sample_mode"):  # results written before engines
            how = f"Opacus grad-sample mode {perf['grad_sample_mode']}"
        else:
            how = f"{engine or '?'} engine"
            if r.backend == "torch" and perf.get("grad_sample_mode"):
                how += f" (Opacus grad-sample mode {perf['grad_sample_mode']})"
        if perf.get("fast_engine_fallback"):
            how += f" (fast engine not used: {perf['fast_engine_fallback']})"
        per_backend = counts.setdefault(r.backend, {})
        per_backend[how] = per_backend.get(how, 0) + 1
    if not counts:
        return "no DP-SGD runs"
    return "; ".join(
        f"{backend}: " + ", ".join(f"{how} ({n} run{'s' if n > 1 else ''})"
                                   for how, n in hows.items())
        for backend, hows in sorted(counts.items()))


def _header(context: ReportContext, results: Sequence[RunResult], frame: pd.DataFrame
            ) -> list[str]:
    lines = [f"# {context.title}", "", f"- command: `{context.command}`",
             f"- written: {utc_now()}"]
    if context.wall_seconds is not None:
        lines.append(f"- wall time of the command that wrote this report, before the report "
                     f"(the runs it trained, not those already stored, and the montages): "
                     f"{context.wall_seconds:.0f} s")
    if results:
        run_seconds = sum(float(r.timing.get("total_seconds") or 0.0) for r in results)
        lines.append(f"- training time summed over the {len(results)} stored runs: "
                     f"{run_seconds:.0f} s")
        versions = results[0].versions
        shown = ", ".join(f"{k} {v}" for k, v in versions.items() if k != "platform")
        lines += [f"- versions: {shown}", f"- machine: {versions.get('platform', '?')}",
                  f"- per-example gradients: {engines_used(results)}"]
    if not frame.empty:
        data_used = frame.groupby("dataset").agg(
            n_train=("n_train", "first"), n_test=("n_test", "first"),
            fingerprint=("data_fingerprint", "first"))
        sources = _data_sources(results)
        for name, row in data_used.iterrows():
            lines.append(f"- data: `{name}`: {int(row.n_train)} train / {int(row.n_test)} test "
                         f"examples (fingerprint {row.fingerprint})" + sources.get(str(name), ""))
        counts = frame["status"].value_counts().to_dict()
        missing = (len(context.run_ids) - len({r.run_id for r in results})
                   if context.run_ids is not None else 0)
        lines.append("- runs: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
                     + (f"; **{missing} of the grid's {len(context.run_ids or ())} runs are "
                        "not stored yet: an interim report**" if missing > 0 else ""))
        seeds = sorted(set(int(s) for s in frame["seed"].dropna()))
        lines.append(f"- seeds: {', '.join(map(str, seeds))}")
    if context.description:
        lines += ["", " ".join(context.description.split())]
    return lines + [""]


def _data_sources(results: Sequence[RunResult]) -> dict[str, str]:
    """Data set name -> ", from `LOCATION`; provenance: ..." for the header: where the runs
    read it (relative to the data root, never a folder of this machine) and where the file
    comes from (the registry's provenance), from the first run of each data set."""
    from dpcore.data import data_provenance, portable_location

    out: dict[str, str] = {}
    for r in results:
        name = str(r.config["data"]["name"])
        if name in out:
            continue
        text = ""
        source = r.dataset.get("source")
        if source:
            text += f", read from `{portable_location(name, str(source))}`"
        note = (r.dataset.get("extra") or {}).get("note")
        if note:
            text += f" ({note})"
        provenance = data_provenance(name)
        if provenance:
            text += f"; provenance: {provenance}"
        out[name] = text
    return out


def _accuracy_section(frame: pd.DataFrame, summary: pd.DataFrame, out: Path) -> list[str]:
    lines = [f"## Accuracy and AUC ({seeds_phrase(summary['seeds'])})", ""]
    if plots.plot_by_setting(frame, "accuracy", out / "accuracy_by_setting.png",
                             f"test accuracy ({ERROR_BARS})"):
        lines += ["Every setting, one panel per data set and grid axis (x = collapsed run; "
                  "dotted: majority-class rate):", "",
                  "![accuracy by setting](accuracy_by_setting.png)", ""]
    if plots.plot_metric_vs_swept(frame, "accuracy", out / "accuracy_vs_epsilon.png",
                                  "test accuracy"):
        lines += ["Privacy-utility curve, one panel per data set (dashed: non-private run of "
                  "the same panel; dotted: majority-class rate):", "",
                  "![privacy-utility curve](accuracy_vs_epsilon.png)", ""]
    if frame["auc"].notna().any():
        if plots.plot_metric_vs_swept(frame, "auc", out / "auc_vs_epsilon.png", "test AUC"):
            lines += ["![AUC vs the swept variable](auc_vs_epsilon.png)", ""]
        elif plots.plot_by_setting(frame, "auc", out / "auc_by_setting.png",
                                   f"test AUC ({ERROR_BARS})"):
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
    if (frame["mechanism"] == "ldp").any():
        lines += ["`epsilon` is the central DP-SGD epsilon: local-DP runs train without DP-SGD "
                  "(∞ here); their per-value and per-image epsilons are in the Local DP section.",
                  ""]
        lines += ldp_evaluation_section(frame)
    return lines


#: Why a DP-SGD pair of one seed still differs, and how far its verdicts can be trusted.
NOISE_PAIRING_NOTE = (
    "Under DP-SGD a pair shares the batches and initial weights but not the noise: each "
    "backend draws it from its own generator (TensorFlow's and torch's, both seeded from the "
    "run seed), so the difference includes the effect of two independent noise draws, which "
    "on a noise-dominated model can move test accuracy by several points either way. One "
    "seed's noise stream is also the same draws, scaled, at every epsilon, so the DP settings "
    "of one data set are not independent tests. A 'differ' verdict from a few seeds is a "
    "reason to run more seeds before reading it as a difference between the libraries.")


def _backend_section(paired: pd.DataFrame, out: Path,
                     frame: pd.DataFrame | None = None) -> list[str]:
    if paired.empty:
        return []
    figure: list[str] = []
    if frame is not None and plots.plot_paired_differences(frame, out / "backends_paired.png",
                                                           AGREEMENT_TOLERANCE):
        figure = ["Every seed's pair (grey) and the mean difference with its 95% t interval "
                  "(black), one panel per data set:", "",
                  "![paired differences](backends_paired.png)", ""]
    paired.to_csv(out / "backends_paired.csv", index=False)
    shown = paired.assign(**{
        "mean difference (points)": 100 * paired["mean_difference"],
        "95% t interval low": 100 * paired["ci_low"],
        "95% t interval high": 100 * paired["ci_high"]})
    return ["## Backends paired by seed", "",
            "Opacus (torch) minus TF Privacy (tf) test accuracy, in percentage points, paired "
            "by seed (the same seed gives both backends the same batches and initial weights). "
            "Interval: 95% t interval of the mean difference (a difference is not bounded "
            "like a mean accuracy); test: scipy's paired t test; "
            f"verdict 'agree' only when the interval lies inside ±{100 * AGREEMENT_TOLERANCE:g}"
            " point and neither backend has a collapsed run, 'differ' when it excludes 0; "
            f"a verdict from fewer than {MIN_SEEDS} seeds is 'preliminary'.", "",
            *figure,
            markdown_table(shown, ["setting", "pairs", "mean difference (points)",
                                   "95% t interval low", "95% t interval high", "p_value",
                                   "verdict", "collapsed"]), "",
            *([NOISE_PAIRING_NOTE, ""] if paired["noised"].any() else [])]


def _curves_section(results: Sequence[RunResult], out: Path) -> list[str]:
    history = history_frame(results)
    if history.empty:
        return []
    history.to_csv(out / "history.csv", index=False)
    lines = ["## Learning curves", "",
             "Test accuracy and test loss after every epoch, from each run's history (mean over "
             "seeds; solid tf, dashed torch).", ""]
    if plots.plot_lines_per_run(history, "epoch", [("test_accuracy", "test accuracy"),
                                                   ("test_loss", "test loss (nats)")],
                                out / "learning_curves.png", "epoch"):
        lines += ["![learning curves](learning_curves.png)", ""]
    return lines


#: What the faithfulness table's score columns are, and how a saturated softmax bounds them.
FAITHFULNESS_COLUMNS_NOTE = (
    "`original_score` is the mean probability of the explained class on the unmasked images, "
    "`masked_score` on the images multiplied by their Grad-CAM map. When `original_score` is "
    "near 1 (a saturated softmax), Increase in Confidence has no room to rise and Average "
    "Drop counts, roughly, the share of images whose class the mask takes away.")


def _faithfulness_section(results: Sequence[RunResult], frame: pd.DataFrame,
                          summary: pd.DataFrame, out: Path,
                          montages: Sequence[MontageData]) -> list[str]:
    lines: list[str] = []
    if any(frame[k].notna().any() for k in FAITHFULNESS_KEYS if k in frame):
        lines += ["## Grad-CAM faithfulness", "",
                  "Collapsed runs are drawn with an x and tabled apart: their figures describe "
                  "a (nearly) constant or chance-level model, not an interpretable one.", ""]
        for key, label in (("average_drop", "Average Drop % (lower is better)"),
                           ("increase_in_confidence", "Increase in Confidence % (higher)"),
                           ("deletion_auc", "deletion AUC (lower is better)"),
                           ("insertion_auc", "insertion AUC (higher is better)")):
            if not frame[key].notna().any():
                continue
            if plots.plot_metric_vs_swept(frame, key, out / f"{key}_vs_epsilon.png", label):
                lines += [f"![{label}]({key}_vs_epsilon.png)", ""]
            elif plots.plot_by_setting(frame, key, out / f"{key}_by_setting.png",
                                       f"{label}, {ERROR_BARS}"):
                lines += [f"![{label}]({key}_by_setting.png)", ""]
        curves = curves_frame(results)
        if not curves.empty:
            curves.to_csv(out / "deletion_insertion.csv", index=False)

            def pick(group: pd.DataFrame, y: str) -> pd.DataFrame:
                return group[group["curve"] == y]

            if plots.plot_lines_per_run(curves, "fraction",
                                        [("deletion", "deletion: class probability"),
                                         ("insertion", "insertion: class probability")],
                                        out / "deletion_insertion.png",
                                        "fraction of pixels deleted / inserted", select=pick):
                lines += ["Deletion and insertion curves (mean over the faithfulness subset "
                          "and seeds; solid tf, dashed torch):", "",
                          "![deletion and insertion curves](deletion_insertion.png)", ""]
        lines += faithfulness_tables(summary)
    if montages:
        (out / "montages").mkdir(exist_ok=True)
        lines += ["### Saliency montages", "",
                  "Each model is explained on the test images its headline metrics use "
                  "(local-DP runs with `data.ldp_test_inputs: privatised`: their privatised "
                  "images, shown beside the clean ones).", ""]
        for data in montages:
            draw_montage(out / "montages" / data.name, data)
            lines += [f"![{Path(data.name).stem}](montages/{data.name})", ""]
    return lines


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

def report_montages(store_root: Path, grid_name: str | None) -> list[MontageData]:
    """The montages a report of the store ``store_root`` shows, as the arrays the runner
    stored (:func:`compare.montage.save_montage_data`), each named as its PNG in the report.

    With ``grid_name``: that grid's montages only (a store shared by several grids holds a
    montage per grid for the same data set and model, with different columns). Without: every
    grid's montage in the store, each named after its grid. A damaged file is skipped with a
    warning (``dpcompare compare`` redraws it from the checkpoints).
    """
    from compare.montage import (
        MONTAGE_DATA_SUFFIX,
        MONTAGES_FOLDER,
        grid_montage_folder,
        load_montage_data,
    )

    if grid_name is not None:
        found = [(f"{p.stem}.png", p) for p in sorted(grid_montage_folder(store_root, grid_name)
                                                      .glob(f"*{MONTAGE_DATA_SUFFIX}"))]
    else:
        found = [(f"{p.parent.name}-{p.stem}.png", p) for p in sorted(
            (store_root / MONTAGES_FOLDER).glob(f"*/*{MONTAGE_DATA_SUFFIX}"))]
    montages = []
    for name, path in found:
        try:
            montages.append(dataclasses.replace(load_montage_data(path), name=name))
        except DpCompareError as exc:
            warnings.warn(f"montage skipped: {exc}", stacklevel=2)
    return montages


def front_end_sentence(mismatches: pd.DataFrame) -> str:
    """The time section's warning for :func:`front_end_mismatches` ("" when empty)."""
    if mismatches.empty:
        return ""
    groups = "; ".join(f"{row.dataset} · {row.model}: {row.every_step} runs computed it in "
                       f"every step, {row.cached} once per data set"
                       for row in mismatches.itertuples())
    return ("**Epoch times not comparable across the fixed front end.** Some runs of a model "
            "with a fixed front end (the ScatterNets' scattering) computed it once per data "
            "set before training (`cached` in the `front_end` column) and others in every "
            "step (`every step`: stored before the front-end cache existed, or run with it off "
            f"or with `augment`): {groups}. Their epoch times differ by the front end's cost, "
            "not by DP; the DP-over-non-private ratios below compare runs with the same front "
            "end only, and leave out a setting that has no such non-private run.")


def _time_section(frame: pd.DataFrame, out: Path) -> list[str]:
    lines = ["## Time", "",
             "Seconds per epoch (first epoch excluded), **median over seeds**, measured on this "
             "machine in the runs this report lists (other jobs may have shared the CPU).", ""]
    if plots.plot_epoch_time(frame, out / "epoch_time.png"):
        lines += ["![seconds per epoch](epoch_time.png)", ""]
    mismatches = front_end_mismatches(frame)
    if not mismatches.empty:
        lines += [front_end_sentence(mismatches), ""]
    ratios = time_ratio_table(frame)
    if not ratios.empty:
        ratios.to_csv(out / "time_ratios.csv", index=False)
        lines += ["DP over non-private median epoch time, against the non-private run of the "
                  "same backend, data set, model and epochs"
                  + (" and front end" if "front_end" in ratios else "") + ":", "",
                  markdown_table(ratios), ""]
    done = frame[frame["status"] == "finished"]
    # A process-wide peak is the largest run's so far, not this run's: never shown as one.
    per_run = done.assign(run_peak_memory_mb=done["peak_memory_mb"].where(
        done["peak_memory_scope"] == "run"))
    by = ["setting", "backend"] + (["front_end"] if not mismatches.empty else [])
    medians = per_run.groupby(by, sort=False).agg(
        seeds=("seed", "size"), median_epoch_seconds=("epoch_seconds", "median"),
        median_examples_per_second=("examples_per_second", "median"),
        median_peak_memory_mb=("run_peak_memory_mb", "median")).reset_index()
    lines += [markdown_table(medians), "", _memory_sentence(done), ""]
    return lines


def _memory_sentence(done: pd.DataFrame) -> str:
    """What the memory column is, and which runs it leaves out."""
    text = ("Peak memory: the peak resident set size of the process during each run, in MiB "
            "(Linux VmHWM, reset at the run's start; it includes the data and framework "
            "runtime already loaded, so it compares runs of one grid, not absolute needs).")
    process_wide = int((done["peak_memory_scope"] != "run").sum())
    if process_wide:
        text += (f" {process_wide} of {len(done)} runs recorded only the process-wide peak "
                 "(stored before per-run measurement, or on a system without the reset): in a "
                 "grid that is the largest earlier run's, so they are left out ('–').")
    return text


def _per_class_section(results: Sequence[RunResult], frame: pd.DataFrame,
                       summary: pd.DataFrame, out: Path) -> list[str]:
    per_class = per_class_frame(results)
    if per_class.empty:
        return []
    per_class.to_csv(out / "per_class.csv", index=False)
    lines = ["## Per-class accuracy (recall)", ""]
    collapsed = {f"{s}|{b}" for s, b in zip(summary["setting"], summary["backend"],
                                            strict=True)
                 if int(summary.set_index(["setting", "backend"]).loc[(s, b), "collapsed"])}
    if plots.plot_per_class(per_class, collapsed, out / "per_class.png"):
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
    return lines


def _ldp_and_audit(frame: pd.DataFrame) -> list[str]:
    lines: list[str] = []
    first_seed = frame.sort_values("seed", kind="stable").drop_duplicates(["setting", "backend"])
    if frame["ldp_epsilon_per_image"].notna().any():
        lines += ["## Local DP", "",
                  "Per-value epsilon protects one pixel value; **the per-image epsilon is the "
                  "one that protects a patient's image**. PSNR/SSIM of the first seed's "
                  "privatised test images.", ""]
        ldp_cols = ["setting", "backend", "ldp_epsilon_per_value", "ldp_epsilon_per_image",
                    "ldp_psnr", "ldp_ssim"]
        lines += [markdown_table(first_seed[first_seed["mechanism"] == "ldp"], ldp_cols), ""]
    if "attack_auc" in frame and frame["attack_auc"].notna().any():
        lines += ["## Membership-inference audit", "",
                  "TF Privacy's membership-inference attacks (threshold and logistic regression "
                  "on losses), training examples vs the same number of held-out examples. "
                  "`advantage_bound` = (e^eps - 1 + 2 delta) / (e^eps + 1) with eps = "
                  "`bound_epsilon`, the smaller of the run's RDP and PLD epsilons (its "
                  "accountant in `bound_accountant`; it may differ from `epsilon`); a run whose "
                  "held-out advantage has a confidence interval entirely above the bound is "
                  "marked as a suspected privacy bug.", ""]
        audit_cols = ["setting", "backend", "seed", "epsilon", "bound_epsilon",
                      "bound_accountant", "attack_auc", "attack_advantage",
                      "heldout_advantage_ci_low", "advantage_bound", "suspected_privacy_bug"]
        lines += [markdown_table(frame[frame["attack_auc"].notna()], audit_cols), ""]
        flags = frame.get("suspected_privacy_bug")
        suspects = frame[flags.fillna(False).astype(bool)] if flags is not None else frame[:0]
        if not suspects.empty:
            lines += ["**Suspected privacy bug** in: "
                      + ", ".join(suspects["run_id"]) + ".", ""]
    return lines


def preset_published(results: Sequence[RunResult]) -> tuple[dict[str, Any], ...]:
    """The ``published:`` entries of the bundled preset that wrote these runs, so that
    ``dpcompare report`` shows the papers' figures as ``compare`` does; empty when the runs
    come from several grids or from no bundled preset."""
    from compare.grid import bundled_grid_of

    grid = bundled_grid_of(results)
    return () if grid is None else grid.published


def _single_grid_name(results: Sequence[RunResult]) -> str | None:
    """The grid that wrote every one of these runs (RunResult ``grid``), if they share one."""
    names = {r.grid for r in results}
    return str(next(iter(names))) if len(names) == 1 and next(iter(names)) else None


def write_report(
    store_root: str | Path, out_dir: str | Path, context: ReportContext, *,
    records: Mapping[str, RunResult] | None = None,
) -> Path:
    """Write report.md, CSV tables, PNG plots and the run records (``records/``, see
    :mod:`compare.records`) for every run in ``store_root``.

    Returns the path of ``report.md``. ``records`` (run id -> RunResult, e.g. the committed
    records a grid resumed from, :func:`compare.records.committed_records`) are reported
    with the store's runs; for a run in both, the record is the one reported (one record per
    run id across reports). Montages are drawn from the arrays the runner stored (one folder
    per grid under ``montages/`` of the store, :func:`report_montages`); a store written
    before montage arrays existed shows its montages once ``dpcompare compare`` has redrawn
    them.
    """
    runs = {r.run_id: r for r in ResultsStore(store_root).list_runs()}
    runs.update(records or {})
    results = [runs[key] for key in sorted(runs)]
    if context.run_ids is not None:
        results = [r for r in results if r.run_id in context.run_ids]
    grid_name = context.montage_grid or _single_grid_name(results)
    montages = report_montages(Path(store_root), grid_name)
    return render_report(results, dataclasses.replace(context, montage_grid=grid_name),
                         out_dir, montages)


def rebuild_report(report_dir: str | Path, out_dir: str | Path | None = None) -> Path:
    """Rebuild the report folder ``report_dir`` (report.md, CSVs, PNGs, montages, records)
    from its records alone (:func:`compare.records.read_records`): no training, no model, no
    store. ``out_dir`` defaults to ``report_dir`` itself. Returns the path of report.md.

    Raises:
        DataError: ``report_dir`` holds no (readable) records.
    """
    from compare.records import read_records

    records = read_records(report_dir)
    return render_report(records.results, records.context, out_dir or report_dir,
                         records.montages, resolved=True)


def resolve_context(results: Sequence[RunResult], context: ReportContext
                    ) -> tuple[list[RunResult], ReportContext]:
    """``results`` named and ordered as the reported grid names them, and ``context`` with
    everything a rebuild needs fixed: the axis order and published figures (looked up from
    the bundled preset when not given), the command with no folder of this machine. What a
    report's records hold, so that rebuilding it consults no preset file and no store."""
    from compare.grid import bundled_grid_of, in_axis_order, with_grid_labels
    from compare.records import portable_text

    axis_order = tuple(context.axis_order)
    if not axis_order:
        grid = bundled_grid_of(results)
        axis_order = () if grid is None else tuple(grid.axis_names)
    results = in_axis_order(with_grid_labels(results, context.labels), axis_order)
    published = tuple(context.published) or preset_published(results)
    return results, dataclasses.replace(context, command=portable_text(context.command),
                                        labels=None, axis_order=axis_order,
                                        published=published)


def render_report(results: Sequence[RunResult], context: ReportContext, out_dir: str | Path,
                  montages: Sequence[MontageData] = (), *, resolved: bool = False) -> Path:
    """Write the report of ``results`` into ``out_dir``: report.md, CSVs, PNGs, montages
    drawn from ``montages``, and the records it can be rebuilt from (with the digest of every
    figure's plotted data, :mod:`compare.figdigest`). A pure function of its arguments but
    for the header's written time. ``resolved``: ``results`` and ``context`` are already as
    :func:`resolve_context` returns them (a rebuild from records).
    """
    from compare.figdigest import collecting
    from compare.records import write_records

    results = sorted(results, key=lambda r: r.run_id)  # the records' order: a rebuild's too
    if not resolved:
        results, context = resolve_context(results, context)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with collecting(out) as figures:
        path = _write_files(results, context, out, montages)
    write_records(out, results, context, montages, figures)
    return path


def _write_files(results: Sequence[RunResult], context: ReportContext, out: Path,
                 montages: Sequence[MontageData]) -> Path:
    """report.md and the tables and figures of ``results`` into ``out`` (see
    :func:`render_report`)."""
    view = companion_view(results, context)  # audit companions: only in the privacy table
    results, context = view.results, view.context
    frame = results_frame(results)
    lines = _header(context, results, frame)
    report_path = out / "report.md"
    if frame.empty:
        lines.append("No runs found.")
        atomic_write_bytes(report_path, ("\n".join(lines) + "\n").encode())
        return report_path

    frame.to_csv(out / "runs.csv", index=False)
    summary = summary_table(frame)
    summary.to_csv(out / "summary.csv", index=False)
    if summary.empty:  # no run finished: nothing to aggregate
        lines += ["No run finished.", "", "## Runs that did not finish", "",
                  markdown_table(frame, ["run_id", "setting", "backend", "seed", "status"])]
        atomic_write_bytes(report_path, ("\n".join(lines) + "\n").encode("utf-8"))
        return report_path
    paired = paired_backend_table(frame)
    published = context.published
    lines += ["## Headline", "", " ".join(headline(frame, paired)), ""]
    lines += published_section(published, frame)
    lines += findings_section(published, out)
    lines += privacy_section(frame, out) + companions_sentence(view)
    lines += attribution_section(results, published, out) or claims_section(results)
    lines += _accuracy_section(frame, summary, out)
    lines += _backend_section(paired, out, frame)
    lines += _curves_section(results, out)

    lines += ["## Epsilon side by side", "",
              "Shared accountant (dp_accounting, from each run's DpEvent) next to the "
              "library's own accountant for the same run (Opacus: RDP, PRV; TF Privacy: "
              "`compute_dp_sgd_privacy`, RDP); first seed (the seed does not change epsilon).",
              ""]
    eps_cols = ["setting", "backend", "noise_multiplier", "steps", "sampling_rate", "delta",
                "epsilon_rdp", "epsilon_pld", "epsilon_opacus_rdp", "epsilon_opacus_prv",
                "epsilon_tf_privacy", "epsilon_proved"]
    first_seed = frame.sort_values("seed", kind="stable").drop_duplicates(["setting", "backend"])
    dp_rows = first_seed[first_seed["mechanism"].astype(str).str.startswith("dpsgd")]
    planned_differs = (dp_rows["steps"] != dp_rows["steps_planned"]) & \
        dp_rows["steps_planned"].notna()
    if planned_differs.any():  # a library's loader ran other steps than planned: both shown
        eps_cols = [*eps_cols[:4], "steps_planned", *eps_cols[4:7], "epsilon_rdp_planned",
                    *eps_cols[7:]]
        lines[-1:] = ["`steps` and `epsilon_*` are those of the steps that ran; a library "
                      "recipe's own loader ran other steps than planned in "
                      f"{int(planned_differs.sum())} row(s), whose planned figures are in "
                      "`steps_planned` and `epsilon_rdp_planned`.", ""]
    lines += [markdown_table(dp_rows, eps_cols), ""]
    frame[eps_cols].to_csv(out / "epsilon.csv", index=False)

    lines += _faithfulness_section(results, frame, summary, out, montages)
    lines += _time_section(frame, out)
    lines += _per_class_section(results, frame, summary, out)
    lines += _ldp_and_audit(frame)
    if context.notes:
        lines += ["## Notes", "", " ".join(context.notes.split()), ""]
    failed = frame[frame["status"] != "finished"]
    if not failed.empty:
        lines += ["## Runs that did not finish", "",
                  markdown_table(failed, ["run_id", "setting", "backend", "seed", "status"]), ""]
    lines += ["## All runs", "",
              "See `runs.csv` (one row per run), `summary.csv` (per setting and backend), "
              "`history.csv` (per epoch) and `per_class.csv`.", ""]
    atomic_write_bytes(report_path, ("\n".join(lines) + "\n").encode("utf-8"))
    return report_path


def command_line() -> str:
    """The command as typed (``dpcompare`` plus its arguments)."""
    args = sys.argv[1:]
    return "dpcompare " + " ".join(args)


__all__ = ["ReportContext", "command_line", "rebuild_report", "render_report",
           "report_montages", "resolve_context", "engines_used", "front_end_mismatches",
           "front_end_sentence", "markdown_table", "per_class_frame", "results_frame",
           "seeds_phrase", "summary_table", "time_ratio_table", "write_report"]
