"""The report's time section: seconds per epoch, DP over non-private, throughput and memory."""

from __future__ import annotations

import math

import pandas as pd

from compare.reporting import plots
from compare.reporting.frames import front_end_mismatches
from compare.reporting.section import ReportData, ReportFigure, SectionOutput, add, section
from compare.reporting.tables import markdown_table
from dpcore.mechanisms import is_non_private


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
        public = group[group["mechanism"].map(is_non_private).astype(bool)]
        if public.empty:
            continue
        plain = float(public.groupby("setting")["epoch_seconds"].median().iloc[0])
        private = group[~group["mechanism"].map(is_non_private).astype(bool)]
        for setting, sub in private.groupby("setting", sort=False):
            dp_time = float(sub["epoch_seconds"].median())
            rows.append({**dict(zip(keys, key, strict=True)), "setting": setting,
                         "seeds": len(sub), "median_epoch_seconds": dp_time,
                         "non_private_median_epoch_seconds": plain,
                         "ratio_to_non_private": dp_time / plain if plain else math.nan})
    return pd.DataFrame(rows)


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


@section("time")
def time_and_memory(data: ReportData) -> SectionOutput:
    """Seconds per epoch (figure), the DP over non-private ratios (``time_ratios.csv``), the
    medians of time, throughput and peak memory per setting and backend."""
    frame = data.frame
    tables: dict[str, pd.DataFrame] = {}
    figures: list[ReportFigure] = []
    lines = ["## Time", "",
             "Seconds per epoch (first epoch excluded), **median over seeds**, measured on this "
             "machine in the runs this report lists (other jobs may have shared the CPU).", ""]
    if add(figures, "epoch_time.png", plots.epoch_time_figure(frame)):
        lines += ["![seconds per epoch](epoch_time.png)", ""]
    mismatches = front_end_mismatches(frame)
    if not mismatches.empty:
        lines += [front_end_sentence(mismatches), ""]
    ratios = time_ratio_table(frame)
    if not ratios.empty:
        tables["time_ratios.csv"] = ratios
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
    lines += [markdown_table(medians), "", memory_sentence(done), ""]
    return SectionOutput(lines, tables, figures)


def memory_sentence(done: pd.DataFrame) -> str:
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


__all__ = ["front_end_sentence", "memory_sentence", "time_and_memory", "time_ratio_table"]
