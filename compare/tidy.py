"""Tidy pandas tables of a results store, for notebooks (``compare.api.results`` and friends).

Every value comes from a stored :class:`~dpcore.results.RunResult`; nothing is recomputed
except the two derived columns named below. Column names are stable:

* identity: ``run_id``, ``config_hash``, ``backend``, ``seed``, ``status``, ``grid``,
  ``setting`` (the grid cell's axis labels joined, else the config hash), ``error``,
  ``started_at``, ``finished_at``, ``checkpoint`` (relative to the store root) and
  ``label.<axis>`` for each grid axis;
* the configuration as run, flattened: ``data.name``, ``model.name``, ``privacy.mechanism``,
  ``privacy.target_epsilon``, ``train.lr``... (every field of the RunConfig; ``seed`` above);
* privacy as accounted (``RunResult.privacy``): ``noise_multiplier`` (the one used, calibrated
  or not), ``delta``, ``steps``, ``sampling_rate``... and the epsilons: ``epsilon_rdp``,
  ``epsilon_pld`` (shared accountant, dp_accounting), ``epsilon_<name>`` for each library
  accountant (``epsilon_opacus_rdp``, ``epsilon_opacus_prv``, ``epsilon_tf_privacy``, also
  found under the longer key a library recipe records: :func:`library_accountant_epsilon`;
  NaN where the library has none), and ``epsilon`` (derived: the central DP-SGD epsilon the
  reports plot, RDP else PLD; ``inf`` for non-private and local-DP runs);
* every scalar metric under its own name (``accuracy``, ``auc``, ``loss``...), nested ones
  dotted (``gaps.accuracy``, ``per_group.worst_group``); list-valued metrics (per class,
  curves) are left out;
* ``faithfulness.*``, ``audit.*``, ``ldp.*``, ``timing.*`` (plus ``timing.epoch_seconds_mean``,
  derived: mean seconds per epoch without the first, compile/trace, epoch when there are
  more), ``dataset.*``, ``perf.*`` and ``versions.*`` scalars.

Missing values are NaN (numbers) or None (text); ``epsilon`` of a non-private run is ``inf``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from compare.grid import in_axis_order, setting_label
from dpcore.as_run import as_run_privacy
from dpcore.errors import DataError
from dpcore.mechanisms import is_non_private, privatises_images
from dpcore.results import RESULT_FILE, ResultsStore, RunResult

#: Library accountants whose epsilon columns are always present (NaN where not computed).
LIBRARY_EPSILONS = ("opacus_rdp", "opacus_prv", "tf_privacy")
#: Keys of ``RunResult.privacy`` not copied as plain columns (epsilons get their own names,
#: the DpEvent is a nested description, ``mechanism`` repeats ``privacy.mechanism``).
_PRIVACY_SKIPPED = ("epsilon_rdp", "epsilon_pld", "library_epsilon", "dp_event", "ldp",
                    "mechanism")
#: Identity columns that lead every table, in this order.
IDENTITY_COLUMNS = ("run_id", "config_hash", "backend", "seed", "status", "grid", "setting")


def load_results(out: str | Path) -> list[RunResult]:
    """The readable RunResults of the store at ``out``, sorted by run id, their labels in the
    axis order of the bundled preset that wrote them (:func:`compare.grid.in_axis_order`).

    Raises:
        DataError: ``out`` holds no ``runs/<run id>/result.json`` (the message names the path).
    """
    root = Path(out)
    runs = root / "runs"
    if not runs.is_dir() or not any(runs.glob(f"*/{RESULT_FILE}")):
        raise DataError(f"{root} holds no runs (expected {runs}/<run id>/{RESULT_FILE})")
    return in_axis_order(ResultsStore(root).list_runs())


def flatten(mapping: Mapping[str, Any] | None, prefix: str = "") -> dict[str, Any]:
    """Scalars of a nested mapping with dotted keys (``{"a": {"b": 1}}`` -> ``{"a.b": 1}``);
    lists are left out."""
    out: dict[str, Any] = {}
    for key, value in (mapping or {}).items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{name}."))
        elif not isinstance(value, list | tuple):
            out[name] = value
    return out


def central_epsilon(result: RunResult) -> float:
    """The epsilon plotted for a run: the shared accountant's DP-SGD epsilon of the steps that
    ran (:func:`as_run_privacy`), RDP (PLD where RDP has no bound); ``inf`` for runs trained
    without DP-SGD (``none``, ``ldp``); NaN if the run recorded none (e.g. it failed before
    accounting)."""
    privacy = result.privacy
    if is_non_private(privacy.get("mechanism")) or privatises_images(privacy.get("mechanism")):
        return math.inf
    ran = as_run_privacy(privacy)
    for key in ("epsilon_rdp", "epsilon_pld"):
        if ran.get(key) is not None:
            return float(ran[key])
    return math.nan


def mean_epoch_seconds(timing: Mapping[str, Any]) -> float:
    """Mean seconds per epoch, without the first (compile/trace) epoch when there are more;
    NaN without epoch times. (numpy's mean: the reports' figures, byte for byte.)"""
    seconds = [float(s) for s in timing.get("epoch_seconds") or [] if s is not None]
    if len(seconds) > 1:
        seconds = seconds[1:]
    return float(np.mean(seconds)) if seconds else math.nan


def library_accountant_epsilon(library: Mapping[str, Any], name: str) -> float | None:
    """A library accountant's epsilon ``name`` (one of :data:`LIBRARY_EPSILONS`) from a
    RunResult's ``privacy.library_epsilon``: the key itself (harmonised runs) or a key that
    names it with the API that computed it (``recipe: library`` runs, e.g.
    ``tf_privacy_compute_dp_sgd_privacy``, ``opacus_prv (PrivacyEngine.accountant)``); None
    where the run has none."""
    if name in library:
        return library[name]
    for key, value in library.items():
        if key.startswith((f"{name}_", f"{name} ")):
            return value
    return None


def identity(result: RunResult) -> dict[str, Any]:
    """The identity and configuration columns of one run (see the module docstring)."""
    row: dict[str, Any] = {
        "run_id": result.run_id, "config_hash": result.config_hash, "backend": result.backend,
        "seed": result.seed, "status": result.status, "grid": result.grid,
        "setting": setting_label(result.labels) if result.labels else result.config_hash,
    }
    row.update({f"label.{axis}": value for axis, value in result.labels.items()})
    config = {k: v for k, v in result.config.items() if k not in ("seed", "version")}
    row.update(flatten(config))
    return row


def _put(row: dict[str, Any], values: Mapping[str, Any], section: str) -> None:
    """Add ``values`` to ``row``; a name already taken gets the ``section.`` prefix."""
    for key, value in values.items():
        row[f"{section}.{key}" if key in row else key] = value


def result_row(result: RunResult) -> dict[str, Any]:
    """One run as one flat row with every column of :func:`results_table`."""
    row = identity(result)
    row.update({"error": result.error, "started_at": result.started_at,
                "finished_at": result.finished_at, "checkpoint": result.checkpoint})
    privacy = result.privacy
    library = privacy.get("library_epsilon") or {}
    row["epsilon"] = central_epsilon(result)
    row["epsilon_rdp"] = privacy.get("epsilon_rdp")
    row["epsilon_pld"] = privacy.get("epsilon_pld")
    for name in sorted(set(LIBRARY_EPSILONS) | set(library)):
        row[f"epsilon_{name}"] = library_accountant_epsilon(library, name)
    _put(row, flatten({k: v for k, v in privacy.items() if k not in _PRIVACY_SKIPPED}),
         "accounting")
    _put(row, flatten(result.metrics), "metrics")
    ldp = result.dataset.get("ldp") or privacy.get("ldp") or {}
    row.update(flatten(ldp, "ldp."))
    row.update(flatten(result.faithfulness, "faithfulness."))
    row.update(flatten(result.audit, "audit."))
    row.update(flatten(result.timing, "timing."))
    row["timing.epoch_seconds_mean"] = mean_epoch_seconds(result.timing)
    row.update(flatten({k: v for k, v in result.dataset.items() if k != "ldp"}, "dataset."))
    row.update(flatten(result.perf, "perf."))
    row.update(flatten(result.versions, "versions."))
    return row


def frame(rows: Iterable[dict[str, Any]], leading: Iterable[str] = IDENTITY_COLUMNS
          ) -> pd.DataFrame:
    """A DataFrame of ``rows``, columns in first-seen order (pandas makes a column of numbers
    and missing values float with NaN; missing text stays None). No rows: the ``leading``
    columns only."""
    table = pd.DataFrame(list(rows))
    return pd.DataFrame(columns=list(leading)) if table.empty else table


def results_table(results: Iterable[RunResult]) -> pd.DataFrame:
    """One row per run (see the module docstring for the columns)."""
    return frame(result_row(r) for r in results)


def history_table(results: Iterable[RunResult]) -> pd.DataFrame:
    """One row per run and epoch: the identity and configuration columns, ``epsilon`` (the
    run's final central epsilon) and every field of the epoch record (``epoch``, ``step``,
    ``loss``, ``test_accuracy``, ``test_loss``, ``epsilon_spent`` (epsilon spent so far,
    shared accountant), ``seconds``...)."""
    rows = []
    for result in results:
        base = identity(result)
        base["epsilon"] = central_epsilon(result)
        for record in result.history:
            row = dict(base)
            _put(row, flatten(record), "history")
            rows.append(row)
    return frame(rows)


def faithfulness_table(results: Iterable[RunResult]) -> pd.DataFrame:
    """One row per run that has Grad-CAM faithfulness metrics: the identity and configuration
    columns, ``epsilon``, ``accuracy`` and every scalar faithfulness metric under its own name
    (``average_drop`` and ``increase_in_confidence`` in %, ``masked_score``,
    ``deletion_auc``, ``insertion_auc``, ``subset_seed``...)."""
    rows = []
    for result in results:
        if not result.faithfulness:
            continue
        row = identity(result)
        row["epsilon"] = central_epsilon(result)
        row["accuracy"] = result.metrics.get("accuracy")
        _put(row, flatten(result.faithfulness), "faithfulness")
        rows.append(row)
    return frame(rows)


def results(out: str | Path) -> pd.DataFrame:
    """One tidy row per run of the results folder ``out`` (written by ``compare`` or
    ``train``): the flattened config (``data.name``, ``privacy.target_epsilon``...),
    ``backend``, ``seed``, ``status``, every scalar metric (``accuracy``, ``auc``...), every
    epsilon (``epsilon_rdp``, ``epsilon_pld``, ``epsilon_opacus_rdp``, ``epsilon_opacus_prv``,
    ``epsilon_tf_privacy``, and ``epsilon``: the one reports plot, ``inf`` if non-private),
    timing (``timing.total_seconds`` in s, ``timing.examples_per_second``,
    ``timing.peak_memory_mb`` in MiB...), and ``run_dir`` (the run's folder, for
    :func:`compare.api.load_model`). All columns: the module docstring. Rows sorted by run id.

    Raises:
        DataError: ``out`` holds no runs.
    """
    table = results_table(load_results(out))
    table.insert(1, "run_dir", [str(Path(out) / "runs" / rid) for rid in table["run_id"]])
    return table


def history(out: str | Path) -> pd.DataFrame:
    """One row per run and epoch (``epoch``, ``step``, ``loss``, ``test_accuracy``,
    ``epsilon_spent`` so far, ``seconds``...) with the run's identity and config columns, of
    the results folder ``out`` (:func:`history_table`).

    Raises:
        DataError: ``out`` holds no runs.
    """
    return history_table(load_results(out))


def faithfulness(out: str | Path) -> pd.DataFrame:
    """One row per run of the results folder ``out`` with Grad-CAM faithfulness metrics
    (``average_drop``, ``increase_in_confidence`` in %, ``masked_score``, ``deletion_auc``,
    ``insertion_auc``) next to ``epsilon`` and ``accuracy``; runs without them (text models,
    or ``evaluation.faithfulness: false``) have no row (:func:`faithfulness_table`).

    Raises:
        DataError: ``out`` holds no runs.
    """
    return faithfulness_table(load_results(out))
