"""The report's "Gap attribution" section: table, bar chart and written conclusion.

Shown when the runs differ in recipe or in a factor
(:func:`compare.reporting.attribution.has_recipe_axis`). Writes ``attribution.csv`` (one row
per configuration), ``attribution_effects.csv`` (one row per bar) and ``attribution.png``
next to the report. Input the attribution cannot use (a missing baseline, an unknown factor)
gives a one-paragraph message in the section instead of figures; the rest of the report is
written as usual.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from compare.reporting.attribution import (
    Attribution,
    AttributionError,
    Effect,
    attribute,
    configurations,
    describe_change,
    harmonised_defaults,
    has_recipe_axis,
)
from compare.reporting.attribution_text import conclusion
from compare.reporting.claims_section import claims_section
from compare.reporting.labels import what_ran
from compare.reporting.section import ReportData, SectionOutput, saved_figure, section
from compare.reporting.stats import CONFIDENCE
from compare.reporting.tables import fmt, markdown_table
from dpcore.io import atomic_path
from dpcore.recipes import CLAIMED_NOT_PROVED
from dpcore.results import RunResult

#: Bar colours: counted toward the gap, moving accuracy but not along the gap, within its
#: interval, and the stock-recipe comparisons.
COLOURS = {"counted": "#2ca02c", "aside": "#ff7f0e", "within": "#9e9e9e", "stock": "#1f77b4"}


def configuration_table(a: Attribution) -> tuple[pd.DataFrame, list[str]]:
    """One row per configuration, and the numbered privacy reasons its ``privacy`` column
    cites as ``[n]``."""
    reasons: list[str] = []
    rows = []
    for c in a.configurations:
        refs = []
        for reason in c.reasons:
            if reason not in reasons:
                reasons.append(reason)
            refs.append(f"[{reasons.index(reason) + 1}]")
        i = c.interval
        rows.append({
            "configuration": c.setting, "what ran": what_ran(c.backend, c.recipe),
            "recipe": c.recipe, "trainer": c.trainer or "–",
            "factors changed (vs harmonised)": describe_change(c.factors,
                                                               harmonised_defaults(c.backend)),
            "split": c.split, "seeds": i.n,
            "accuracy %": _pct(i.mean), "95% CI low": _pct(i.low), "95% CI high": _pct(i.high),
            "epsilon (shared, RDP, as run)": fmt(c.epsilon_shared),
            "epsilon proved": fmt(c.epsilon_proved) if c.epsilon_proved is not None
            else f"none ({c.proved_note})" if c.proved_note else "none",
            "library's own epsilon": "; ".join(f"{k}: {v:.4g}" for k, v in
                                               c.library_epsilon.items()) or "–",
            "privacy": c.claim + (" " + "".join(refs) if refs else ""),
            "collapsed seeds": c.collapsed or "",
        })
    return pd.DataFrame(rows), reasons


def effects_table(a: Attribution) -> pd.DataFrame:
    """One row per bar of the chart: label, what changes, mean, 95% interval (accuracy
    points), seeds, paired or not, significant, counted toward the gap, and why not."""
    counted = {id(e) for e in a.counted}
    rows = []
    for e in _bars(a):
        rows.append({"effect": e.label, "changes": e.changed,
                     "mean (points)": 100 * e.interval.mean,
                     "95% CI low": 100 * e.interval.low, "95% CI high": 100 * e.interval.high,
                     "seeds": e.interval.n,
                     "pairing": "paired by seed" if e.paired else "unpaired (Welch)",
                     "moves accuracy": e.significant,
                     "counted toward the gap": id(e) in counted,
                     "direction": {1: "toward TF Privacy", -1: "toward Opacus"}.get(
                         e.direction, "–" if e.kind == "stock" else "neither"),
                     "not counted because": "" if id(e) in counted or e.kind == "stock" else (
                         e.why_not or "its interval crosses 0")})
    return pd.DataFrame(rows)


def effects_figure(a: Attribution) -> Figure | None:
    """Horizontal bars: each effect's mean accuracy change (points) with its 95% interval;
    None when there is no effect to draw."""
    bars = _bars(a)
    if not bars:
        return None
    counted = {id(e) for e in a.counted}
    # factor bars: "<setting> (<library>)" over what it changes (the axis label says that
    # each is measured against the harmonised baseline)
    labels = [textwrap.fill(e.label.replace(" − harmonised", ""), 52) + "\n"
              + textwrap.fill(e.changed, 52) if e.kind == "factor" else e.label for e in bars]
    lines_per_bar = max(label.count("\n") + 1 for label in labels)
    step = 0.2 + 0.16 * lines_per_bar  # inches per bar: wrapped labels never overlap
    fig = Figure(figsize=(10.5, 1.6 + step * len(bars)), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    ys = list(range(len(bars)))[::-1]
    for y, e in zip(ys, bars, strict=True):
        i = e.interval
        kind = ("stock" if e.kind == "stock" else "counted" if id(e) in counted
                else "aside" if e.significant else "within")
        ax.barh(y, 100 * i.mean, color=COLOURS[kind], height=0.6)
        if i.n >= 2 and not math.isnan(i.low):
            ax.errorbar(100 * i.mean, y, xerr=[[100 * (i.mean - i.low)],
                                               [100 * (i.high - i.mean)]],
                        fmt="none", ecolor="black", capsize=3, lw=1)
    ax.axvline(0, color="black", lw=0.8)
    n_factors = sum(e.kind == "factor" for e in bars)
    if 0 < n_factors < len(bars):  # a rule between the factor bars and the stock comparisons
        ax.axhline(len(bars) - n_factors - 0.5, color="grey", lw=0.8, ls="--")
    ax.set_yticks(ys, labels, fontsize=7.5)
    ax.set_ylim(-0.6, len(bars) - 0.4)
    ax.set_xlabel(f"accuracy change, percentage points (mean, {100 * CONFIDENCE:g}% CI over "
                  "seeds)\nfactors: against the harmonised baseline of their framework,\n"
                  "paired by seed where both share batches and initial weights")
    ax.grid(axis="x", alpha=0.3)
    fig.legend(handles=[
        Patch(color=COLOURS["counted"], label="factor along the gap, interval excludes 0"),
        Patch(color=COLOURS["aside"], label="factor, interval excludes 0, not along the gap"),
        Patch(color=COLOURS["within"], label="factor, interval crosses 0 (or one seed)"),
        Patch(color=COLOURS["stock"], label="stock recipes compared")],
        loc="outside lower center", ncols=2, fontsize=8, frameon=False)
    return fig


def plot_effects(a: Attribution, path: Path) -> bool:
    """Write :func:`effects_figure` as a PNG; False when there is nothing to draw."""
    fig = effects_figure(a)
    if fig is None:
        return False
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    return True


def attribution_section(results: Sequence[RunResult], published: Sequence[Mapping[str, Any]]
                        ) -> SectionOutput:
    """"Gap attribution": its lines, ``attribution.csv``, ``attribution_effects.csv`` and
    ``attribution.png`` (empty when the runs have no recipe/factor axis)."""
    if not has_recipe_axis(results):
        return SectionOutput()
    lines = ["## Gap attribution: which difference between the stock recipes matters", "",
             "Each library run as its tutorials run it (`recipe: library`), the harmonised "
             "recipe, and the harmonised recipe with factors changed toward one library's "
             "default. Roles are read from the runs' configs: the *baseline* of a framework is "
             "its harmonised run with every factor at its default, a *stock* recipe is a "
             "library run measured on the test set.", ""]
    try:
        a = attribute(configurations(results), published)
    except AttributionError as exc:
        return SectionOutput([*lines, f"**Not computed:** {exc}.", ""])
    table, reasons = configuration_table(a)
    effects = effects_table(a)
    tables = {"attribution.csv": table, "attribution_effects.csv": effects}
    lines += ["Configurations (accuracy in %, mean and 95% percentile bootstrap interval over "
              "seeds; epsilon: the shared accountant on the sampling rate and steps that ran, "
              "beside the library's own accountant where the run recorded it):", "",
              markdown_table(table), ""]
    if reasons:
        lines += [f"Why a setting is \"{CLAIMED_NOT_PROVED}\" (its epsilon is reported, not "
                  "refused):", "", *[f"{n}. {r}" for n, r in enumerate(reasons, 1)], ""]
    fig = effects_figure(a)
    # its digest was never recorded (records/figures.json stays as committed reports have it)
    figures = [] if fig is None else [saved_figure("attribution.png", fig, digest=False)]
    if figures:
        lines += ["Accuracy change of each factor against the harmonised baseline of the same "
                  "framework (paired by seed where one seed gives both the same batches and "
                  "initial weights, else unpaired: the table's `pairing` column), and the stock "
                  "recipes compared:", "",
                  "![gap attribution](attribution.png)", ""]
    lines += [markdown_table(effects), "", "### Conclusion", "",
              *[p + "\n" for p in conclusion(a)]]
    return SectionOutput(lines, tables, figures)


@section("attribution")
def attribution(data: ReportData) -> SectionOutput:
    """Gap attribution (:func:`attribution_section`) when the runs have a recipe/factor axis,
    else the privacy claims of library recipes
    (:func:`compare.reporting.claims_section.claims_section`)."""
    out = attribution_section(data.results, data.context.published)
    return out if out.lines else SectionOutput(claims_section(data.results))


def _bars(a: Attribution) -> list[Effect]:
    return [*a.factor_effects, *a.stock_effects, *([a.gap] if a.gap else [])]


def _pct(value: float) -> str:
    return "–" if math.isnan(value) else f"{100 * value:.2f}"


__all__ = ["attribution", "attribution_section", "configuration_table", "effects_figure",
           "effects_table", "plot_effects"]
