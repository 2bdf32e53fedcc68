"""The report's section pairing the two backends by seed."""

from __future__ import annotations

import pandas as pd

from compare.reporting import plots
from compare.reporting.headline import compared_recipes
from compare.reporting.labels import difference_label
from compare.reporting.section import ReportData, ReportFigure, SectionOutput, add, section
from compare.reporting.stats import (
    AGREEMENT_TOLERANCE,
    ALPHA,
    MIN_SEEDS,
    few_seeds_reason,
    holm_family_text,
)
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
    and its table with the verdicts (from the Holm-adjusted p-values over the table's
    settings, :func:`compare.reporting.stats.corrected_verdict`); a setting with fewer than
    :data:`MIN_SEEDS` seeds shows every seed's difference instead of an interval and a
    verdict."""
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
    family = holm_family_text(paired)
    compared = difference_label(compared_recipes(frame, paired))
    lines = ["## Backends paired by seed", "",
             f"{compared[0].upper()}{compared[1:]}, test accuracy in percentage points, "
             "paired by seed (the same seed gives both backends the same batches and initial "
             "weights). Interval: 95% t interval of the mean difference, not adjusted (a "
             "difference is not bounded like a mean accuracy); tests: scipy's paired t test "
             f"(`p_value`) and the equivalence test against ±{100 * AGREEMENT_TOLERANCE:g} "
             "point (two one-sided t tests, `equivalence_p`), each Holm-adjusted over this "
             f"report's settings ({family or 'no setting has a test'}: `p_holm`, "
             "`equivalence_p_holm`), so that the verdicts hold together: 'agree' when the "
             f"adjusted equivalence p is below {ALPHA / 2:g} and neither backend has a "
             f"collapsed run, 'differ' when the adjusted p is below {ALPHA:g} (for a single "
             "setting: the 95% interval inside the band, or excluding 0); a setting with "
             f"fewer than {MIN_SEEDS} seeds gets no interval, test or verdict"
             + (f", only every seed's difference{reason}" if few.any() else "") + ".", "",
             *figure,
             markdown_table(shown, ["setting", "pairs", *few_columns,
                                    "mean difference (points)", "95% t interval low",
                                    "95% t interval high", "p_value", "p_holm",
                                    "equivalence_p_holm", "verdict", "collapsed"]), "",
             *([NOISE_PAIRING_NOTE, ""] if paired["noised"].any() else []),
             *([SEED_ONLY_NOTE, ""] if paired["noised"].any() and seed_only(frame) else [])]
    return SectionOutput(lines, {"backends_paired.csv": paired}, figures)


def seed_only(frame: pd.DataFrame) -> bool:
    """True when some DP-SGD run of ``frame`` was recorded without a noise key (its noise
    keyed by the run seed alone)."""
    return "noise_key" in frame and bool((frame["noise_key"] == LEGACY_NOISE_KEY).any())


__all__ = ["NOISE_PAIRING_NOTE", "SEED_ONLY_NOTE", "backends", "seed_only"]
