"""Stored RunResults as pandas tables: one row per run, per class, per epoch, per curve point.

Every number comes from a :class:`~dpcore.results.RunResult` (its JSON keys, not internals of
the backends). A column derived the same way as in the notebooks' tables has one rule, in
:mod:`compare.tidy` (``epsilon``: :func:`~compare.tidy.central_epsilon`; ``epoch_seconds``:
:func:`~compare.tidy.mean_epoch_seconds`; the library accountants' epsilons:
:func:`~compare.tidy.library_accountant_epsilon`) or :mod:`dpcore.as_run` (the steps that
ran). Besides the stored fields each run row gets:

* ``panel``: the run's labels along every grid axis except the swept one, joined (the data set
  and model when the grid has no other axis); plots draw one panel per value, never pooled;
* ``point``: the label along the swept axis (the last axis of the grid, e.g. ``privacy`` or
  ``clip``), the position of the run within its panel;
* ``collapsed`` / ``collapse_reason`` / ``majority_rate``: :mod:`compare.reporting.collapse`;
* ``auc_scoring``: how the AUC was scored (:func:`auc_scoring`);
* ``ldp_test_inputs`` (the test images of a local-DP run's headline metrics, ``clean`` or
  ``privatised``; "" otherwise) and ``accuracy_clean_test`` / ``accuracy_privatised_test``
  (its test accuracy on each; NaN for other runs and for a record without both).
* ``epsilon_claimed`` / ``epsilon_proved`` / ``epsilon_audited``, ``privacy_violation``,
  ``fault``: :mod:`compare.reporting.privacy_section` (which also flags the setting label).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from compare.grid import SETTING_SEPARATOR, setting_label
from compare.reporting.collapse import collapse_reason, majority_rate
from compare.reporting.privacy_section import (
    PRIVACY_TEXT_COLUMNS,
    apply_flags,
    flag_settings,
    flags_of_results,
    privacy_columns,
)
from compare.tidy import central_epsilon, library_accountant_epsilon, mean_epoch_seconds
from dpcore.architectures import architecture
from dpcore.as_run import as_run_privacy
from dpcore.config import ModelSpec
from dpcore.errors import ConfigError
from dpcore.frontcache import fixed_front_names
from dpcore.results import RunResult
from dpcore.scoring import scoring_of

FAITHFULNESS_KEYS = ("average_drop", "increase_in_confidence", "original_score", "masked_score",
                     "deletion_auc", "insertion_auc")
#: Run-table column -> (faithfulness entry, key) of the sanity check and the calibrated figures
#: (:func:`dpcore.evaluation.randomisation.randomisation_check_of`,
#: :func:`dpcore.evaluation.calibrated.calibrated_faithfulness_of`).
SANITY_KEYS = {"randomisation_spearman": ("randomisation_check", "spearman_median"),
               "randomisation_ssim": ("randomisation_check", "ssim_median"),
               "temperature": ("calibrated", "temperature"),
               "calibrated_average_drop": ("calibrated", "average_drop"),
               "calibrated_increase_in_confidence": ("calibrated", "increase_in_confidence")}
TEXT_COLUMNS = ("run_id", "config_hash", "backend", "status", "setting", "panel", "point",
                "dataset", "model", "mechanism", "data_fingerprint", "suspected_privacy_bug",
                "worst_group", "collapsed", "collapse_reason", "recipe", "privacy_claim",
                "peak_memory_scope", "front_end", "randomisation_check", "ldp_test_inputs",
                "temperature_fit", "bound_accountant", "eval_split", "auc_scoring")

#: ``bound_accountant`` of an audit record without its accountant.
NOT_RECORDED = "not recorded"


def audit_bound_epsilon(audit: Mapping[str, Any]) -> tuple[float | None, str]:
    """The epsilon a stored membership audit computed its advantage bound from, and the
    accountant of that epsilon (``rdp``/``pld``; ``no DP claim`` when the bound is 1.0 for
    want of a claim; :data:`NOT_RECORDED` for a record older than ``epsilon_accountant``).
    The epsilon is the audit's own ``epsilon`` entry, which may differ from the run's target
    or planned epsilon (the audit checks the smallest figure the shared accountant proves)."""
    epsilon = audit.get("epsilon")
    if "epsilon_accountant" not in audit:
        return epsilon, NOT_RECORDED
    if epsilon is None:
        return None, "no DP claim"
    return float(epsilon), str(audit["epsilon_accountant"])


def front_end(result: RunResult) -> str:
    """How a run computed its model's fixed front end (:mod:`dpcore.frontcache`, the
    ScatterNets' scattering): ``"cached"`` (once per data set, before training), ``"every
    step"`` (in each training step: a record without ``perf.fixed_front_cached``, or run with
    ``perf.cache_fixed_front=false``, ``augment`` or a library recipe) or ``""`` (the model
    has no fixed front end, or the record does not say which model and input it had).

    A model's runs that differ here differ in epoch time by the front end's cost, not by DP.
    """
    if (result.perf or {}).get("fixed_front_cached"):
        return "cached"
    try:
        model = tuple(sorted(result.config["model"].items()))
        shape = tuple(int(d) for d in result.dataset["input_shape"])
        has_front = _has_fixed_front(model, shape, int(result.dataset["n_classes"]))
    except (KeyError, TypeError, ValueError):
        return ""
    return "every step" if has_front else ""


@functools.lru_cache(maxsize=256)
def _has_fixed_front(model: tuple[tuple[str, Any], ...], input_shape: tuple[int, ...],
                     n_classes: int) -> bool:
    """Whether this model on this input starts with a fixed front end (False if the record
    cannot be resolved into an architecture, e.g. a text model without its vocabulary)."""
    try:
        arch = architecture(ModelSpec(**dict(model)), input_shape, n_classes)
    except (ConfigError, TypeError, ValueError):
        return False
    return bool(fixed_front_names(arch))


def front_end_mismatches(frame: pd.DataFrame) -> pd.DataFrame:
    """Per data set and model whose finished runs differ in how they computed the model's
    fixed front end (``front_end``: ``"cached"`` once per data set, ``"every step"``):
    dataset, model, cached (runs), every_step (runs). Empty when no model mixes the two.

    Such runs' epoch times differ by the front end's cost (for the ScatterNets most of a
    step), not by DP, so the time section says so and pairs like with like."""
    columns = ["dataset", "model", "cached", "every_step"]
    done = frame[frame["status"] == "finished"]
    if "front_end" not in done or done.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    for (dataset, model), group in done.groupby(["dataset", "model"], sort=False):
        cached = int((group["front_end"] == "cached").sum())
        every_step = int((group["front_end"] == "every step").sum())
        if cached and every_step:
            rows.append({"dataset": dataset, "model": model, "cached": cached,
                         "every_step": every_step})
    return pd.DataFrame(rows, columns=columns)


def panel_and_point(result: RunResult) -> tuple[str, str]:
    """(panel, point) of a run: see the module docstring."""
    labels = dict(result.labels or {})
    config = result.config
    if not labels:
        return (f"{config['data']['name']}{SETTING_SEPARATOR}{config['model']['name']}",
                result.config_hash)
    axes = list(labels)
    point = labels[axes[-1]]
    others = [labels[a] for a in axes[:-1]]
    if not others:
        others = [config["data"]["name"]]
    return SETTING_SEPARATOR.join(others), point


def results_frame(results: Sequence[RunResult]) -> pd.DataFrame:
    """One row per run with the fields the report uses (NaN where a run lacks one)."""
    rows = []
    for r in results:
        config = r.config
        privacy = r.privacy
        ran = as_run_privacy(privacy)
        library = privacy.get("library_epsilon") or {}
        ldp = (r.dataset.get("ldp") or privacy.get("ldp") or {})
        if not isinstance(ldp, dict):
            ldp = {}
        panel, point = panel_and_point(r)
        per_class = r.metrics.get("per_class") or []
        reason = collapse_reason(r.metrics) if r.status == "finished" else None
        row: dict[str, Any] = {
            "run_id": r.run_id,
            "config_hash": r.config_hash,
            "backend": r.backend,
            "status": r.status,
            "seed": r.seed,
            "setting": setting_label(r.labels) if r.labels else r.config_hash,
            "panel": panel,
            "point": point,
            "dataset": config["data"]["name"],
            "model": config["model"]["name"],
            "epochs": config["train"].get("epochs"),
            "mechanism": config["privacy"]["mechanism"],
            "recipe": (r.recipe or {}).get("name", config.get("recipe", "harmonised")),
            # "proved" / "claimed, not proved" / "not private" (dpcore.recipes.privacy_claim);
            # empty for a result without recipe.privacy_claim
            "privacy_claim": ((r.recipe or {}).get("privacy_claim") or {}).get("status", ""),
            "target_epsilon": config["privacy"].get("target_epsilon"),
            "noise_multiplier": privacy.get("noise_multiplier"),
            "max_grad_norm": config["privacy"].get("max_grad_norm"),
            "delta": privacy.get("delta"),
            # the steps that ran and their epsilon (a library's loader decides its own);
            # the planned figures beside them
            "steps": ran["steps"],
            "steps_planned": privacy.get("steps"),
            "sampling_rate": ran["sampling_rate"],
            "epsilon": central_epsilon(r),
            "epsilon_rdp": ran["epsilon_rdp"],
            "epsilon_rdp_planned": privacy.get("epsilon_rdp"),
            "epsilon_pld": ran["epsilon_pld"],
            "epsilon_opacus_rdp": library_accountant_epsilon(library, "opacus_rdp"),
            "epsilon_opacus_prv": library_accountant_epsilon(library, "opacus_prv"),
            "epsilon_tf_privacy": library_accountant_epsilon(library, "tf_privacy"),
            "accuracy": r.metrics.get("accuracy"),
            "majority_rate": majority_rate(per_class) if per_class else math.nan,
            "collapsed": reason is not None,
            "collapse_reason": reason or "",
            "n_classes": r.metrics.get("n_classes", len(per_class) or None),
            "accuracy_gap": (r.metrics.get("gaps") or {}).get("accuracy"),
            "recall_gap": (r.metrics.get("gaps") or {}).get("recall"),
            "auc_gap": (r.metrics.get("gaps") or {}).get("auc"),
            "worst_group": (r.metrics.get("per_group") or {}).get("worst_group"),
            "auc": r.metrics.get("auc"),
            "auc_scoring": auc_scoring(r),
            "loss": r.metrics.get("loss"),
            "epoch_seconds": mean_epoch_seconds(r.timing),
            "total_seconds": r.timing.get("total_seconds"),
            "examples_per_second": r.timing.get("examples_per_second"),
            "peak_memory_mb": r.timing.get("peak_memory_mb"),
            # records before dpcore.memory carry no scope: their peak was the process's
            "peak_memory_scope": r.timing.get("peak_memory_scope") or "process",
            "front_end": front_end(r),
            "n_train": r.dataset.get("n_train"),
            "n_test": r.dataset.get("n_test"),
            # the split the metrics are measured on (dpcore.pipeline: "train" for a run that
            # reports training-set figures, eval_split=train)
            "eval_split": eval_split_of(r),
            "data_fingerprint": r.dataset.get("fingerprint"),
            "ldp_epsilon_per_value": ldp.get("epsilon_per_value"),
            "ldp_epsilon_per_image": ldp.get("epsilon_per_image"),
            "ldp_psnr": ldp.get("psnr"),
            "ldp_ssim": ldp.get("ssim"),
        }
        for key in FAITHFULNESS_KEYS:
            row[key] = (r.faithfulness or {}).get(key)
        for column, (entry, key) in SANITY_KEYS.items():
            row[column] = ((r.faithfulness or {}).get(entry) or {}).get(key)
        row["randomisation_check"] = randomisation_verdict(r)
        row["temperature_fit"] = temperature_fit(r)
        ldp_eval = r.metrics.get("ldp_test_inputs") or {}
        row["ldp_test_inputs"] = ldp_eval.get("headline", "")
        for name in ("clean", "privatised"):
            row[f"accuracy_{name}_test"] = (ldp_eval.get(name) or {}).get("accuracy")
        row.update(privacy_columns(r))  # claimed | proved | audited
        if r.audit:
            row["attack_auc"] = r.audit.get("attack_auc")
            row["attack_advantage"] = r.audit.get("advantage")
            row["advantage_bound"] = r.audit.get("bound")
            row["bound_epsilon"], row["bound_accountant"] = audit_bound_epsilon(r.audit)
            loss_threshold = r.audit.get("loss_threshold") or {}
            row["heldout_advantage_ci_low"] = loss_threshold.get("ci_low")
            row["suspected_privacy_bug"] = bool(r.audit.get("suspected_privacy_bug"))
        rows.append(row)
    frame = flag_settings(pd.DataFrame(rows))
    for column in frame.columns:
        if column not in TEXT_COLUMNS and column not in PRIVACY_TEXT_COLUMNS:
            frame[column] = pd.to_numeric(frame[column], errors="coerce")
    # A reading order: per data set and model, mechanism by mechanism (non-private last),
    # epsilon ascending; then the two backends side by side.
    order = [c for c in ("dataset", "model", "epochs", "mechanism", "epsilon", "max_grad_norm",
                         "setting", "backend", "seed") if c in frame.columns]
    if order:
        frame = frame.sort_values(order, kind="stable", na_position="last").reset_index(
            drop=True)
    return frame


def auc_scoring(result: RunResult) -> str:
    """How the run's AUC was scored (:func:`dpcore.scoring.scoring_of`: ``logits`` or
    ``softmax_float32``, the latter for a record that names no method); ``""`` for a run
    without an AUC."""
    auc = result.metrics.get("auc")
    if auc is None or (isinstance(auc, float) and math.isnan(auc)):
        return ""
    return scoring_of(result.metrics)["auc"]


def randomisation_verdict(result: RunResult) -> str:
    """``"passes"`` / ``"fails"`` (the model-randomisation check of the run's Grad-CAM maps,
    :mod:`dpcore.metrics.sanity`), or ``""`` when the run has no check (not computed, or
    its record has none)."""
    check = (result.faithfulness or {}).get("randomisation_check") or {}
    if "passes" not in check:
        return ""
    return "passes" if check["passes"] else "fails"


def temperature_fit(result: RunResult) -> str:
    """The split the run's calibrated faithfulness fitted its temperature on
    (:func:`dpcore.evaluation.calibrated.calibrated_faithfulness_of`): ``"validation"``,
    ``"test"`` (test images outside the faithfulness subset) or ``"faithfulness subset"``
    (half of it); read from ``fit_on`` for a record without ``fit_split``; ``""``
    without calibration."""
    calibrated = (result.faithfulness or {}).get("calibrated") or {}
    if "fit_split" in calibrated:
        return str(calibrated["fit_split"])
    fit_on = str(calibrated.get("fit_on", ""))
    if fit_on.startswith("test images"):
        return "test"
    return "faithfulness subset" if fit_on.startswith("half of") else ""


def per_class_frame(results: Sequence[RunResult]) -> pd.DataFrame:
    """Long table of per-class accuracy (recall) for every run: run_id, backend, seed,
    setting, dataset, class (the class name), accuracy (recall), precision, support."""
    rows = []
    for r in results:
        for entry in r.metrics.get("per_class") or []:
            name = entry.get("name", entry.get("class_name", entry.get("class")))
            if name is None:
                name = str(entry.get("index", ""))
            rows.append({
                "run_id": r.run_id, "backend": r.backend, "seed": r.seed,
                "setting": setting_label(r.labels) if r.labels else r.config_hash,
                "dataset": r.config["data"]["name"], "class": str(name),
                "accuracy": entry.get("recall", entry.get("accuracy")),
                "precision": entry.get("precision"),
                "support": entry.get("support"),
            })
    frame = pd.DataFrame(rows, columns=["run_id", "backend", "seed", "setting", "dataset",
                                        "class", "accuracy", "precision", "support"])
    return apply_flags(frame, flags_of_results(results))  # broken / violation on the labels


#: Suffix of a setting measured on the training set in a by-setting figure whose other
#: settings are measured on the test set (:func:`marked_splits`).
TRAINING_SET_MARK = " [training set]"


def eval_split_of(result: RunResult) -> str:
    """The split ``result``'s metrics are measured on: "train" for an ``eval_split: train``
    run (:mod:`dpcore.pipeline` records it in the data set's extra), else "test"."""
    return str((result.dataset.get("extra") or {}).get("eval_split", "test"))


def marked_splits(frame: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """``frame`` (runs or history rows) for a figure and the split its axis names: "test"
    when every run is measured on the test set, "training-set" when every run is measured on
    the training set; otherwise settings measured on the training set (``eval_split:
    train``) end in :data:`TRAINING_SET_MARK` (their setting and point: the row label or the
    legend entry) and the axis says so, so that a training-set figure is never read off a
    "test accuracy" axis."""
    if "eval_split" not in frame or not (frame["eval_split"] == "train").any():
        return frame, "test"
    on_train = frame["eval_split"] == "train"
    if on_train.all():
        return frame, "training-set"
    marked = frame.assign(**{column: frame[column].where(
        ~on_train, frame[column].astype(str) + TRAINING_SET_MARK)
        for column in ("setting", "point")})
    return marked, f"test-set (training set where marked{TRAINING_SET_MARK})"


def history_frame(results: Sequence[RunResult]) -> pd.DataFrame:
    """One row per (run, epoch) from each run's ``history``: run_id, backend, seed, setting,
    panel, point, eval_split (the split the "test" figures are measured on: "train" for an
    ``eval_split: train`` run), epoch, test_accuracy (fraction), test_loss and loss (mean
    cross-entropy, nats), epsilon_spent."""
    rows = []
    for r in results:
        panel, point = panel_and_point(r)
        for record in r.history or []:
            rows.append({
                "run_id": r.run_id, "backend": r.backend, "seed": r.seed,
                "setting": setting_label(r.labels) if r.labels else r.config_hash,
                "panel": panel, "point": point,
                "eval_split": eval_split_of(r),
                "epoch": record.get("epoch"),
                "test_accuracy": record.get("test_accuracy"), "test_loss": record.get("test_loss"),
                "loss": record.get("loss"), "epsilon_spent": record.get("epsilon_spent"),
            })
    frame = pd.DataFrame(rows, columns=["run_id", "backend", "seed", "setting", "panel",
                                        "point", "eval_split", "epoch", "test_accuracy",
                                        "test_loss", "loss", "epsilon_spent"])
    for column in ("epoch", "test_accuracy", "test_loss", "loss", "epsilon_spent"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce")
    return apply_flags(frame, flags_of_results(results))  # broken / violation in the legend


def curves_frame(results: Sequence[RunResult]) -> pd.DataFrame:
    """One row per (run, curve, point) of the deletion / insertion curves stored in
    ``faithfulness`` (``curve_fractions`` and the mean ``deletion_curve`` /
    ``insertion_curve`` over the faithfulness subset): run_id, backend, seed, setting, panel,
    point, curve ("deletion" or "insertion"), fraction (of pixels), probability."""
    rows = []
    for r in results:
        faith = r.faithfulness or {}
        fractions = faith.get("curve_fractions")
        if not fractions:
            continue
        panel, point = panel_and_point(r)
        for curve in ("deletion", "insertion"):
            values = faith.get(f"{curve}_curve") or []
            for fraction, value in zip(fractions, values, strict=False):
                rows.append({"run_id": r.run_id, "backend": r.backend, "seed": r.seed,
                             "setting": setting_label(r.labels) if r.labels else r.config_hash,
                             "panel": panel, "point": point, "curve": curve,
                             "fraction": fraction, "probability": value})
    frame = pd.DataFrame(rows, columns=["run_id", "backend", "seed", "setting", "panel",
                                        "point", "curve", "fraction", "probability"])
    return apply_flags(frame, flags_of_results(results))  # broken / violation on the labels


__all__ = ["FAITHFULNESS_KEYS", "NOT_RECORDED", "SANITY_KEYS", "audit_bound_epsilon",
           "curves_frame", "front_end", "front_end_mismatches", "history_frame",
           "panel_and_point", "per_class_frame",
           "randomisation_verdict", "results_frame", "temperature_fit"]
