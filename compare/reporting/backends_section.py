"""The report's section pairing the two backends by seed."""

from __future__ import annotations

import pandas as pd

from compare.reporting import plots
from compare.reporting.section import ReportData, ReportFigure, SectionOutput, add, section
from compare.reporting.stats import AGREEMENT_TOLERANCE, MIN_SEEDS, few_seeds_reason
from compare.reporting.tables import markdown_table
from dpcore.noise_key import LEGACY_NOISE_KEY

#: Why a DP-SGD pair of one seed still differs, and how far its verdicts can be trusted.
NOISE_PAIRING_NOTE = (
    "Under DP-SGD a pair shares the batches and initial weights but not the noise: each "
    "backend draws it from its own generator (TensorFlow's and torch's, both keyed by the "
    "run's noise key), so the difference includes the effect of two independent noise draws, "
    "which on a noise-dominated model can move test accuracy by several points either way. "
    "A 'differ' verdict from a few seeds is a reason to run more seeds before reading it as a "
    "difference between the libraries.")

#: Added when some DP-SGD run's record has no ``privacy.noise_key`` (its noise keyed by the seed).
SEED_ONLY_NOTE = (
    "Runs recorded without a noise key drew their noise from the run seed alone: one seed's "
    "noise stream is the same draws, scaled, at every epsilon, so the DP settings of one "
    "data set are not independent tests (a run's key now mixes in its config hash).")


@section("backends")
def backends(data: ReportData) -> SectionOutput:
    """The backends paired by seed: the figure of every seed's pair, ``backends_paired.csv``
    and its table with the verdicts; a setting with fewer than :data:`MIN_SEEDS` seeds shows
    every seed's difference instead of an interval and a verdict."""
    paired, frame = data.paired, data.frame
    if paired.empty:
        return SectionOutput()
    few = paired["pairs"] < MIN_SEEDS
    figure: list[str] = []
    figures: list[ReportFigure] = []
    if add(figures, "backends_paired.png",
           plots.paired_differences_figure(frame, AGREEMENT_TOLERANCE)):
        notes = [f"a hollow mean without an interval below {MIN_SEEDS} seeds"
                 if (few & (paired["pairs"] >= 2)).any() else "",
                 "a setting of one seed: its dot alone" if (paired["pairs"] < 2).any() else ""]
        figure = ["Every seed's pair (grey) and the mean difference with its 95% t interval "
                  "(black" + "".join(f"; {n}" for n in notes if n)
                  + "), one panel per data set:", "",
                  "![paired differences](backends_paired.png)", ""]
    shown = paired.assign(**{
        "mean difference (points)": 100 * paired["mean_difference"],
        "95% t interval low": 100 * paired["ci_low"],
        "95% t interval high": 100 * paired["ci_high"],
        "per-seed differences (points)": paired["seed_differences"]})
    few_columns = ["per-seed differences (points)"] if few.any() else []
    reason = ""
    if few.any() and int(paired.loc[few, "pairs"].max()) >= 2:
        reason = f" ({few_seeds_reason(int(paired.loc[few, 'pairs'].max()))})"
    lines = ["## Backends paired by seed", "",
             "Opacus (torch) minus TF Privacy (tf) test accuracy, in percentage points, paired "
             "by seed (the same seed gives both backends the same batches and initial weights). "
             "Interval: 95% t interval of the mean difference (a difference is not bounded "
             "like a mean accuracy); test: scipy's paired t test; "
             f"verdict 'agree' only when the interval lies inside ±{100 * AGREEMENT_TOLERANCE:g}"
             " point and neither backend has a collapsed run, 'differ' when it excludes 0; "
             f"a setting with fewer than {MIN_SEEDS} seeds gets no interval, test or verdict"
             + (f", only every seed's difference{reason}" if few.any() else "") + ".", "",
             *figure,
             markdown_table(shown, ["setting", "pairs", *few_columns,
                                    "mean difference (points)", "95% t interval low",
                                    "95% t interval high", "p_value", "verdict",
                                    "collapsed"]), "",
             *([NOISE_PAIRING_NOTE, ""] if paired["noised"].any() else []),
             *([SEED_ONLY_NOTE, ""] if paired["noised"].any() and seed_only(frame) else [])]
    return SectionOutput(lines, {"backends_paired.csv": paired}, figures)


def seed_only(frame: pd.DataFrame) -> bool:
    """True when some DP-SGD run of ``frame`` was recorded without a noise key (its noise
    keyed by the run seed alone)."""
    return "noise_key" in frame and bool((frame["noise_key"] == LEGACY_NOISE_KEY).any())


__all__ = ["NOISE_PAIRING_NOTE", "SEED_ONLY_NOTE", "backends", "seed_only"]
