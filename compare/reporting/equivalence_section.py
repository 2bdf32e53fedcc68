"""The report's "Framework equivalence" section: do TF Privacy and Opacus train the same model
when they add the same noise?

Shown for the settings whose runs have ``privacy.noise_source: shared`` on both backends
(:mod:`dpcore.shared_noise`: one noise vector per step, drawn in dpcore, added by both; the
same seeded batches and the same initial weights). A seed's two runs then differ only by the
frameworks (float arithmetic, kernels), so the paired difference measures the frameworks
alone. Per seed pair: the accuracy difference (torch minus tf), the relative difference of the
final weights ``||w_tf - w_torch|| / ||w_torch||`` in the neutral layout (from the weights the
records keep, :mod:`compare.final_weights`), and, for the seed the montage shows, the Pearson
correlation of the two backends' Grad-CAM maps on the same images (from the montage arrays).
Writes ``framework_equivalence.csv`` (one row per seed pair).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from compare.exact_sums import exact_pearson
from compare.final_weights import FinalWeights, relative_difference
from compare.montage_data import MontageData
from compare.reporting.section import ReportData, SectionOutput, section
from compare.reporting.stats import INTERVAL_NAMES, MIN_SEEDS, bootstrap_interval, seed_pairs
from compare.reporting.tables import markdown_table
from dpcore.results import RunResult

__all__ = ["EQUIVALENCE_CSV", "framework_equivalence", "framework_equivalence_lines",
           "gradcam_pearson",
           "shared_noise_runs", "without_own_noise"]

#: The section's per-seed table next to the report.
EQUIVALENCE_CSV = "framework_equivalence.csv"


def shared_noise_runs(results: Sequence[RunResult]) -> set[str]:
    """Run ids of the runs trained with ``privacy.noise_source: shared``."""
    return {r.run_id for r in results
            if ((r.config or {}).get("privacy") or {}).get("noise_source") == "shared"}


def without_own_noise(paired: pd.DataFrame, frame: pd.DataFrame,
                      results: Sequence[RunResult]) -> pd.DataFrame:
    """``paired`` (:func:`compare.reporting.stats.paired_backend_table`) with ``noised``
    False for the settings whose runs all share their noise: their pairs share it too."""
    shared = shared_noise_runs(results)
    if not shared or paired.empty:
        return paired
    by_setting = frame.groupby("setting")["run_id"].agg(lambda ids: set(ids) <= shared)
    out = paired.copy()
    out["noised"] = [bool(n) and not bool(by_setting.get(s, False))
                     for s, n in zip(out["setting"], out["noised"], strict=True)]
    return out


def gradcam_pearson(first: np.ndarray, second: np.ndarray) -> float:
    """Mean over images of the Pearson correlation of two [N, H, W] Grad-CAM maps (an image
    where either map is constant has no correlation and is left out; NaN if all are)."""
    values = []
    for a, b in zip(np.asarray(first, np.float64), np.asarray(second, np.float64),
                    strict=True):
        a, b = a.ravel(), b.ravel()
        if np.ptp(a) > 0 and np.ptp(b) > 0:
            values.append(exact_pearson(a, b))  # the same bits on any machine
    return float(np.mean(values)) if values else math.nan


def _montage_maps(montages: Sequence[MontageData]) -> dict[str, np.ndarray]:
    """Run id -> its Grad-CAM maps [N, H, W] in the montages (the first montage showing it)."""
    maps: dict[str, np.ndarray] = {}
    for data in montages:
        for column in data.columns:
            if column.get("run_id"):
                maps.setdefault(str(column["run_id"]), np.asarray(column["maps"]))
    return maps


def equivalence_rows(frame: pd.DataFrame, results: Sequence[RunResult],
                     weights: Mapping[str, FinalWeights],
                     montages: Sequence[MontageData]) -> pd.DataFrame:
    """One row per shared-noise seed pair: setting, seed, accuracy_tf, accuracy_torch,
    difference (torch minus tf, accuracy units), weight_difference (relative, NaN when a
    run's weights are not kept), weight_method (``exact`` / ``JL estimate``), gradcam_pearson
    (NaN for a seed the montage does not show), gradcam_images."""
    shared = shared_noise_runs(results)
    part = frame[frame["run_id"].isin(shared)]
    maps = _montage_maps(montages)
    rows: list[dict[str, Any]] = []
    if part.empty:
        return pd.DataFrame(rows)
    for pair in seed_pairs(part):
        for seed, diff in zip(pair.first_runs.index, pair.differences, strict=True):
            tf_id = str(pair.first_runs.loc[seed, "run_id"])
            torch_id = str(pair.second_runs.loc[seed, "run_id"])
            w_diff, method = math.nan, "not kept"
            if tf_id in weights and torch_id in weights:
                w_diff, method = relative_difference(weights[tf_id], weights[torch_id])
            pearson, images = math.nan, 0
            if tf_id in maps and torch_id in maps:
                pearson, images = gradcam_pearson(maps[tf_id], maps[torch_id]), len(maps[tf_id])
            rows.append({"setting": pair.setting, "seed": int(seed),
                         "accuracy_tf": float(pair.first_runs.loc[seed, "accuracy"]),
                         "accuracy_torch": float(pair.second_runs.loc[seed, "accuracy"]),
                         "difference": float(diff), "weight_difference": w_diff,
                         "weight_method": method, "gradcam_pearson": pearson,
                         "gradcam_images": images})
    return pd.DataFrame(rows)


def _pct(fraction: float, sign: str = "") -> str:
    """An accuracy (or a difference of accuracies) in percent / points, two decimals."""
    return "–" if math.isnan(fraction) else f"{100 * fraction:{sign}.2f}"


def _kept_size(results: Sequence[RunResult], weights: Mapping[str, FinalWeights]) -> str:
    """How the final weights are kept and what they cost (raw float32 bytes)."""
    kinds = {w.kind for w in weights.values()}
    params = sorted({w.parameters for w in weights.values()})
    raw = sum(w.vector().size * 4 for w in weights.values())
    how = ("the weights themselves (float32)" if kinds == {"weights"} else
           "a seeded projection onto 512 Gaussian directions (a Johnson-Lindenstrauss "
           "estimate of the relative difference, within a few per cent)")
    return (f"The records keep the final weights of {len(weights)} shared-noise run(s) in "
            f"`records/weights/` as {how}: {', '.join(f'{p:,}' for p in params)} parameters "
            f"per model, {raw / 1e3:.0f} kB raw in all (compressed npz).")


@section("framework_equivalence")
def framework_equivalence(data: ReportData) -> SectionOutput:
    """The section (nothing without a shared-noise pair): its Markdown lines and
    :data:`EQUIVALENCE_CSV`, one row per seed pair."""
    rows = equivalence_rows(data.frame, data.results, data.weights, data.montages)
    if rows.empty:
        return SectionOutput()
    return SectionOutput(framework_equivalence_lines(rows, data.results, data.weights),
                         {EQUIVALENCE_CSV: rows})


def framework_equivalence_lines(rows: pd.DataFrame, results: Sequence[RunResult],
                                weights: Mapping[str, FinalWeights]) -> list[str]:
    """The section's Markdown lines for the seed pairs ``rows`` (:func:`equivalence_rows`)."""
    lines = ["## Framework equivalence (shared noise)", "",
             "Both backends added the same noise vector in every step (`privacy.noise_source: "
             "shared`: drawn once in dpcore by a Philox generator keyed by the run's noise "
             "key, which the privacy section names, with the step as its counter, in the "
             "shared weight layout), on the same batches from the same initial weights; a "
             "seed's two runs differ only by the frameworks. "
             "`difference`: torch minus tf test accuracy; `weights`: ||w_tf - "
             "w_torch|| / ||w_torch|| of the final weights (neutral layout); `Grad-CAM r`: "
             "mean Pearson correlation of the two backends' Grad-CAM maps on the montage's "
             "images (the montage shows the first seed only).", ""]
    table = pd.DataFrame({
        "setting": rows["setting"], "seed": rows["seed"],
        "tf accuracy %": [_pct(v) for v in rows["accuracy_tf"]],
        "torch accuracy %": [_pct(v) for v in rows["accuracy_torch"]],
        "difference (points)": [_pct(v, "+") for v in rows["difference"]],
        "weights": [("" if math.isnan(v) else f"{v:.3g}") + ("" if m == "exact" else f" ({m})")
                    for v, m in zip(rows["weight_difference"], rows["weight_method"],
                                    strict=True)],
        "Grad-CAM r": ["" if math.isnan(v) else f"{v:.3f} ({n} images)"
                       for v, n in zip(rows["gradcam_pearson"], rows["gradcam_images"],
                                       strict=True)]})
    lines += [markdown_table(table), ""]
    for setting, group in rows.groupby("setting", sort=False):
        interval = bootstrap_interval(group["difference"].to_numpy(float))
        n = interval.n
        status = "" if n >= MIN_SEEDS else f" (preliminary: {n} < {MIN_SEEDS} seeds)"
        if n >= 2:
            spread = (f"{_pct(interval.mean, '+')} points, {INTERVAL_NAMES['bootstrap']} "
                      f"[{_pct(interval.low, '+')}, {_pct(interval.high, '+')}] over {n} seed "
                      "pairs")
        else:
            spread = f"{_pct(interval.mean, '+')} points (1 seed pair, no interval)"
        w = group["weight_difference"].dropna()
        weight_text = (f"; relative weight difference median {w.median():.3g} (max "
                       f"{w.max():.3g})" if len(w) else "; final weights not kept")
        r = group["gradcam_pearson"].dropna()
        cam_text = f"; Grad-CAM r {r.iloc[0]:.3f}" if len(r) else ""
        lines += [f"- {setting}: mean paired accuracy difference (torch − tf) "
                  f"{spread}{weight_text}{cam_text}{status}."]
    lines += ["", _kept_size(results, weights) if weights else
              "No final weights are kept for these runs (their checkpoints were not found).",
              ""]
    return lines
