"""Reports from a results store: ``report.md`` + CSV tables + PNG plots (seaborn).

Every number in a report comes from a stored :class:`~dpcore.results.RunResult`. The header
states the exact command, the library versions, the data used and the wall time.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from compare.grid import setting_label
from dpcore.results import ResultsStore, RunResult, atomic_write_bytes, utc_now

FAITHFULNESS_KEYS = ("average_drop", "increase_in_confidence", "masked_score",
                     "deletion_auc", "insertion_auc")


@dataclass(frozen=True)
class ReportContext:
    """What the header says: the command that made the report and the wall time it took."""

    command: str
    wall_seconds: float | None = None
    title: str = "dpcompare report"
    description: str = ""
    notes: str = ""
    published: tuple[dict[str, Any], ...] = ()
    #: When set, only these run ids are reported (``compare`` passes its grid's runs, so that
    #: stale runs of an earlier version of the grid in the same folder are left out).
    run_ids: frozenset[str] | None = None


def _epsilon_of(result: RunResult) -> float:
    """The epsilon plotted for a run: the central (DP-SGD) epsilon of the shared accountant,
    RDP (PLD if RDP is unsupported); inf for non-private and local-DP runs, which train without
    DP-SGD (a local-DP run's own per-value / per-image epsilons are reported separately)."""
    privacy = result.privacy
    if privacy.get("mechanism") in ("none", "ldp"):
        return math.inf
    for key in ("epsilon_rdp", "epsilon_pld"):
        value = privacy.get(key)
        if value is not None:
            return float(value)
    return math.nan


def _mean_epoch_seconds(timing: dict[str, Any]) -> float:
    """Mean seconds per epoch excluding the first (compile/trace) epoch when there are more."""
    seconds = list(timing.get("epoch_seconds") or [])
    if len(seconds) > 1:
        seconds = seconds[1:]
    return float(np.mean(seconds)) if seconds else math.nan


def results_frame(results: Sequence[RunResult]) -> pd.DataFrame:
    """One row per run with the fields the report uses (NaN where a run lacks one)."""
    rows = []
    for r in results:
        config = r.config
        privacy = r.privacy
        library = privacy.get("library_epsilon") or {}
        ldp = (r.dataset.get("ldp") or privacy.get("ldp") or {})
        row: dict[str, Any] = {
            "run_id": r.run_id,
            "config_hash": r.config_hash,
            "backend": r.backend,
            "status": r.status,
            "seed": r.seed,
            "setting": setting_label(r.labels) if r.labels else r.config_hash,
            "dataset": config["data"]["name"],
            "model": config["model"]["name"],
            "mechanism": config["privacy"]["mechanism"],
            "target_epsilon": config["privacy"].get("target_epsilon"),
            "noise_multiplier": privacy.get("noise_multiplier"),
            "max_grad_norm": config["privacy"].get("max_grad_norm"),
            "delta": privacy.get("delta"),
            "steps": privacy.get("steps"),
            "sampling_rate": privacy.get("sampling_rate"),
            "epsilon": _epsilon_of(r),
            "epsilon_rdp": privacy.get("epsilon_rdp"),
            "epsilon_pld": privacy.get("epsilon_pld"),
            "epsilon_opacus_rdp": library.get("opacus_rdp"),
            "epsilon_opacus_prv": library.get("opacus_prv"),
            "epsilon_tf_privacy": library.get("tf_privacy"),
            "accuracy": r.metrics.get("accuracy"),
            "accuracy_gap": (r.metrics.get("gaps") or {}).get("accuracy"),
            "recall_gap": (r.metrics.get("gaps") or {}).get("recall"),
            "auc_gap": (r.metrics.get("gaps") or {}).get("auc"),
            "worst_group": (r.metrics.get("per_group") or {}).get("worst_group"),
            "auc": r.metrics.get("auc"),
            "loss": r.metrics.get("loss"),
            "epoch_seconds": _mean_epoch_seconds(r.timing),
            "total_seconds": r.timing.get("total_seconds"),
            "examples_per_second": r.timing.get("examples_per_second"),
            "peak_memory_mb": r.timing.get("peak_memory_mb"),
            "n_train": r.dataset.get("n_train"),
            "n_test": r.dataset.get("n_test"),
            "data_fingerprint": r.dataset.get("fingerprint"),
            "ldp_epsilon_per_value": ldp.get("epsilon_per_value"),
            "ldp_epsilon_per_image": ldp.get("epsilon_per_image"),
            "ldp_psnr": ldp.get("psnr"),
            "ldp_ssim": ldp.get("ssim"),
        }
        for key in FAITHFULNESS_KEYS:
            row[key] = (r.faithfulness or {}).get(key)
        if r.audit:
            row["attack_auc"] = r.audit.get("attack_auc")
            row["attack_advantage"] = r.audit.get("advantage")
            row["advantage_bound"] = r.audit.get("bound")
            loss_threshold = r.audit.get("loss_threshold") or {}
            row["heldout_advantage_ci_low"] = loss_threshold.get("ci_low")
            row["suspected_privacy_bug"] = bool(r.audit.get("suspected_privacy_bug"))
        rows.append(row)
    frame = pd.DataFrame(rows)
    for column in frame.columns:
        if column not in ("run_id", "config_hash", "backend", "status", "setting", "dataset",
                          "model", "mechanism", "data_fingerprint",
                          "suspected_privacy_bug", "worst_group"):
            frame[column] = pd.to_numeric(frame[column], errors="coerce")
    # A reading order: per data set and model, mechanism by mechanism (non-private last),
    # epsilon ascending; then the two backends side by side.
    order = [c for c in ("dataset", "model", "mechanism", "epsilon", "setting", "backend", "seed")
             if c in frame.columns]
    if order:
        frame = frame.sort_values(order, kind="stable", na_position="last").reset_index(
            drop=True)
    return frame


def per_class_frame(results: Sequence[RunResult]) -> pd.DataFrame:
    """Long table of per-class accuracy (recall) for every run."""
    rows = []
    for r in results:
        for entry in r.metrics.get("per_class") or []:
            rows.append({
                "run_id": r.run_id, "backend": r.backend, "seed": r.seed,
                "setting": setting_label(r.labels) if r.labels else r.config_hash,
                "class": entry.get("class_name", entry.get("class")),
                "accuracy": entry.get("recall", entry.get("accuracy")),
                "support": entry.get("support"),
            })
    return pd.DataFrame(rows)


def summary_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Mean and standard deviation over seeds, per (setting, backend)."""
    if frame.empty:
        return frame
    finished = frame[frame["status"] == "finished"]
    metrics = ["accuracy", "auc", "accuracy_gap", "auc_gap", "epsilon", "epsilon_rdp",
               "epsilon_pld",
               "noise_multiplier", "epoch_seconds", *FAITHFULNESS_KEYS]
    metrics = [m for m in metrics if m in finished and finished[m].notna().any()]
    grouped = finished.groupby(["setting", "backend"], sort=False)
    table = grouped[metrics].agg(["mean", "std"])
    table.columns = [f"{m}_{stat}" for m, stat in table.columns]
    table.insert(0, "seeds", grouped.size())
    return table.reset_index()


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float):
        if math.isinf(value):
            return "∞"
        return f"{value:.{digits}g}"
    return str(value)


def markdown_table(frame: pd.DataFrame, columns: Sequence[str] | None = None) -> str:
    """A GitHub Markdown table of ``frame`` (selected columns)."""
    if frame.empty:
        return "_no rows_\n"
    columns = [c for c in (columns or list(frame.columns)) if c in frame.columns]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for _, row in frame[columns].iterrows():
        lines.append("| " + " | ".join(_fmt(row[c]).replace("|", "\\|") for c in columns) + " |")
    return "\n".join(lines) + "\n"


def _plot_metric_vs_epsilon(frame: pd.DataFrame, metric: str, path: Path, ylabel: str) -> bool:
    """Line per backend of ``metric`` against epsilon (log x), seed spread as error bars;
    non-private runs as a dashed horizontal line per backend. False if nothing to plot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    data = frame[(frame["status"] == "finished") & frame[metric].notna()]
    if data.empty:
        return False
    private = data[np.isfinite(data["epsilon"])]
    public = data[~np.isfinite(data["epsilon"])]
    fig, ax = plt.subplots(figsize=(6, 4))
    palette = dict(zip(sorted(data["backend"].unique()), sns.color_palette("deep"), strict=False))
    if not private.empty:
        sns.lineplot(data=private, x="epsilon", y=metric, hue="backend", style="mechanism",
                     errorbar="sd", marker="o", ax=ax, palette=palette)
        ax.set_xscale("log")
    for backend, group in public.groupby("backend"):
        ax.axhline(group[metric].mean(), linestyle="--", color=palette[backend],
                   label=f"{backend} non-private")
    ax.set_xlabel("epsilon (shared accountant, RDP)")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def _plot_epoch_time(frame: pd.DataFrame, path: Path) -> bool:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    data = frame[(frame["status"] == "finished") & frame["epoch_seconds"].notna()]
    if data.empty:
        return False
    fig, ax = plt.subplots(figsize=(7, 4))
    sns.barplot(data=data, x="setting", y="epoch_seconds", hue="backend", errorbar="sd", ax=ax)
    ax.set_ylabel("seconds per epoch (first epoch excluded)")
    ax.set_xlabel("")
    ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def _plot_per_class(per_class: pd.DataFrame, path: Path) -> bool:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    if per_class.empty:
        return False
    pivot = per_class.pivot_table(index=["setting", "backend"], columns="class",
                                  values="accuracy", aggfunc="mean")
    fig, ax = plt.subplots(figsize=(1.0 + 0.6 * pivot.shape[1], 1.0 + 0.4 * pivot.shape[0]))
    sns.heatmap(pivot, annot=True, fmt=".2f", vmin=0, vmax=1, cmap="viridis", ax=ax,
                cbar_kws={"label": "recall"})
    ax.set_ylabel("")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def time_ratio_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per backend and data set/model: DP epoch time / non-private epoch time."""
    data = frame[(frame["status"] == "finished") & frame["epoch_seconds"].notna()]
    rows = []
    for (backend, dataset, model), group in data.groupby(["backend", "dataset", "model"]):
        plain = group[group["mechanism"] == "none"]["epoch_seconds"].mean()
        for setting, sub in group[group["mechanism"].str.startswith("dpsgd")].groupby("setting"):
            dp_time = sub["epoch_seconds"].mean()
            rows.append({"backend": backend, "dataset": dataset, "model": model,
                         "setting": setting, "dp_epoch_seconds": dp_time,
                         "non_private_epoch_seconds": plain,
                         "dp_over_non_private": dp_time / plain if plain else math.nan})
    return pd.DataFrame(rows)


def engines_used(results: Sequence[RunResult]) -> str:
    """How each backend's DP runs computed per-example gradients, from their RunResults:
    e.g. ``tf: fast engine (2 runs); torch: Opacus grad-sample mode hooks (2 runs)``.

    Performance-only (the engines compute the same update); stated so that the times in a
    report can be read. Non-private runs are not counted.
    """
    counts: dict[str, dict[str, int]] = {}
    for r in results:
        if r.config["privacy"]["mechanism"] not in ("dpsgd-gaussian", "dpsgd-laplace"):
            continue
        perf = r.perf or {}
        if r.backend == "torch":
            how = f"Opacus grad-sample mode {perf.get('grad_sample_mode', '?')}"
        else:
            how = f"{perf.get('engine_used', perf.get('engine', '?'))} engine"
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


def write_report(
    store_root: str | Path, out_dir: str | Path, context: ReportContext
) -> Path:
    """Write report.md, CSV tables and PNG plots for every run in ``store_root``.

    Returns the path of ``report.md``. Montages written by the runner (``montages/*.png``
    under the store root) are copied next to the report and linked.
    """
    store = ResultsStore(store_root)
    results = store.list_runs()
    if context.run_ids is not None:
        results = [r for r in results if r.run_id in context.run_ids]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    frame = results_frame(results)
    per_class = per_class_frame(results)
    lines: list[str] = [f"# {context.title}", ""]
    lines += [
        f"- command: `{context.command}`",
        f"- written: {utc_now()}",
    ]
    if context.wall_seconds is not None:
        lines.append(f"- wall time of the command that wrote this report: "
                     f"{context.wall_seconds:.0f} s")
    if results:
        run_seconds = sum(float(r.timing.get("total_seconds") or 0.0) for r in results)
        lines.append(f"- training time summed over the {len(results)} stored runs: "
                     f"{run_seconds:.0f} s")
    if results:
        versions = results[0].versions
        shown = ", ".join(f"{k} {v}" for k, v in versions.items() if k != "platform")
        lines.append(f"- versions: {shown}")
        lines.append(f"- machine: {versions.get('platform', '?')}")
        lines.append(f"- per-example gradients: {engines_used(results)}")
    if not frame.empty:
        data_used = frame.groupby("dataset").agg(
            n_train=("n_train", "first"), n_test=("n_test", "first"),
            fingerprint=("data_fingerprint", "first"))
        for name, row in data_used.iterrows():
            lines.append(f"- data: `{name}`: {int(row.n_train)} train / {int(row.n_test)} test "
                         f"examples (fingerprint {row.fingerprint})")
        counts = frame["status"].value_counts().to_dict()
        lines.append("- runs: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
    if context.description:
        lines += ["", context.description]
    lines.append("")
    if frame.empty:
        lines.append("No runs found.")
        report_path = out / "report.md"
        atomic_write_bytes(report_path, ("\n".join(lines) + "\n").encode())
        return report_path

    frame.to_csv(out / "runs.csv", index=False)
    summary = summary_table(frame)
    summary.to_csv(out / "summary.csv", index=False)
    lines += ["## Accuracy and AUC (mean ± sd over seeds)", ""]
    if _plot_metric_vs_epsilon(frame, "accuracy", out / "accuracy_vs_epsilon.png",
                               "test accuracy"):
        lines += ["![accuracy vs epsilon](accuracy_vs_epsilon.png)", ""]
    if frame["auc"].notna().any() and _plot_metric_vs_epsilon(
            frame, "auc", out / "auc_vs_epsilon.png", "test AUC"):
        lines += ["![AUC vs epsilon](auc_vs_epsilon.png)", ""]
    cols = ["setting", "backend", "seeds", "accuracy_mean", "accuracy_std", "auc_mean",
            "auc_std", "epsilon_mean"]
    lines += [markdown_table(summary, cols), ""]
    if (frame["mechanism"] == "ldp").any():
        lines += ["`epsilon` is the central DP-SGD epsilon: local-DP runs train without DP-SGD "
                  "(∞ here); their per-value and per-image epsilons are in the Local DP section.",
                  ""]

    lines += ["## Epsilon side by side", "",
              "Shared accountant (dp_accounting, from each run's DpEvent) next to the "
              "library's own accountant for the same run (Opacus: RDP, PRV; TF Privacy: "
              "`compute_dp_sgd_privacy`, RDP).", ""]
    eps_cols = ["setting", "backend", "noise_multiplier", "steps", "sampling_rate", "delta",
                "epsilon_rdp", "epsilon_pld", "epsilon_opacus_rdp", "epsilon_opacus_prv",
                "epsilon_tf_privacy"]
    first_seed = frame.sort_values("seed").drop_duplicates(["setting", "backend"])
    lines += [markdown_table(first_seed, eps_cols), ""]
    frame[eps_cols].to_csv(out / "epsilon.csv", index=False)

    if any(frame[k].notna().any() for k in FAITHFULNESS_KEYS if k in frame):
        lines += ["## Grad-CAM faithfulness", ""]
        for key, label in (("average_drop", "Average Drop % (lower is better)"),
                           ("increase_in_confidence", "Increase in Confidence % (higher)"),
                           ("deletion_auc", "deletion AUC (lower is better)"),
                           ("insertion_auc", "insertion AUC (higher is better)")):
            if frame[key].notna().any() and _plot_metric_vs_epsilon(
                    frame, key, out / f"{key}_vs_epsilon.png", label):
                lines += [f"![{label}]({key}_vs_epsilon.png)", ""]
        faith_cols = ["setting", "backend", *[f"{k}_mean" for k in FAITHFULNESS_KEYS]]
        lines += [markdown_table(summary, faith_cols), ""]
    montages = sorted((Path(store_root) / "montages").glob("*.png"))
    if montages:
        (out / "montages").mkdir(exist_ok=True)
        lines += ["### Saliency montages", ""]
        for montage in montages:
            atomic_write_bytes(out / "montages" / montage.name, montage.read_bytes())
            lines += [f"![{montage.stem}](montages/{montage.name})", ""]

    lines += ["## Time", ""]
    if _plot_epoch_time(frame, out / "epoch_time.png"):
        lines += ["![seconds per epoch](epoch_time.png)", ""]
    ratios = time_ratio_table(frame)
    if not ratios.empty:
        ratios.to_csv(out / "time_ratios.csv", index=False)
        lines += ["DP / non-private epoch time, per backend:", "", markdown_table(ratios), ""]
    time_cols = ["setting", "backend", "epoch_seconds", "examples_per_second", "peak_memory_mb"]
    lines += [markdown_table(first_seed, time_cols), ""]

    if not per_class.empty:
        per_class.to_csv(out / "per_class.csv", index=False)
        lines += ["## Per-class accuracy (recall)", ""]
        if _plot_per_class(per_class, out / "per_class.png"):
            lines += ["![per-class accuracy](per_class.png)", ""]

    if frame["accuracy_gap"].notna().any():
        lines += ["## Fairness: per-group gaps", "",
                  "Gap = best minus worst group (groups: the data set's group labels when it has "
                  "them, else the classes). Claims to check: DP at a good epsilon does not widen "
                  "gaps; rare classes are the first lost.", ""]
        if _plot_metric_vs_epsilon(frame, "accuracy_gap", out / "accuracy_gap_vs_epsilon.png",
                                   "per-group accuracy gap (max - min)"):
            lines += ["![accuracy gap vs epsilon](accuracy_gap_vs_epsilon.png)", ""]
        gap_cols = ["setting", "backend", "seeds", "accuracy_gap_mean", "accuracy_gap_std",
                    "auc_gap_mean"]
        lines += [markdown_table(summary, gap_cols), ""]
        worst = first_seed[["setting", "backend", "worst_group"]]
        lines += ["Worst group by accuracy (first seed):", "", markdown_table(worst), ""]

    if frame["ldp_epsilon_per_image"].notna().any():
        lines += ["## Local DP", "",
                  "Per-value epsilon protects one pixel value; **the per-image epsilon is the "
                  "one that protects a patient's image**.", ""]
        ldp_cols = ["setting", "backend", "ldp_epsilon_per_value", "ldp_epsilon_per_image",
                    "ldp_psnr", "ldp_ssim", "accuracy"]
        lines += [markdown_table(first_seed[first_seed["mechanism"] == "ldp"], ldp_cols), ""]

    if "attack_auc" in frame and frame["attack_auc"].notna().any():
        lines += ["## Membership-inference audit", "",
                  "TF Privacy's membership-inference attacks (threshold and logistic regression "
                  "on losses), training examples vs the same number of held-out examples. "
                  "`advantage_bound` = (e^eps - 1 + 2 delta) / (e^eps + 1) from the run's "
                  "(epsilon, delta); a run whose held-out advantage has a confidence interval "
                  "entirely above it is marked as a suspected privacy bug.", ""]
        audit_cols = ["setting", "backend", "seed", "epsilon", "attack_auc", "attack_advantage",
                      "heldout_advantage_ci_low", "advantage_bound", "suspected_privacy_bug"]
        lines += [markdown_table(frame[frame["attack_auc"].notna()], audit_cols), ""]
        flags = frame.get("suspected_privacy_bug")
        suspects = frame[flags.fillna(False).astype(bool)] if flags is not None else frame[:0]
        if not suspects.empty:
            lines += ["**Suspected privacy bug** in: "
                      + ", ".join(suspects["run_id"]) + ".", ""]

    if context.published:
        lines += ["## Published figures next to ours", "",
                  markdown_table(pd.DataFrame(list(context.published))), ""]
    if context.notes:
        lines += ["## Notes", "", context.notes, ""]
    failed = frame[frame["status"] != "finished"]
    if not failed.empty:
        lines += ["## Runs that did not finish", "",
                  markdown_table(failed, ["run_id", "setting", "backend", "seed", "status"]), ""]
    lines += ["## All runs", "", "See `runs.csv` (one row per run) and `summary.csv`.", ""]
    report_path = out / "report.md"
    atomic_write_bytes(report_path, ("\n".join(lines) + "\n").encode("utf-8"))
    return report_path


def command_line() -> str:
    """The command as typed (``dpcompare`` plus its arguments)."""
    args = sys.argv[1:]
    return "dpcompare " + " ".join(args)
