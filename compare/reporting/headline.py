"""The report's opening sentences (2-4), generated from its numbers only."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pandas as pd

from compare.reporting.labels import difference_label
from compare.reporting.privacy_section import honest, privacy_sentence
from compare.reporting.section import ReportData, SectionOutput, section
from compare.reporting.selection_text import selection_sentence
from compare.reporting.stats import (
    AGREEMENT_TOLERANCE,
    ALPHA,
    MIN_SEEDS,
    few_seeds_reason,
    holm_family_text,
    mean_interval,
    verdict_word,
)
from dpcore.mechanisms import is_non_private, noises_gradients
from dpcore.results import RunResult


def backend_sentence(paired: pd.DataFrame, tolerance: float = AGREEMENT_TOLERANCE,
                     recipes: Iterable[str] = ()) -> str:
    """How the backends compare on test accuracy, from
    :func:`compare.reporting.stats.paired_backend_table` output: verdicts from the settings
    with at least :data:`MIN_SEEDS` paired seeds, Holm-adjusted over the table's settings
    (:func:`compare.reporting.stats.corrected_verdict`), and for the others (no interval, no
    verdict) why not and the range of their seeds' differences. ``recipes``: the recipes of
    the compared runs, so that the sentence names what ran
    (:func:`compare.reporting.labels.difference_label`)."""
    if paired.empty:
        return "The two backends were not both run on any setting, so they are not compared."
    compared = difference_label(recipes)
    collapsed = _collapsed_clause(paired)
    if int(paired["pairs"].max()) < 2:
        worst = paired.loc[paired["mean_difference"].abs().idxmax()]
        return (f"Each setting has one seed, so no interval can be given for the backend "
                f"difference: {compared}, test accuracy ranges over "
                f"{_pts(paired['mean_difference'].min())} to "
                f"{_pts(paired['mean_difference'].max())} points across {len(paired)} "
                f"setting{'s' if len(paired) != 1 else ''} (largest in {worst['setting']!r})"
                f"{collapsed}.")
    few = paired[paired["pairs"] < MIN_SEEDS]
    if len(few) == len(paired):
        return _few_seeds_sentence(paired, compared) + f"{collapsed}."
    enough = paired[paired["pairs"] >= MIN_SEEDS]
    words = enough["verdict"].map(verdict_word)
    parts = [f"{int((words == word).sum())} {word}" for word in
             ("agree", "differ", "inconclusive") if (words == word).any()]
    few_clause = "" if few.empty else (
        f"; {len(few)} setting{'s' if len(few) != 1 else ''} with fewer than {MIN_SEEDS} "
        f"seeds get{'s' if len(few) == 1 else ''} no interval and no verdict (every seed's "
        "difference is in the paired table)")
    worst = enough.loc[enough["mean_difference"].abs().idxmax()]
    collapsed_note = ("; never 'agree' with a collapsed run"
                      if "collapsed" in paired and (paired["collapsed"].fillna("") != "").any()
                      else "")
    family = holm_family_text(paired)
    p_text = "" if math.isnan(worst["p_value"]) else (
        f", paired t test p = {worst['p_value']:.2g}, Holm-adjusted "
        f"{worst['p_holm']:.2g}")
    own_noise = _own_noise_clause(paired)
    return (f"Paired by seed (same sampler and initial weights{own_noise}), {compared}, test "
            f"accuracy over {len(paired)} setting{'s' if len(paired) != 1 else ''}: "
            f"{', '.join(parts)} (corrected for the report's comparisons, {family}: agree = "
            f"the equivalence test against ±{100 * tolerance:g} point below {ALPHA / 2:g}, "
            f"differ = the paired t test below {ALPHA:g}, each Holm-adjusted; for one "
            f"setting, the 95% t interval inside the band, or excluding 0{collapsed_note})"
            f"{few_clause}; the largest mean difference is "
            f"{_pts(worst['mean_difference'])} points in {worst['setting']!r} (95% t interval "
            f"{_pts(worst['ci_low'])} to {_pts(worst['ci_high'])}{p_text}, "
            f"{int(worst['pairs'])} seeds){collapsed}.")


def _few_seeds_sentence(paired: pd.DataFrame, compared: str) -> str:
    """The headline's backend sentence when every setting has 2 to :data:`MIN_SEEDS` - 1
    paired seeds: no interval and why, the range of the seeds' differences (no final stop);
    ``compared`` names what the difference is (:func:`~compare.reporting.labels.
    difference_label`)."""
    n = int(paired["pairs"].max())
    counts = sorted(set(int(p) for p in paired["pairs"]))
    seeds = (f"{counts[0]}" if len(counts) == 1 else f"{counts[0]} to {counts[-1]}")
    worst = paired.loc[paired["mean_difference"].abs().idxmax()]
    own_noise = _own_noise_clause(paired)
    return (f"Paired by seed (same sampler and initial weights{own_noise}), every setting has "
            f"{seeds} seed{'s' if n != 1 else ''} on both backends, fewer than the {MIN_SEEDS} "
            f"an interval of the backend difference needs ({few_seeds_reason(n)}), so no "
            f"interval and no verdict is given: {compared}, test accuracy per seed "
            f"ranges over {_pts(paired['min_difference'].min())} to "
            f"{_pts(paired['max_difference'].max())} points across {len(paired)} "
            f"setting{'s' if len(paired) != 1 else ''} (largest mean difference "
            f"{_pts(worst['mean_difference'])} in {worst['setting']!r}; every seed's "
            "difference is in the paired table)")


def _own_noise_clause(paired: pd.DataFrame) -> str:
    """``"; under DP-SGD each backend draws its own noise"`` when a compared setting is
    DP-SGD with each backend's own noise (:func:`~compare.reporting.stats.
    paired_backend_table`'s ``noised``), else ""."""
    return ("; under DP-SGD each backend draws its own noise"
            if "noised" in paired and paired["noised"].any() else "")


def _collapsed_clause(paired: pd.DataFrame) -> str:
    """``"; N of these M settings have a collapsed run ..."``: how many compared settings have one
    (a difference between collapsed models says nothing about the backends); "" for none."""
    if "collapsed" not in paired:
        return ""
    n = int((paired["collapsed"].fillna("").astype(str) != "").sum())
    if not n:
        return ""
    if n == len(paired):
        return ("; every one of them has a collapsed run, so these differences are between "
                "collapsed models and say nothing about the backends")
    return (f"; {n} of these {len(paired)} settings have a collapsed run (see the "
            "'collapsed' column): their differences are between collapsed models")


def privacy_cost_sentence(frame: pd.DataFrame) -> str | None:
    """Per panel: the best DP-SGD setting's test accuracy against the non-private one, each
    backend apart (means over seeds). A panel with several non-private settings (the same
    model without noise, and a model tuned without privacy) names each, never pools them."""
    done = frame[(frame["status"] == "finished") & frame["accuracy"].notna()]
    parts = []
    for panel, group in done.groupby("panel", sort=False):
        dp = group[group["mechanism"].map(noises_gradients).astype(bool)]
        public = group[group["mechanism"].map(is_non_private).astype(bool)]
        if dp.empty or public.empty:
            continue
        best = dp.groupby("point")["accuracy"].mean().idxmax()
        points = list(dict.fromkeys(public["point"]))
        figures = []
        for backend in sorted(set(group["backend"])):
            dp_runs = dp[(dp["point"] == best) & (dp["backend"] == backend)]
            dp_i = mean_interval(dp_runs["accuracy"].to_numpy(float))
            references = []
            for point in points:
                np_runs = public[(public["backend"] == backend) & (public["point"] == point)]
                np_i = mean_interval(np_runs["accuracy"].to_numpy(float))
                if np_i.n:
                    notes = [point] if len(points) > 1 else []
                    notes += ["collapsed"] if _any_collapsed(np_runs) else []
                    references.append(f"{np_i.mean:.3f}"
                                      + (f" ({', '.join(notes)})" if notes else ""))
            if dp_i.n and references:
                mark = " (collapsed)" if _any_collapsed(dp_runs) else ""
                figures.append(f"{backend} {dp_i.mean:.3f}{mark} vs {', '.join(references)}")
        if figures:
            parts.append(f"on {panel} the best DP-SGD setting ({best}) reaches "
                         f"{', '.join(figures)} non-private test accuracy")
    if not parts:
        return None
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + " (means over seeds)."


def _any_collapsed(runs: pd.DataFrame) -> bool:
    return "collapsed" in runs and bool(runs["collapsed"].astype(bool).any())


def collapse_sentence(frame: pd.DataFrame) -> str:
    """How many finished runs collapsed (almost one class predicted, or at chance: accuracy
    not above the majority rate by a one-sided binomial test,
    :mod:`compare.reporting.collapse`), and which settings."""
    done = frame[frame["status"] == "finished"]
    bad = done[done["collapsed"]]
    if bad.empty:
        return (f"None of the {len(done)} finished runs collapsed (to one class, or to chance: "
                "not above the majority-class rate by a one-sided binomial test at 5%).")
    settings = list(dict.fromkeys(f"{s} ({b})" for s, b in zip(bad["setting"], bad["backend"],
                                                                 strict=True)))
    more = len(settings) - 6
    shown = "; ".join(settings[:6]) + (f"; and {more} more settings (see the tables)"
                                       if more > 0 else "")
    return (f"{len(bad)} of {len(done)} finished runs collapsed (to almost one class, or to "
            "chance: not above the majority-class rate by a one-sided binomial test at 5%) and "
            f"are marked 'collapsed' throughout: {shown}.")


def compared_recipes(frame: pd.DataFrame, paired: pd.DataFrame) -> list[str]:
    """The recipes of the runs of the settings ``paired`` compares (``frame``'s ``recipe``)."""
    if frame.empty or paired.empty or "recipe" not in frame:
        return []
    runs = frame[frame["setting"].isin(set(paired["setting"]))]
    return sorted(set(runs["recipe"].astype(str)))


def headline(frame: pd.DataFrame, paired: pd.DataFrame,
             selection: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
             results: Sequence[RunResult] = ()) -> list[str]:
    """The 2-5 opening sentences; ``selection``: the report context's selection block (the
    epsilon including the selection of the hyper-parameters, or that it is not accounted,
    :mod:`compare.reporting.selection_text`) of the runs ``results``."""
    sentences = [backend_sentence(paired, recipes=compared_recipes(frame, paired))]
    privacy = privacy_sentence(frame) if "epsilon_proved" in frame else None
    if privacy:  # claimed | proved | audited (compare.reporting.privacy_section)
        sentences.append(privacy)
    chosen = selection_sentence(selection, results)
    if chosen:
        sentences.append(chosen)
    cost = privacy_cost_sentence(honest(frame))  # deliberately broken runs left out
    if cost:
        sentences.append(cost)
    sentences.append(collapse_sentence(frame))
    return sentences


def _pts(value: float) -> str:
    return f"{100 * float(value):+.2f}"


@section("headline")
def headline_section(data: ReportData) -> SectionOutput:
    """The headline: the generated sentences (:func:`headline`), then the reproduction
    verdicts against the papers the grid reproduces (each published table's cell verdicts,
    each trend's: :mod:`compare.reporting.published_section`), as one paragraph."""
    from compare.reporting.published_section import cells_headline, trend_headline

    sentences = headline(data.frame, data.paired, data.context.selection, data.results)
    published = data.context.published
    extra = [s for s in (cells_headline(published, data.frame),
                         trend_headline(published, data.frame)) if s]
    return SectionOutput(["## Headline", "", " ".join([*sentences, *extra]), ""])

__all__ = ["backend_sentence", "collapse_sentence", "headline", "headline_section",
           "privacy_cost_sentence"]
