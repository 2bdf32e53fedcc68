"""A private hyper-parameter selection with a proved cost (Papernot & Steinke 2022), run by
``python -m benchmarks.tuning_sweep ... --protocol LAW``.

For each target epsilon (the epsilon of the WHOLE selection):

1. the per-run epsilon is calibrated so that the selection's bound (Theorem 2 for a truncated
   negative binomial K, Theorem 6 for a Poisson K, :mod:`dpcore.tuning.bound`) meets the
   target; each candidate's noise multiplier is calibrated to that per-run epsilon;
2. K and a candidate per repetition are drawn from the seed (:class:`dpcore.tuning.protocol.
   SelectionDraws`; the same draws at every target);
3. each repetition trains its candidate on the fit part of the validation split (training
   seed = the repetition's index), scores it on the validation part (private data: a split of
   the training split by a keyed hash of each example, so that one example added or removed
   changes one part only; :func:`benchmarks.defaults_sweep.keyed_validation_split`) and
   releases the score plus Gaussian noise;
4. the best noised score wins. The exact scores are kept for the reader only, labelled so.

The table also gives the plain alternative: every candidate run once with its noised score,
composed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from benchmarks.defaults_sweep import keyed_validation_split
from benchmarks.tuning_candidates import DELTA, run_config
from dpcore.backend import load_backend
from dpcore.config import PerfSpec, RunConfig
from dpcore.pipeline import prepare_dataset
from dpcore.sampling import plan_batches
from dpcore.tuning import (
    PROTOCOL_CITATION,
    CandidateSteps,
    RepetitionLaw,
    ScoreMechanism,
    SelectionBudget,
    SelectionDraws,
    accuracy_sensitivity,
    auc_sensitivity,
    calibrate_selection,
    winner,
)


def candidate_config(dataset: str, candidate: Mapping[str, Any], noise_multiplier: float,
                     seed: int) -> RunConfig:
    """The RunConfig of one candidate at a given noise multiplier (Gaussian DP-SGD, delta
    1e-5, clip norm 1 unless the candidate sets it, Poisson sampling)."""
    config = run_config(dataset, candidate, 1.0, seed).to_dict()
    config["privacy"] = {**config["privacy"], "target_epsilon": None,
                         "noise_multiplier": float(noise_multiplier)}
    return RunConfig.from_dict(config)


def candidate_steps(config: RunConfig, n_fit: int) -> CandidateSteps:
    """The sampling rate and step count of ``config`` on ``n_fit`` training examples."""
    plan = plan_batches(n_fit, config.train.batch_size, epochs=config.train.epochs,
                        steps=config.train.steps, sampling=config.privacy.sampling)
    return CandidateSteps(plan.sampling_rate, plan.steps, config.privacy.mechanism)


def score_mechanism(metric: str, noise_std: float, y_validation: np.ndarray) -> ScoreMechanism:
    """The Gaussian mechanism on ``metric`` of the validation split (its sensitivity from the
    split: 1 / n_val for accuracy, 1 / (smaller class count - 1) for AUC)."""
    sensitivity = (accuracy_sensitivity(len(y_validation)) if metric == "accuracy"
                   else auc_sensitivity(y_validation))
    return ScoreMechanism(metric, noise_std, sensitivity)


def protocol_sweep(backend_name: str, dataset_name: str,
                   candidates: Sequence[Mapping[str, Any]], totals: Sequence[float],
                   data_dir: str | None, law: RepetitionLaw, *, metric: str = "accuracy",
                   score_noise: float = 0.01, seed: int = 0) -> list[dict[str, Any]]:
    """Run the selection at each total epsilon; one summary dict per total, each with its
    ``repetitions`` (one row per repetition) and its ``winner``."""
    backend = load_backend(backend_name)
    base = prepare_dataset(run_config(dataset_name, candidates[0], 1.0), data_dir)
    dataset = keyed_validation_split(base)
    n_fit, n_val = len(dataset.x_train), len(dataset.x_test)
    score = score_mechanism(metric, score_noise, dataset.y_test)
    steps = [candidate_steps(run_config(dataset_name, c, 1.0), n_fit) for c in candidates]
    summaries = []
    for total in totals:
        budget = calibrate_selection(steps, total, law, score, DELTA)
        draws = SelectionDraws(law, len(candidates), seed)
        rows = []
        for j, i in enumerate(draws.candidates):
            config = candidate_config(dataset_name, candidates[i], budget.noise_multipliers[i],
                                      seed=j)
            start = time.perf_counter()
            result = backend.train(config, dataset, PerfSpec(), progress=False).result
            assert result is not None
            exact = {"accuracy": result.metrics.get("accuracy"),
                     "auc": result.metrics.get("auc")}
            row = {"total_epsilon": total, "repetition": j + 1, "candidate": i,
                   "label": candidates[i]["label"], "status": result.status,
                   "noise_multiplier": budget.noise_multipliers[i],
                   "run_epsilon": result.privacy.get("epsilon_rdp"),
                   "noised_score": draws.noised(exact[metric], score),
                   "exact_accuracy": exact["accuracy"], "exact_auc": exact["auc"],
                   "seconds": round(time.perf_counter() - start, 1)}
            print(json.dumps(row), flush=True)
            rows.append(row)
        best = winner([r["noised_score"] for r in rows])
        summaries.append({
            "dataset": dataset_name, "total_epsilon": total, "n_fit": n_fit,
            "n_validation": n_val, "seed": seed, "k": draws.k, "budget": budget,
            "repetitions": rows, "winner": None if best is None else rows[best],
            "candidates": [c["label"] for c in candidates], "steps": steps})
    return summaries


def _f(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _budget_lines(budget: SelectionBudget, labels: Sequence[str],
                  steps: Sequence[CandidateSteps]) -> list[str]:
    grid = budget.full_grid
    pld = grid.get("pld")
    lines = [
        f"- Total epsilon of the selection ({PROTOCOL_CITATION}, "
        f"{'Theorem 6' if budget.law.kind == 'poisson' else 'Theorem 2'}, "
        f"{budget.law.describe()}): **{budget.selection_epsilon:.3f}** at delta "
        f"{budget.delta:g}.",
        f"- Per-run epsilon (each candidate's training alone, its noise calibrated to it): "
        f"{budget.per_run_epsilon:.3f}; one repetition (training and noised score, worst "
        f"candidate): {budget.repetition_epsilon:.3f}.",
        f"- The plain alternative, every one of the {len(labels)} candidates run once with "
        f"its noised score, composed at these noises: epsilon {_f(grid.get('rdp'))} (RDP)"
        + ("" if pld is None else f", {pld:.3f} (PLD)") + ".",
        "", "| candidate | q | steps | noise multiplier |", "|---|---|---|---|"]
    lines += [f"| {label} | {s.sampling_rate:.4f} | {s.steps} | {nm:.3f} |"
              for label, s, nm in zip(labels, steps, budget.noise_multipliers, strict=True)]
    return lines


def markdown(summaries: Sequence[Mapping[str, Any]], command: str, backend: str) -> str:
    """The selection's table: per total epsilon, the budget, every repetition, the winner."""
    first = summaries[0]
    budget: SelectionBudget = first["budget"]
    score = budget.score
    lines = [
        f"# Private hyper-parameter selection: {first['dataset']}", "",
        f"Command: `{command}` (backend `{backend}`, harmonised recipe, Gaussian DP-SGD, "
        f"delta {DELTA:g}, Poisson sampling).", "",
        f"Protocol: {PROTOCOL_CITATION} (\"Hyperparameter tuning with Renyi differential "
        f"privacy\", ICLR 2022). The number of repetitions K is drawn from a "
        f"{budget.law.describe()}, seed {first['seed']}; each repetition draws one of the "
        f"{len(first['candidates'])} candidates uniformly, trains it on {first['n_fit']} "
        f"images and releases its validation {score.metric} on {first['n_validation']} "
        f"images plus Gaussian noise of std {score.noise_std:g} (sensitivity "
        f"{score.sensitivity:.3g}, noise multiplier {score.noise_multiplier:.3g}); the best "
        f"noised score wins. The validation images are about 20 % of the training split, each "
        f"held out by a keyed hash of the image and its label (BLAKE2b, a public key: "
        f"dpcore.data.splits.keyed_split), so that adding or removing one image changes one "
        f"part only and moves no other, as the bound needs; the parts' sizes are taken as "
        f"public, as the training set's size is in every DP-SGD accountant. The validation "
        f"images are private data like the rest: the bound counts them. No test image is "
        f"scored. The exact scores are shown for the reader only; nothing was chosen on them. "
        f"The bound covers what the selection releases: the winner (its candidate, model and "
        f"noised score). This table also shows every repetition and its exact scores, a "
        f"diagnostic a private deployment would not publish: the bound does not cover it."
        + (" The AUC's sensitivity treats the validation split's class counts as public."
           if score.metric == "auc" else ""), ""]
    for summary in summaries:
        b: SelectionBudget = summary["budget"]
        lines += [f"## total epsilon {summary['total_epsilon']:g}", "",
                  *_budget_lines(b, summary["candidates"], summary["steps"]), "",
                  f"K = {summary['k']} repetition{'s' if summary['k'] != 1 else ''}.", "",
                  f"| repetition | candidate | noise | run epsilon | noised {score.metric} "
                  "(chooses) | exact accuracy (reader only) | exact AUC (reader only) | s |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in summary["repetitions"]:
            lines.append(f"| {r['repetition']} | {r['label']} | {r['noise_multiplier']:.3f} | "
                         f"{_f(r['run_epsilon'])} | {r['noised_score']:.3f} | "
                         f"{'diverged' if r['exact_accuracy'] is None else _f(r['exact_accuracy'])}"
                         f" | {_f(r['exact_auc'])} | {r['seconds']:.0f} |")
        win = summary["winner"]
        lines += ["", ("Winner: nothing released (K = 0)." if win is None else
                       f"Winner: **{win['label']}** (repetition {win['repetition']}, noised "
                       f"{score.metric} {win['noised_score']:.3f})."), ""]
    return "\n".join(lines)


def selection_block(summary: Mapping[str, Any], table: str) -> dict[str, Any]:
    """The preset ``selection:`` block (:mod:`dpcore.tuning.selection`) of one total."""
    b: SelectionBudget = summary["budget"]
    distinct = dict.fromkeys(zip(summary["steps"], b.noise_multipliers, strict=True))
    return {"accounted": True, "candidates": len(summary["candidates"]),
            "scored_on": (f"validation {b.score.metric} of about 20 % of the private training "
                          f"split (keyed hash of each example), Gaussian noise std "
                          f"{b.score.noise_std:g}"),
            "table": table, "law": b.law.to_dict(), "score": b.score.to_dict(),
            "repetitions": [{"sampling_rate": s.sampling_rate, "steps": s.steps,
                             "noise_multiplier": nm} for s, nm in distinct],
            "delta": b.delta, "epsilon": round(b.selection_epsilon, 6)}


__all__ = ["candidate_config", "candidate_steps", "markdown", "protocol_sweep",
           "score_mechanism", "selection_block"]
