"""The report's PNG figures, drawn with matplotlib's object API (Agg, no pyplot state).

Each ``*_figure`` function returns the drawn figure (None when there is nothing to draw) and
writes nothing: a report section returns it and the report writer saves it; ``plot_*`` draws
and saves one at once (:func:`save_figure`).

Every figure has one panel per value of the run table's ``panel`` column (data set and every
grid axis but the swept one; :mod:`compare.reporting.frames`), so nothing is pooled across
data sets, models, epochs or clip norms. Curves show the mean over seeds with its 95% percentile
bootstrap interval (seeded; never outside the metric's range), paired differences their 95% t
interval (:mod:`compare.reporting.stats`). Collapsed runs (:mod:`compare.reporting.collapse`)
are drawn with an "x" and named in the legend; in the figures of a faithfulness metric, a
setting whose explanations fail the model-randomisation check (a run of it whose Grad-CAM maps
did not change when the model was re-initialised) is circled and named in the legend, so it is
not read as interpretability.
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, MaxNLocator, NullLocator

from compare.figdigest import note_figure
from compare.reporting.frames import FAITHFULNESS_KEYS, front_end_mismatches
from compare.reporting.stats import (
    MIN_SEEDS,
    Interval,
    bootstrap_interval,
    mean_interval,
    seed_pairs,
)
from compare.reporting.styles import label_of, marker_of
from dpcore.io import atomic_path
from dpcore.mechanisms import is_non_private, noises_gradients

PANEL_INCHES = (4.6, 3.4)
DPI = 110
BACKEND_COLOURS = {"tf": "#1f77b4", "torch": "#d62728"}
#: Axis label of each swept variable.
X_LABELS = {"epsilon": "epsilon (shared accountant, RDP; log scale)",
            "max_grad_norm": "clip norm C (log scale)"}
#: Smallest ratio of a panel's largest to its smallest swept value for the panel to be a curve:
#: values closer than this are one privacy level to a reader (epsilon 6.92, 6.93 and 6.98 of
#: three recipes run for the same epochs), and their tick labels overlap on the log axis.
CURVE_MIN_SPAN = 1.5
#: Smallest ratio between two labelled ticks of the log x axis (closer ticks stay unlabelled).
TICK_MIN_RATIO = 1.15
#: Legend entry of the ring drawn around a faithfulness point whose explanations fail the check.
FAILS_CHECK_LABEL = "fails the randomisation check (not interpretability)"


def fails_randomisation(runs: pd.DataFrame, metric: str) -> bool:
    """Whether ``metric`` is a Grad-CAM faithfulness figure and a run of ``runs`` fails the
    model-randomisation check (its maps did not change with the model)."""
    return (metric in FAITHFULNESS_KEYS and "randomisation_check" in runs
            and bool((runs["randomisation_check"] == "fails").any()))


def _ring(ax: Axes, xs: Sequence[float], ys: Sequence[float]) -> None:
    """Circle the points whose explanations fail the randomisation check."""
    ax.scatter(list(xs), list(ys), marker="o", s=190, facecolors="none", edgecolors="black",
               linewidths=1.1, zorder=6, label=FAILS_CHECK_LABEL)


def swept_variable(frame: pd.DataFrame) -> str:
    """The x variable of the privacy-utility plots: ``max_grad_norm`` when the clip norm varies
    among the DP-SGD runs of a panel while the target epsilon does not, else ``epsilon``."""
    dp = frame[frame["mechanism"].map(noises_gradients).astype(bool)]
    for _, group in dp.groupby("panel"):
        if group["max_grad_norm"].nunique() > 1 and group["target_epsilon"].nunique() <= 1:
            return "max_grad_norm"
    return "epsilon"


def _figure(n_panels: int, rows: int = 1, legend_width: float = 2.2) -> tuple[Figure, list]:
    cols = max(1, n_panels)
    fig = Figure(figsize=(PANEL_INCHES[0] * cols + legend_width, PANEL_INCHES[1] * rows),
                 layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False)
    return fig, axes


def _save(fig: Figure, path: Path) -> None:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=DPI)
    note_figure(fig, path)  # the plotted data's digest, for the report's records


def _wrap(text: str, width: int = 38) -> str:
    return "\n".join(textwrap.wrap(str(text), width)) or str(text)


def _row_inches(labels: Iterable[str]) -> float:
    """Height of one row of a figure with settings on the y axis (labels wrapped at 22
    characters): as tall as the longest label (8 pt lines, about 0.15 in each), at least
    0.45 in, so that wrapped labels never run into each other."""
    lines = max((_wrap(label, 22).count("\n") + 1 for label in labels), default=1)
    return max(0.45, 0.15 * lines + 0.12)


def _legend(fig: Figure, axes: Sequence[Axes]) -> None:
    """One legend for the figure, right of the panels, without duplicate labels."""
    seen: dict[str, object] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            seen.setdefault(label, handle)
    if seen:
        fig.legend(list(seen.values()), list(seen.keys()), loc="outside right upper",
                   fontsize=7, frameon=False)


def _baselines(ax: Axes, group: pd.DataFrame, metric: str, x_is_numeric: bool) -> None:
    """Non-private reference (per backend; one line style per non-private setting, never
    pooled across settings; its legend entry says "collapsed" when one of its runs did, so a
    constant model's Average Drop of 0 is not read as a faithful one, and "fails the
    randomisation check" when a run's explanations do) and majority-class rate (dotted,
    grey)."""
    public = group[group["mechanism"].map(is_non_private).astype(bool)]
    points = list(dict.fromkeys(public["point"]))
    styles = ("--", "-.", (0, (5, 1, 1, 1, 1, 1)))
    for j, point in enumerate(points):
        runs_of_point = public[public["point"] == point]
        name = "non-private" if len(points) == 1 else str(point)
        for k, (backend, runs) in enumerate(runs_of_point.groupby("backend")):
            interval = mean_interval(runs[metric].to_numpy(float))
            flags = [flag for flag, raised in (
                ("collapsed", bool(runs["collapsed"].any())),
                ("fails the randomisation check", fails_randomisation(runs, metric))) if raised]
            if interval.n:  # the first backend wider and paler, so equal lines stay visible
                ax.axhline(interval.mean, linestyle=styles[j % len(styles)],
                           linewidth=2.6 if k == 0 else 1.2, alpha=0.5 if k == 0 else 1.0,
                           color=BACKEND_COLOURS.get(str(backend), "black"),
                           label=f"{backend} {name} ({', '.join(['mean', *flags])})")
    if metric in ("accuracy",) and group["majority_rate"].notna().any():
        ax.axhline(float(group["majority_rate"].dropna().iloc[0]), linestyle=":",
                   color="grey", linewidth=1.2, label="majority-class rate")


def metric_vs_swept_figure(frame: pd.DataFrame, metric: str, ylabel: str) -> Figure | None:
    """``metric`` against the swept variable (epsilon or clip norm), one panel per data set /
    grid axis, one line per backend and DP mechanism (mean, 95% percentile bootstrap
    interval over seeds as error bars),
    with the panel's non-private reference and, for accuracy, the majority-class rate.

    A panel is drawn only if it is a curve of that variable: each value of it holds one
    setting per backend and mechanism, and its values span at least a factor
    :data:`CURVE_MIN_SPAN`. A panel whose settings share a value (the factor flips of
    ``mnist-gap-attribution`` all spend epsilon 3.44; the two models of ``mnist-tuned`` spend
    epsilon 3) would pool different settings into one point, and a panel of one value (or of
    values as close as 6.92 and 6.98) is a point, not a curve: both are left out
    (:func:`by_setting_figure` shows them). None if no panel is left.
    """
    panels = curve_panels(frame, metric)
    if not panels:
        return None
    data, x = _with_metric(frame, metric)
    data = data[data["panel"].isin(panels)]
    fig, axes = _figure(len(panels))
    for ax, panel in zip(axes[0], panels, strict=True):
        group = data[data["panel"] == panel]
        private = group[group["mechanism"].map(noises_gradients).astype(bool)
                        & np.isfinite(group[x])]
        backends = sorted(set(private["backend"]))
        for (backend, mechanism), runs in private.groupby(["backend", "mechanism"]):
            # backends dodged by +/-3% along the log x axis, so equal points stay visible
            dodge = 1.0 + 0.03 * (backends.index(backend) - (len(backends) - 1) / 2)
            points = []
            for value, sub in runs.groupby(_swept_value_key(runs[x])):
                interval = bootstrap_interval(sub[metric].to_numpy(float))
                points.append((float(value) * dodge, interval, bool(sub["collapsed"].any()),
                               fails_randomisation(sub, metric)))
            xs = [p[0] for p in points]
            means = [p[1].mean for p in points]
            err = np.array([p[1].error_bar() for p in points]).T  # [2, n]: below, above
            colour = BACKEND_COLOURS.get(str(backend), "black")
            ax.errorbar(xs, means, yerr=err, color=colour, capsize=3, linewidth=1.4,
                        marker=marker_of(mechanism), markersize=5,
                        label=f"{backend} {label_of(mechanism)}")
            bad = [(p[0], p[1].mean) for p in points if p[2]]
            if bad:
                ax.scatter(*zip(*bad, strict=True), marker="x", s=90, color="black",
                           zorder=5, label="collapsed run")
            failing = [(p[0], p[1].mean) for p in points if p[3]]
            if failing:
                _ring(ax, *zip(*failing, strict=True))
        _baselines(ax, group, metric, True)
        ticks = sorted(set(_swept_value_key(private[x])))
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticklabels(_tick_labels(ticks), fontsize=8)
        ax.set_xlabel(X_LABELS[x], fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.set_title(_wrap(panel), fontsize=9)
        ax.grid(True, alpha=0.3)
    _legend(fig, list(axes[0]))
    return fig


def curve_panels(frame: pd.DataFrame, metric: str) -> list[str]:
    """The panels :func:`metric_vs_swept_figure` draws for ``metric``, in natural order: those
    whose DP-SGD runs with the metric form a curve of the swept variable (one setting per
    value, per backend and mechanism; values spanning at least :data:`CURVE_MIN_SPAN`). The
    other panels are for :func:`by_setting_figure`."""
    data, x = _with_metric(frame, metric)
    dp = data[data["mechanism"].map(noises_gradients).astype(bool) & np.isfinite(data[x])]
    return natural_order(panel for panel, group in dp.groupby("panel")
                         if _settings_per_value(group, x) <= 1
                         and _span(group[x]) >= CURVE_MIN_SPAN)


def not_curve_rows(frame: pd.DataFrame, metric: str) -> pd.DataFrame:
    """The rows of ``frame`` that :func:`metric_vs_swept_figure` does not draw for ``metric``
    (a by-setting figure shows them, so no data set or setting goes unplotted): every row of
    a panel it leaves out, and in the panels it draws, the runs that are neither on the curve
    nor its non-private reference (local-DP runs, which spend no central epsilon)."""
    if frame.empty:
        return frame
    panels = curve_panels(frame, metric)
    _, x = _with_metric(frame, metric)
    on_curve = (frame["mechanism"].map(noises_gradients).astype(bool)
                & np.isfinite(frame[x].astype(float)))
    reference = frame["mechanism"].map(is_non_private).astype(bool)
    return frame[~frame["panel"].isin(panels) | ~(on_curve | reference)]


def _with_metric(frame: pd.DataFrame, metric: str) -> tuple[pd.DataFrame, str]:
    """The finished runs that have ``metric``, and the swept variable of their figures
    (:func:`swept_variable`; ``epsilon`` when there are none)."""
    data = frame[(frame["status"] == "finished") & frame[metric].notna()]
    return data, swept_variable(data) if not data.empty else "epsilon"


def _swept_value_key(values: pd.Series) -> pd.Series:
    """Each value of the swept variable to 3 significant digits, the precision of the x tick
    labels: calibrated epsilons of one target differ in their last digits (2.99995 and
    2.99999 for two models calibrated to epsilon 3) and are one value of the curve."""
    return values.astype(float).map(lambda v: float(f"{v:.3g}"))


def _span(values: pd.Series) -> float:
    """Largest over smallest positive value of the swept variable (1.0 for a single value)."""
    positive = _swept_value_key(values[np.isfinite(values.astype(float))])
    positive = positive[positive > 0]
    return float(positive.max() / positive.min()) if len(positive) else 1.0


def _tick_labels(ticks: Sequence[float]) -> list[str]:
    """Each tick's value to 3 significant digits; a tick within a factor
    :data:`TICK_MIN_RATIO` of the last labelled one stays unlabelled, so labels never overlap."""
    labels, last = [], None
    for tick in ticks:
        if last is None or tick / last >= TICK_MIN_RATIO:
            labels.append(f"{tick:.3g}")
            last = tick
        else:
            labels.append("")
    return labels


def _settings_per_value(private: pd.DataFrame, x: str) -> int:
    """Most settings (``point``) that share one value of ``x`` for one backend and mechanism
    (1 when the runs form a curve of ``x``)."""
    counts = private.assign(_x=_swept_value_key(private[x])).groupby(
        ["backend", "mechanism", "_x"])["point"].nunique()
    return int(counts.max()) if len(counts) else 0


#: Marker area (points^2) of one seed's value behind a setting's mean in
#: :func:`by_setting_figure`.
SEED_DOT_SIZE = 12.0


def by_setting_figure(frame: pd.DataFrame, metric: str, xlabel: str,
                      *, from_zero: bool = False) -> Figure | None:
    """Every setting of each panel on the y axis (so labels never overlap), ``metric`` on x:
    one point per backend with its 95% percentile bootstrap interval over seeds and, behind
    it, every seed's value as a small dot (how the seeds spread, not only the interval);
    collapsed runs marked, and (a faithfulness metric) settings whose explanations fail the
    randomisation check circled; the panel's
    majority-class rate as a dotted line for accuracy; ``from_zero`` starts x at 0. None if
    no run has the metric."""
    data = frame[(frame["status"] == "finished") & frame[metric].notna()]
    if data.empty:
        return None
    panels = natural_order(data["panel"])
    points_per_panel = max(data.groupby("panel")["point"].nunique())
    fig = Figure(figsize=(PANEL_INCHES[0] * len(panels) + 2.2,
                          1.2 + _row_inches(data["point"]) * points_per_panel),
                 layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    backends = sorted(set(data["backend"]))
    seeds_drawn = False
    for ax, panel in zip(axes, panels, strict=True):
        group = data[data["panel"] == panel]
        points = list(dict.fromkeys(group["point"]))
        for k, backend in enumerate(backends):
            offset = (k - (len(backends) - 1) / 2) * 0.18
            for i, point in enumerate(points):
                runs = group[(group["point"] == point) & (group["backend"] == backend)]
                interval = bootstrap_interval(runs[metric].to_numpy(float))
                if not interval.n:
                    continue
                below, above = interval.error_bar()
                collapsed = bool(runs["collapsed"].any())
                if interval.n > 1:  # every seed behind the mean, as small dots
                    ax.scatter(runs[metric].to_numpy(float), [i + offset] * len(runs),
                               s=SEED_DOT_SIZE, alpha=0.35, linewidths=0, zorder=1,
                               color=BACKEND_COLOURS.get(backend, "black"))
                    seeds_drawn = True
                ax.errorbar([interval.mean], [i + offset], xerr=[[below], [above]], capsize=3,
                            color=BACKEND_COLOURS.get(backend, "black"),
                            marker="x" if collapsed else "o", markersize=7 if collapsed else 5,
                            linestyle="none",
                            label=f"{backend} (x = collapsed)" if collapsed else backend)
                if fails_randomisation(runs, metric):
                    _ring(ax, [interval.mean], [i + offset])
        if metric == "accuracy" and group["majority_rate"].notna().any():
            ax.axvline(float(group["majority_rate"].dropna().iloc[0]), linestyle=":",
                       color="grey", label="majority-class rate")
        ax.set_yticks(range(len(points)))
        ax.set_yticklabels([_wrap(p, 22) for p in points], fontsize=8)
        ax.set_ylim(len(points) - 0.5, -0.5)
        ax.set_xlabel(_wrap(xlabel, 60), fontsize=8)  # never wider than its panel
        ax.set_title(_wrap(panel), fontsize=9)
        ax.grid(True, axis="x", alpha=0.3)
        if from_zero:  # from 0, with room on the right for the largest point's marker
            ax.set_xlim(0.0, 1.05 * ax.get_xlim()[1])
    if seeds_drawn:  # one legend entry for the seed dots of every backend
        axes[0].scatter([], [], s=SEED_DOT_SIZE, alpha=0.6, linewidths=0, color="grey",
                        label="one seed (small dots)")
    _legend(fig, list(axes))
    return fig


#: How far (in spans of the seeds' own range and the agreement band) an interval may reach
#: beyond them before the paired-differences axis stops and the interval is drawn off-scale.
OFF_SCALE_SPANS = 0.5
#: Legend entries of :func:`paired_differences_figure`.
MEAN_LABEL = "mean, 95% t interval"
FEW_SEEDS_LABEL = f"mean (fewer than {MIN_SEEDS} seeds: no interval)"
OFF_SCALE_LABEL = "interval beyond the axis (its bound written)"


def paired_axis_limits(differences: Sequence[np.ndarray], intervals: Sequence[Interval],
                       band: float) -> tuple[float, float]:
    """x limits of one panel of :func:`paired_differences_figure`: every seed's difference and
    the +/- ``band`` agreement band, with the intervals as far as :data:`OFF_SCALE_SPANS` of
    that range beyond it (an interval reaching further is drawn to the edge, off-scale, so
    that a wide interval never squeezes the seeds and the band into a line), padded by 5%."""
    values = np.concatenate([np.asarray(d, float) for d in differences] + [[-band, band]])
    low, high = float(values.min()), float(values.max())
    reach = OFF_SCALE_SPANS * (high - low)
    for interval in intervals:
        if not math.isnan(interval.low):
            low = min(low, max(interval.low, low - reach))
            high = max(high, min(interval.high, high + reach))
    pad = 0.05 * (high - low)
    return low - pad, high + pad


def paired_differences_figure(frame: pd.DataFrame, tolerance: float,
                              metric: str = "accuracy", first: str = "tf",
                              second: str = "torch") -> Figure | None:
    """Per setting (y axis, one panel per data set), ``second - first`` of ``metric`` in
    points for every seed (grey dots) and their mean with its 95% t interval (black), with the
    ±``tolerance`` agreement band shaded and 0 marked: how far each seed's pair moves, not
    only the verdict. A setting with 2 to :data:`~compare.reporting.stats.MIN_SEEDS` - 1
    seeds gets its mean and no interval (as in the paired table), one of one seed its dot
    alone; the axis spans the seeds
    and the band (:func:`paired_axis_limits`), and an interval reaching beyond it ends in an
    arrow at the edge with its bound written there. None if no setting has a seed on both
    backends."""
    rows = [(pair.runs["panel"].iloc[0], pair.runs["point"].iloc[0], 100 * pair.differences)
            for pair in seed_pairs(frame, metric, first, second)]
    if not rows:
        return None
    panels = natural_order(r[0] for r in rows)
    per_panel = max(sum(1 for r in rows if r[0] == panel) for panel in panels)
    fig = Figure(figsize=(PANEL_INCHES[0] * len(panels) + 2.2,
                          1.2 + _row_inches(r[1] for r in rows) * per_panel),
                 layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, panel in zip(axes, panels, strict=True):
        mine = [r for r in rows if r[0] == panel]
        ax.axvspan(-100 * tolerance, 100 * tolerance, color="tab:green", alpha=0.12,
                   label=f"agreement band (±{100 * tolerance:g} point)")
        ax.axvline(0.0, color="grey", linewidth=0.8)
        intervals = [mean_interval(diffs) if len(diffs) >= MIN_SEEDS
                     else Interval(float(np.mean(diffs)), math.nan, math.nan, len(diffs))
                     for _, _, diffs in mine]
        low, high = paired_axis_limits([r[2] for r in mine], intervals, 100 * tolerance)
        for i, ((_, _, diffs), interval) in enumerate(zip(mine, intervals, strict=True)):
            ax.scatter(diffs, [i] * len(diffs), s=14, color="grey", alpha=0.7, zorder=3,
                       label="one seed")
            if len(diffs) < 2:  # the one seed is the whole story
                continue
            if math.isnan(interval.low):
                ax.scatter([interval.mean], [i + 0.22], s=30, facecolors="none",
                           edgecolors="black", zorder=4, label=FEW_SEEDS_LABEL)
                continue
            _clipped_interval(ax, interval, i + 0.22, low, high)
        ax.set_xlim(low, high)
        ax.set_yticks(range(len(mine)))
        ax.set_yticklabels([_wrap(r[1], 22) for r in mine], fontsize=8)
        ax.set_ylim(len(mine) - 0.5, -0.5)
        ax.set_xlabel(f"{second} minus {first} test {metric} (points)", fontsize=8)
        ax.set_title(_wrap(panel), fontsize=9)
        ax.grid(True, axis="x", alpha=0.3)
    _legend(fig, list(axes))
    return fig


def _clipped_interval(ax: Axes, interval: Interval, y: float, low: float, high: float) -> None:
    """The mean and its interval at height ``y``, cut at the axis limits ``low``/``high``: a
    cut end is an arrow head at the edge with the bound's value written beside it."""
    left, right = max(interval.low, low), min(interval.high, high)
    ax.errorbar([interval.mean], [y], xerr=[[interval.mean - left], [right - interval.mean]],
                capsize=3, color="black", marker="o", markersize=5, linestyle="none",
                zorder=4, label=MEAN_LABEL)
    for bound, edge, marker, align in ((interval.low, low, "<", "left"),
                                       (interval.high, high, ">", "right")):
        if (bound < edge) if marker == "<" else (bound > edge):
            ax.scatter([edge], [y], marker=marker, s=40, color="black", zorder=5,
                       clip_on=False, label=OFF_SCALE_LABEL)
            ax.annotate(f"{bound:+.1f}", (edge, y), xytext=(0, -9),
                        textcoords="offset points", ha=align, va="top", fontsize=7)


def lines_per_run_figure(long: pd.DataFrame, x: str, ys: Sequence[tuple[str, str]],
                         xlabel: str, select: Callable[[pd.DataFrame, str], pd.DataFrame]
                         | None = None) -> Figure | None:
    """Curves of a long table (one row per run and x value): one column of panels per
    ``panel``, one row per (y column, y label) in ``ys``; one line per (point, backend), the
    mean over seeds (solid tf, dashed torch). Used for the learning curves and the deletion /
    insertion curves. None if the table is empty."""
    if long.empty:
        return None
    panels = natural_order(long["panel"])
    # one colour per point for the whole figure (the legend is shared by every panel)
    every_point = natural_order(long["point"])
    style_of = dict(zip(every_point, _palette(len(every_point)), strict=True))
    fig, axes = _figure(len(panels), rows=len(ys), legend_width=2.6)
    for c, panel in enumerate(panels):
        for r, (y, ylabel) in enumerate(ys):
            ax = axes[r][c]
            group = long[long["panel"] == panel]
            if select is not None:
                group = select(group, y)
            for point in natural_order(group["point"]):
                colour, marker = style_of[point]
                for backend, runs in group[group["point"] == point].groupby("backend"):
                    mean = runs.groupby(x)[y if y in runs else "probability"].mean()
                    ax.plot(mean.index, mean.to_numpy(), color=colour, linewidth=1.3,
                            linestyle="-" if backend == "tf" else "--", marker=marker,
                            markersize=4, markevery=max(1, len(mean) // 6),
                            label=f"{point} ({backend})")
            ax.set_xlabel(xlabel, fontsize=8)
            ax.set_ylabel(ylabel, fontsize=8)
            if x == "epoch":
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            if r == 0:
                ax.set_title(_wrap(panel), fontsize=9)
            ax.grid(True, alpha=0.3)
    _legend(fig, [ax for row in axes for ax in row])
    return fig


def per_class_figure(per_class: pd.DataFrame, collapsed: set[str]) -> Figure | None:
    """Heat maps of per-class recall (mean over seeds), one per data set (its own classes):
    one row per (setting, backend), one column per class name; rows of collapsed runs end in
    "(collapsed)"; ``collapsed`` holds ``"setting|backend"`` keys. None if empty."""
    if per_class.empty or per_class["class"].isna().all():
        return None
    datasets = list(dict.fromkeys(per_class["dataset"]))
    blocks = []
    for dataset in datasets:
        part = per_class[per_class["dataset"] == dataset]
        table = part.groupby(["setting", "backend", "class"], sort=False)["accuracy"].mean()
        classes = list(dict.fromkeys(part["class"]))
        pivot = table.unstack("class")[classes]
        pivot = pivot.reindex(sorted(pivot.index, key=lambda sb: (natural_key(sb[0]), sb[1])))
        labels = [f"{s} ({b})" + (" (collapsed)" if f"{s}|{b}" in collapsed else "")
                  for s, b in pivot.index]
        blocks.append((dataset, classes, labels, pivot.to_numpy(float)))
    n_rows = sum(len(b[2]) for b in blocks)
    widest = max(len(label) for b in blocks for label in b[2])
    n_classes = max(len(b[1]) for b in blocks)
    fig = Figure(figsize=(2.5 + 0.7 * n_classes + 0.06 * widest,
                          0.9 * len(blocks) + 0.3 * n_rows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(blocks), 1, squeeze=False,
                        height_ratios=[len(b[2]) + 2 for b in blocks])[:, 0]
    image = None
    for ax, (dataset, classes, labels, values) in zip(axes, blocks, strict=True):
        image = ax.imshow(values, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto")
        for (i, j), value in np.ndenumerate(values):
            if not math.isnan(value):
                ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=7,
                        color="white" if value < 0.6 else "black")
        ax.set_xticks(range(len(classes)))
        ax.set_xticklabels([_wrap(c, 12) for c in classes], fontsize=8)
        ax.set_yticks(range(len(labels)))
        ax.set_yticklabels(labels, fontsize=7)
        ax.set_title(f"{dataset}: recall per class", fontsize=9)
    fig.colorbar(image, ax=list(axes), label="recall", shrink=0.8)
    return fig


#: Added to a setting's label in the epoch-time figure when its runs computed the model's
#: fixed front end in every step while other runs of the model cached it.
EVERY_STEP_SUFFIX = " (front end every step)"


def epoch_time_figure(frame: pd.DataFrame) -> Figure | None:
    """Median seconds per epoch over seeds, one panel per ``panel``, settings on the y axis.

    Where a model's runs differ in how they computed its fixed front end (``front_end``, see
    :func:`compare.reporting.frames.front_end_mismatches`), the settings that computed it in
    every step are labelled so: their times include the front end's cost."""
    data = frame[(frame["status"] == "finished") & frame["epoch_seconds"].notna()]
    if data.empty:
        return None
    mixed = front_end_mismatches(data)
    if not mixed.empty:
        in_mixed = pd.MultiIndex.from_frame(data[["dataset", "model"]]).isin(
            pd.MultiIndex.from_frame(mixed[["dataset", "model"]]))
        every_step = in_mixed & (data["front_end"] == "every step").to_numpy()
        data = data.assign(point=data["point"].where(
            ~every_step, data["point"] + EVERY_STEP_SUFFIX))
    keys = ["setting", "backend", "point"]
    data = data.assign(median_epoch_seconds=data.groupby(keys)[
        "epoch_seconds"].transform("median"))
    first = data.drop_duplicates(keys).assign(collapsed=False)
    return by_setting_figure(first.assign(epoch_seconds=first["median_epoch_seconds"]),
                             "epoch_seconds",
                             "seconds per epoch (median over seeds, first epoch excluded)",
                             from_zero=True)



def save_figure(fig: Figure | None, path: Path) -> bool:
    """Write ``fig`` (a ``*_figure`` of this module) as the PNG ``path`` with the digest of
    its plotted data (:mod:`compare.figdigest`); False (nothing written) for None."""
    if fig is None:
        return False
    _save(fig, path)
    return True


def plot_metric_vs_swept(frame: pd.DataFrame, metric: str, path: Path, ylabel: str) -> bool:
    """:func:`metric_vs_swept_figure` written to ``path`` (:func:`save_figure`)."""
    return save_figure(metric_vs_swept_figure(frame, metric, ylabel), path)


def plot_by_setting(frame: pd.DataFrame, metric: str, path: Path, xlabel: str,
                    *, from_zero: bool = False) -> bool:
    """:func:`by_setting_figure` written to ``path`` (:func:`save_figure`)."""
    return save_figure(by_setting_figure(frame, metric, xlabel, from_zero=from_zero), path)


def plot_paired_differences(frame: pd.DataFrame, path: Path, tolerance: float,
                            metric: str = "accuracy", first: str = "tf",
                            second: str = "torch") -> bool:
    """:func:`paired_differences_figure` written to ``path`` (:func:`save_figure`)."""
    return save_figure(paired_differences_figure(frame, tolerance, metric, first, second), path)


def plot_lines_per_run(long: pd.DataFrame, x: str, ys: Sequence[tuple[str, str]], path: Path,
                       xlabel: str, select: Callable[[pd.DataFrame, str], pd.DataFrame]
                       | None = None) -> bool:
    """:func:`lines_per_run_figure` written to ``path`` (:func:`save_figure`)."""
    return save_figure(lines_per_run_figure(long, x, ys, xlabel, select), path)


def plot_per_class(per_class: pd.DataFrame, collapsed: set[str], path: Path) -> bool:
    """:func:`per_class_figure` written to ``path`` (:func:`save_figure`)."""
    return save_figure(per_class_figure(per_class, collapsed), path)


def plot_epoch_time(frame: pd.DataFrame, path: Path) -> bool:
    """:func:`epoch_time_figure` written to ``path`` (:func:`save_figure`)."""
    return save_figure(epoch_time_figure(frame), path)


def natural_order(labels: Iterable[str]) -> list[str]:
    """The distinct ``labels`` sorted by :func:`natural_key` (ties keep their first order)."""
    return sorted(dict.fromkeys(labels), key=natural_key)


def natural_key(label: str) -> tuple[tuple[int, float | str], ...]:
    """Sort key that orders numbers inside labels by value: ``C=0.5 < C=1 < C=2 < C=5``,
    ``eps=1 < eps=8 < non-private``."""
    parts = re.split(r"(\d+(?:\.\d+)?)", str(label))
    return tuple((0, float(part)) if i % 2 else (1, part) for i, part in enumerate(parts)
                 if part != "")


#: Markers of the 2nd, 3rd, ... ten settings of a line figure (the first ten have none).
EXTRA_MARKERS = ("o", "s", "^", "D", "v")


def _palette(n: int) -> list[tuple[tuple[float, ...], str | None]]:
    """(colour, marker) of ``n`` settings: the ten distinct hues of tab10, repeated with a
    marker per further ten (tab20's light and dark shades of one hue were hard to tell
    apart on a line)."""
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    return [(cmap(i % 10), None if i < 10 else EXTRA_MARKERS[(i // 10 - 1) % len(EXTRA_MARKERS)])
            for i in range(n)]


__all__ = ["EVERY_STEP_SUFFIX", "by_setting_figure", "curve_panels", "epoch_time_figure",
           "lines_per_run_figure", "metric_vs_swept_figure", "natural_key", "natural_order",
           "not_curve_rows", "paired_axis_limits",
           "paired_differences_figure", "per_class_figure", "plot_by_setting", "plot_epoch_time",
           "plot_lines_per_run", "plot_metric_vs_swept", "plot_per_class", "save_figure",
           "swept_variable"]
