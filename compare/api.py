"""The bench from Python: the ``dpcompare`` commands as functions, and tidy results.

This is the documented, stable Python interface (the CLI is a thin layer over it: one code
path). Typical notebook use::

    from compare import api

    api.epsilon(n=60000, batch_size=256, noise_multiplier=1.1, epochs=15)   # what it costs
    store = api.compare("smoke", out="runs/smoke")      # run a grid on both backends
    df = api.results("runs/smoke")                       # one tidy row per run
    model = api.load_model(df.loc[0, "run_dir"], backend="torch")  # either framework
    maps = api.gradcam(model, images)                    # Grad-CAM maps [N, H, W] in [0, 1]

Functions:

* :func:`epsilon`, :func:`calibrate` — ``dpcompare epsilon``;
* :func:`train` — ``dpcompare train``; :func:`compare` — ``dpcompare compare``;
* :func:`results`, :func:`history`, :func:`faithfulness` — tidy pandas tables of a results
  folder (columns: :mod:`compare.tidy`); :func:`report` — ``dpcompare report``;
  :func:`rebuild_report` — ``dpcompare report --records`` (a report from its committed records);
* :func:`load_model`, :func:`predict_proba`, :func:`gradcam`, :func:`load_data` — use a
  stored model and its data;
* :func:`datasets`, :func:`dataset_rows`, :func:`download` — ``dpcompare datasets``;
* :func:`privatise` — ``dpcompare ldp``; :func:`audit` — ``dpcompare audit``;
  :func:`bench` — ``dpcompare bench``.

The backends (``tfpipe``, ``torchpipe``) are reached only through
:func:`dpcore.backend.load_backend`.

Bad input raises :class:`~dpcore.errors.ConfigError` or :class:`~dpcore.errors.DataError`
(both :class:`~dpcore.errors.DpCompareError`) with the one-line message the CLI prints; library
code never exits the interpreter. Frameworks (TensorFlow, PyTorch) are imported only by the
calls that need them.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compare.preflight import check_run
from compare.runner import GridOutcome
from dpcore.backend import BACKENDS, load_backend
from dpcore.config import PerfSpec, RunConfig, calibration_accountants
from dpcore.errors import ConfigError, DataError, DpCompareError
from dpcore.mechanisms import cli_names, dpsgd_names, get_mechanism, noises_gradients
from dpcore.results import RESULT_FILE, ResultsStore, RunResult, run_id

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from compare.grid import Grid
    from dpcore.data.dataset import Dataset
    from dpcore.trained import TrainedModel

__all__ = [
    "Store", "as_config", "calibrate", "compare", "datasets", "download", "epsilon",
    "faithfulness", "gradcam", "history", "load_data", "load_grid", "load_model",
    "predict_proba", "rebuild_report", "report", "resolve_config", "results", "train",
    "with_train_defaults",
]


def mechanisms() -> dict[str, str]:
    """Noise distributions of :func:`epsilon` / :func:`calibrate`, by their CLI names: the
    registered DP-SGD mechanisms (:data:`dpcore.mechanisms.DP_MECHANISMS`), CLI name ->
    config name (``gaussian`` -> ``dpsgd-gaussian``...)."""
    return cli_names(dpsgd_names())


#: Why a calibration accountant does not know a mechanism its entry does not list.
ACCOUNTANT_LIMITS = {"prv": "Opacus's PRV accountant knows Gaussian noise only",
                     "rdp": "dp_accounting's RDP accountant has no subsampled-Laplace bound"}
#: Results folder of :func:`train` when ``out`` is not given (as ``dpcompare train``).
DEFAULT_TRAIN_OUT = "dpcompare-runs"
#: How :func:`accounting_figures` names each parameter in its error messages (Python names).
PYTHON_NAMES = {name: name for name in (
    "n", "batch_size", "sampling_rate", "noise_multiplier", "target_epsilon", "epochs",
    "steps", "delta", "mechanism", "calibrate_with")}
#: Accountants that can turn a target epsilon into a noise multiplier: dp_accounting's RDP
#: and PLD, and Opacus's PRV (what ``make_private_with_epsilon`` uses; imports torch): the
#: accountants the registered mechanisms list (:func:`dpcore.config.calibration_accountants`).
CALIBRATE_WITH = calibration_accountants()

Log = Callable[[str], None]

# TensorFlow's C++ start-up logging off unless the user set it, as the CLI does.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


# --- accounting: dpcompare epsilon -------------------------------------------------------

def epsilon(
    n: int, batch_size: int, noise_multiplier: float, *, epochs: float | None = None,
    steps: int | None = None, sampling_rate: float | None = None, delta: float | None = None,
    mechanism: str = "gaussian", library: bool = True,
) -> dict[str, Any]:
    """What epsilon a DP-SGD setting gives (``dpcompare epsilon --noise-multiplier``).

    Args:
        n: training set size N (examples).
        batch_size: expected batch size B (examples per step).
        noise_multiplier: noise std (Laplace: scale) divided by the clip norm, >= 0.
        epochs: expected passes over the data (steps = ceil(epochs * round(1/q))); give
            exactly one of ``epochs`` and ``steps``.
        steps: number of noised steps.
        sampling_rate: q in (0, 1]; default B / N.
        delta: target delta in (0, 1); default 1/N rounded down to a power of ten.
        mechanism: ``gaussian`` or ``laplace``.
        library: also compute Opacus's (RDP, PRV) and TF Privacy's own epsilon (imports
            both frameworks); False leaves them None.

    Returns:
        The object ``dpcompare epsilon --json`` prints (with ``inf`` where the JSON has null):
        ``epsilon`` (``rdp``, ``pld`` from dp_accounting; ``opacus_rdp``, ``opacus_prv``;
        ``tf_privacy``: TF Privacy's RDP on exactly these steps and q; ``tf_privacy_user``:
        ``compute_dp_sgd_privacy(n, batch_size, noise, epochs, delta)`` as its users call it,
        which derives its own steps; None where not computed), ``noise_multiplier``, ``calibrated``,
        ``calibration_accountant``, ``mechanism``, ``steps``, ``sampling_rate``, ``delta``,
        ``n``, ``batch_size`` and ``notes`` (list of str).

    Raises:
        ConfigError: a value out of range (the message names it and the valid range).
    """
    return accounting_figures(
        n=n, batch_size=batch_size, noise_multiplier=noise_multiplier, epochs=epochs,
        steps=steps, sampling_rate=sampling_rate, delta=delta, mechanism=mechanism,
        library=library)


def calibrate(
    n: int, batch_size: int, target_epsilon: float, *, epochs: float | None = None,
    steps: int | None = None, sampling_rate: float | None = None, delta: float | None = None,
    mechanism: str = "gaussian", library: bool = True, calibrate_with: str | None = None,
) -> dict[str, Any]:
    """The noise multiplier that reaches ``target_epsilon`` (``dpcompare epsilon
    --target-epsilon``); the result's ``noise_multiplier`` is it, ``epsilon`` what it gives.

    Arguments and the returned object as :func:`epsilon`; ``target_epsilon`` is a finite
    epsilon > 0 at ``delta``; ``calibrate_with`` the accountant that calibrates: ``rdp``,
    ``pld`` (dp_accounting) or ``prv`` (Opacus's, as ``make_private_with_epsilon``; imports
    torch); default RDP for Gaussian, PLD for Laplace. A target beyond what the smallest
    calibrated noise gives raises ConfigError naming the largest reachable one.
    """
    return accounting_figures(
        n=n, batch_size=batch_size, target_epsilon=target_epsilon, epochs=epochs, steps=steps,
        sampling_rate=sampling_rate, delta=delta, mechanism=mechanism, library=library,
        calibrate_with=calibrate_with)


def accounting_figures(
    *, n: int, batch_size: int, noise_multiplier: float | None = None,
    target_epsilon: float | None = None, epochs: float | None = None,
    steps: int | None = None, sampling_rate: float | None = None, delta: float | None = None,
    mechanism: str = "gaussian", library: bool = True, calibrate_with: str | None = None,
    names: Mapping[str, str] = PYTHON_NAMES,
) -> dict[str, Any]:
    """The shared core of :func:`epsilon` and :func:`calibrate` (give exactly one of
    ``noise_multiplier`` and ``target_epsilon``). ``names`` spells each parameter in error
    messages (the CLI passes its option names, e.g. ``--batch-size``)."""
    from dpcore.accounting import (
        calibrate_noise_multiplier,
        calibration_accountant,
        check_noise_multiplier,
        dpsgd_event,
        epsilon_pld,
        epsilon_rdp,
    )
    from dpcore.config import check_delta_below_one_over_n, default_delta

    def bad(key: str, value: Any, valid: str) -> ConfigError:
        return ConfigError(f"{names[key]}={value!r} is not valid; valid: {valid}")

    known = mechanisms()
    if mechanism not in known:
        raise bad("mechanism", mechanism, ", ".join(sorted(known)))
    if (noise_multiplier is None) == (target_epsilon is None):
        raise ConfigError(f"give exactly one of {names['noise_multiplier']} and "
                          f"{names['target_epsilon']}")
    if (epochs is None) == (steps is None):
        raise ConfigError(f"give exactly one of {names['epochs']} and {names['steps']}")
    if n is None or isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise bad("n", n, "an integer >= 1")
    if not 1 <= batch_size <= n:
        raise bad("batch_size", batch_size, f"1..{n}")
    q = sampling_rate if sampling_rate is not None else batch_size / n
    notes = []
    if sampling_rate is not None and not math.isclose(sampling_rate, batch_size / n,
                                                      rel_tol=1e-3):
        notes.append(f"the sampling rate {sampling_rate:g} is used, not batch size / n = "
                     f"{batch_size}/{n} = {batch_size / n:.4g} (the batch size enters only "
                     "TF Privacy's compute_dp_sgd_privacy(n, batch, epochs) figure)")
    if not 0 < q <= 1 or math.isnan(q):
        raise bad("sampling_rate", q, "(0, 1]")
    delta = delta if delta is not None else default_delta(n)
    if not 0 < delta < 1:
        raise bad("delta", delta, "(0, 1)")
    check_delta_below_one_over_n(delta, n, key=names["delta"])
    if steps is not None:
        if steps < 1:
            raise bad("steps", steps, "an integer >= 1")
    else:
        if not 0 < epochs < math.inf:  # type: ignore[operator]
            raise bad("epochs", epochs, "a finite number > 0")
        steps = max(1, math.ceil(epochs * max(1, round(1.0 / q)) - 1e-9))  # type: ignore[operator]
    dp_mechanism = known[mechanism]
    accountants = get_mechanism(dp_mechanism).accountants
    if calibrate_with is not None and calibrate_with not in CALIBRATE_WITH:
        raise bad("calibrate_with", calibrate_with, ", ".join(CALIBRATE_WITH))
    if calibrate_with is not None and target_epsilon is None:
        raise ConfigError(f"{names['calibrate_with']} applies to {names['target_epsilon']} "
                          f"only; valid: drop it, or give {names['target_epsilon']}")
    if calibrate_with is not None and calibrate_with not in accountants:
        raise bad("calibrate_with", calibrate_with,
                  f"{' or '.join(accountants)} ({ACCOUNTANT_LIMITS.get(calibrate_with, '')})")
    if target_epsilon is not None:
        if not target_epsilon > 0 or math.isinf(target_epsilon):
            raise bad("target_epsilon", target_epsilon, "a finite > 0")
        from compare.calibrators import load_calibrator

        load_calibrator(calibrate_with)
        noise = calibrate_noise_multiplier(dp_mechanism, target_epsilon, delta, q, steps,
                                           accountant=calibrate_with)
    else:
        if not 0 <= noise_multiplier < math.inf:  # type: ignore[operator]
            # inf: no accountant terminates
            raise bad("noise_multiplier", noise_multiplier, "a finite number >= 0")
        check_noise_multiplier(dp_mechanism, noise_multiplier, key=names["noise_multiplier"])
        noise = noise_multiplier
    event = dpsgd_event(dp_mechanism, noise, q, steps)
    epsilons: dict[str, float | None] = {
        "rdp": epsilon_rdp(event, delta),
        "pld": epsilon_pld(event, delta),
        "opacus_rdp": None,
        "opacus_prv": None,
        "tf_privacy": None,
        "tf_privacy_user": None,
    }
    if epsilons["pld"] is None and noise > 0:
        notes.append("PLD not computed: dp_accounting's grid fails numerically at this "
                     "setting (epsilon about 0, or in the millions); the RDP figure stands")
    if not get_mechanism(dp_mechanism).library_accountant:
        notes.append(f"Opacus and TF Privacy do not account {dp_mechanism}: no library "
                     "figures")
        if epsilons["rdp"] is None:
            notes.append("dp_accounting's RDP accountant has no subsampled-Laplace bound")
    elif noise == 0:
        notes.append("noise multiplier 0: not private")
    elif library:
        user_epochs = epochs if epochs is not None else steps * batch_size / n
        for name in ("torch", "tf"):  # each library's own accountants, via its backend
            epsilons.update(load_backend(name).accountant_epsilons(
                noise, q, steps, delta, n=n, batch_size=batch_size, epochs=user_epochs))
        if epsilons["opacus_prv"] is None:
            notes.append("Opacus PRV not computed: at this noise its grid would need more "
                         "than a few hundred MB (epsilon is in the thousands or more)")
    calibrated = target_epsilon is not None
    return {
        "epsilon": epsilons,
        "noise_multiplier": noise,
        "calibrated": calibrated,
        "calibration_accountant": (calibrate_with or calibration_accountant(dp_mechanism))
                                  if calibrated else None,
        "mechanism": dp_mechanism,
        "steps": steps,
        "sampling_rate": q,
        "delta": delta,
        "n": n,
        "batch_size": batch_size,
        "notes": notes,
    }


# --- training: dpcompare train -----------------------------------------------------------

def as_config(config: RunConfig | Mapping[str, Any] | str | Path) -> RunConfig:
    """A :class:`RunConfig` from itself, a (partial) config mapping, a YAML/JSON config file,
    or a run folder (its ``result.json``'s config).

    Raises:
        ConfigError: unknown keys, bad values, a missing or unreadable file.
    """
    if isinstance(config, RunConfig):
        return config
    if isinstance(config, Mapping):
        return RunConfig.from_dict(config)
    if isinstance(config, str | Path):
        path = Path(config)
        if path.is_dir():
            result = _read_run(path)
            return RunConfig.from_dict(result.config)
        return RunConfig.from_file(path)
    raise ConfigError(f"config of type {type(config).__name__} is not valid; valid: a "
                      "RunConfig, a mapping, or the path of a YAML/JSON config file")


def resolve_config(config: RunConfig | Mapping[str, Any] | str | Path,
                   backend: str | None = None) -> tuple[RunConfig, dict[str, Any]]:
    """:func:`as_config`, with the bench's defaults (:func:`dpcore.defaults.fill_defaults`:
    tanh, SGD step size and momentum, batch, epochs, digits at 16x16, and under ``recipe:
    library`` the sampling of ``backend``'s library) filled in where a partial mapping or
    config file gives no value; returns the config and ``{dotted key: value}`` of what was
    filled. A :class:`RunConfig` or a run folder is complete: used as it is, nothing filled."""
    from dpcore.config import load_mapping_file
    from dpcore.defaults import fill_defaults

    if isinstance(config, Mapping) or (
            isinstance(config, str | Path) and not Path(config).is_dir()):
        raw = config if isinstance(config, Mapping) else load_mapping_file(config)
        completed, filled = fill_defaults(raw, backend)
        return RunConfig.from_dict(completed), filled
    return as_config(config), {}


def with_train_defaults(config: RunConfig | Mapping[str, Any] | str | Path,
                        backend: str | None = None) -> RunConfig:
    """The config of :func:`resolve_config` (without the record of what was filled)."""
    return resolve_config(config, backend)[0]


def _check_backend(backend: str) -> str:
    """The backend ``backend`` names (aliases such as ``opacus`` or ``tensorflow`` accepted:
    :func:`dpcore.names.resolve_backend`), else ConfigError."""
    from dpcore.names import resolve_backend

    return resolve_backend(backend, BACKENDS)


def _writable_folder(path: str | Path, name: str, label: str | None = None) -> Path:
    """``path`` if it can become a writable folder (nothing is created), else ConfigError
    naming it as ``label`` (default ``name``) and advising ``name``."""
    from compare.cli.common import check_output_folder

    try:
        return check_output_folder(path, name, label)
    except DpCompareError as exc:
        raise ConfigError(str(exc)) from exc


def train(
    config: RunConfig | Mapping[str, Any] | str | Path, backend: str, *,
    out: str | Path | None = None, data_dir: str | Path | None = None,
    perf: PerfSpec | None = None, faithfulness_subset: int = 500, progress: bool = False,
    log: Log | None = None, dry_run: bool = False,
) -> Any:
    """Train one model with one backend and keep it (``dpcompare train``).

    Writes ``OUT/runs/<config_hash>-<backend>/result.json`` (the returned RunResult, whose
    ``checkpoint`` is relative to OUT) and ``checkpoint.npz`` (framework-neutral weights that
    load into either backend, see :func:`load_model`). A run with the same config and backend
    in OUT is overwritten.

    Args:
        config: a :class:`RunConfig` (used as it is), or a (partial) config mapping or
            YAML/JSON file, whose missing hyper-parameters take the tuned defaults of
            :mod:`dpcore.defaults` (as ``dpcompare train``; :func:`with_train_defaults`).
        backend: ``tf`` (Keras + TensorFlow Privacy) or ``torch`` (PyTorch + Opacus).
        out: the results folder (default ``./dpcompare-runs``, as the CLI).
        data_dir: the data root (default ``$DPCOMPARE_DATA_DIR``, else ``~/.dpcompare/data``).
        perf: performance-only switches (engine, threads, chunk size); never change the result
            beyond float tolerance and are not part of the config hash.
        faithfulness_subset: Grad-CAM faithfulness metrics on a fixed seeded subset of this
            many test images (image conv models); 0 skips them.
        progress: a progress bar per epoch (shown only when stderr is a terminal).
        log: receives one line describing the run before training (:func:`start_line`: the
            privacy, the steps and every hyper-parameter, those filled from the defaults
            marked) and, when no bar is shown, one line per epoch; None is silent.
        dry_run: check everything (config, names, data, the model's shape, the privacy plan,
            ``out``), train and write nothing, and return the start line (a str).

    Returns:
        The stored RunResult (``.config`` its config mapping, ``.run_config`` the
        :class:`RunConfig`, ``.defaults`` the keys filled from the defaults); with
        ``dry_run``, the start line.

    Raises:
        ConfigError: a bad config, backend or subset size, or an impossible privacy setting
            (checked before anything is written).
        DataError: the data set or data root is missing or malformed.
        DpCompareError: ``out`` is not writable.
    """
    from compare.training import Evaluation, epoch_line_logger, train_and_record
    from dpcore.names import check_names
    from dpcore.pipeline import prepare_dataset
    from dpcore.recipes import check_backend_recipe

    backend = _check_backend(backend)
    config, filled = resolve_config(config, backend)
    check_names(config)  # a typo is named (with the closest name) before anything is loaded
    check_backend_recipe(config, backend)  # before anything is loaded or written
    perf = perf or PerfSpec()
    if isinstance(faithfulness_subset, bool) or not isinstance(faithfulness_subset, int) or (
            faithfulness_subset < 0):
        raise ConfigError(f"faithfulness_subset={faithfulness_subset!r} is not valid; valid: "
                          "an integer >= 0 (0 skips the metrics)")
    if dry_run:
        _writable_folder(out if out is not None else DEFAULT_TRAIN_OUT, "--out", "output folder")
        dataset = prepare_dataset(config, data_dir)
        return start_line(config, backend, dataset, check_run(config, dataset), filled)
    store = ResultsStore(out if out is not None else DEFAULT_TRAIN_OUT)
    # checked, nothing created yet (the store is created once every check passed)
    _writable_folder(store.root, "--out", "output folder")
    dataset = prepare_dataset(config, data_dir)
    plan = check_run(config, dataset)  # fail fast on impossible settings, before the line
    store.ensure_writable()  # every check passed: now the store may be created
    callbacks = []
    if log is not None:
        log(start_line(config, backend, dataset, plan, filled))
        if not (progress and sys.stderr.isatty()):  # the bar shows progress otherwise
            epochs = -(-plan.batches.steps // plan.batches.steps_per_epoch)
            callbacks.append(epoch_line_logger(epochs, log))
    result, _path = train_and_record(
        config, dataset, backend, store, perf=perf,
        evaluation=Evaluation(faithfulness_subset=faithfulness_subset), progress=progress,
        callbacks=callbacks, defaults=filled)
    return result


def start_line(config: RunConfig, backend: str, dataset: Dataset, plan: Any,
               filled: Mapping[str, Any]) -> str:
    """The one line ``train`` prints before training: model, data, the privacy (noise and the
    epsilon it plans, by the shared RDP and PLD accountants), steps, and every
    hyper-parameter in force with those filled from the defaults marked ``(default)``. A
    library recipe may run other steps than planned (Opacus's loader): the summary then gives
    the epsilon of what ran beside the planned one."""
    from dpcore.defaults import describe_settings

    def figures(rdp: float | None, pld: float | None) -> str:
        shown = [f"{kind} {eps:.4g}" for kind, eps in (("RDP", rdp), ("PLD", pld))
                 if eps is not None]
        return ", ".join(shown) or "n/a"

    privacy = plan.mechanism
    steps = f"{plan.batches.steps} steps of B={plan.batches.expected_batch_size}"
    if noises_gradients(plan.mechanism):
        privacy += (f" noise {plan.noise_multiplier:.4g}, epsilon "
                    f"{figures(plan.epsilon_rdp, plan.epsilon_pld)} planned")
        ran = _library_as_run(config, backend, plan, len(dataset.x_train))
        if ran is not None:  # the library's loader runs other steps than planned
            ran_steps, rate, rdp, pld = ran
            privacy = (f"{plan.mechanism} noise {plan.noise_multiplier:.4g}, epsilon "
                       f"{figures(rdp, pld)} for the {ran_steps} steps at q={rate:.4g} its "
                       f"library runs ({figures(plan.epsilon_rdp, plan.epsilon_pld)} planned "
                       f"for {plan.batches.steps})")
            steps = f"{ran_steps} steps of B={plan.batches.expected_batch_size}"
    return (f"{backend}: {config.model.name} on {dataset.name} "
            f"({len(dataset.x_train)} train / {len(dataset.x_test)} test), {privacy}, "
            f"{steps}; {describe_settings(config, filled)}")


def _library_as_run(config: RunConfig, backend: str, plan: Any, n_train: int
                    ) -> tuple[int, float, float | None, float | None] | None:
    """(steps, q, RDP and PLD epsilon) of what a ``recipe: library`` DP-SGD run will take
    through its library's loader (:func:`dpcore.recipes.library_schedule`), or None when
    that is what the plan says (or the run is no library DP-SGD run)."""
    from dpcore.accounting import dpsgd_event, epsilon_pld, epsilon_rdp
    from dpcore.recipes import library_schedule
    from dpcore.trainloop import library_epochs

    if config.recipe != "library" or plan.noise_multiplier <= 0:
        return None
    per_epoch, rate = library_schedule(config, n_train, backend)
    steps = library_epochs(plan) * per_epoch
    if steps == plan.batches.steps and math.isclose(rate, plan.batches.sampling_rate):
        return None
    event = dpsgd_event(plan.mechanism, plan.noise_multiplier, rate, steps)
    return steps, rate, epsilon_rdp(event, plan.delta), epsilon_pld(event, plan.delta)


# --- grids: dpcompare compare -------------------------------------------------------------

class Store(ResultsStore):
    """A results folder (:class:`~dpcore.results.ResultsStore`) with its tidy tables.

    Attributes:
        grid: the grid :func:`compare` ran (None for a folder opened with ``Store(path)``).
        outcome: what the call did: run ids ``ran``, ``skipped`` (already finished),
            ``failed``, ``diverged``, and ``wall_seconds`` (None when opened from a path).
    """

    def __init__(self, root: str | Path, grid: Grid | None = None,
                 outcome: GridOutcome | None = None) -> None:
        super().__init__(root)
        self.grid = grid
        self.outcome = outcome

    def results(self) -> pd.DataFrame:
        """:func:`results` of this folder."""
        return results(self.root)

    def history(self) -> pd.DataFrame:
        """:func:`history` of this folder."""
        return history(self.root)

    def faithfulness(self) -> pd.DataFrame:
        """:func:`faithfulness` of this folder."""
        return faithfulness(self.root)

    def __repr__(self) -> str:
        return f"Store({str(self.root)!r})"


def load_grid(
    preset_or_grid: str | Path | Mapping[str, Any], *, backends: Sequence[str] | None = None,
    seeds: int | None = None, overrides: Sequence[str] = (), engine: str | None = None,
) -> Grid:
    """Expand a preset name, a grid file (or single run config file) or a grid mapping.

    Raises:
        ConfigError: an unknown preset (the valid names are listed), a bad grid or override.
    """
    from compare.grid import expand_grid, load_grid_file, load_preset, preset_names

    if isinstance(preset_or_grid, Mapping):
        raw = dict(preset_or_grid)
    elif not isinstance(preset_or_grid, str | Path):
        raise ConfigError(f"a grid of type {type(preset_or_grid).__name__} is not valid; valid: "
                          "a preset name, a grid file path, or a grid mapping")
    elif isinstance(preset_or_grid, str) and preset_or_grid in preset_names():
        raw = load_preset(preset_or_grid)
    elif isinstance(preset_or_grid, Path) or Path(preset_or_grid).suffix in (
            ".yaml", ".yml", ".json") or Path(preset_or_grid).is_file():
        raw = load_grid_file(preset_or_grid)
    else:
        raw = load_preset(preset_or_grid)  # an unknown name: the message lists the valid ones
    if backends is not None:
        if isinstance(backends, str):
            backends = [b.strip() for b in backends.split(",") if b.strip()]
        if not backends:
            raise ConfigError(f"backends={backends!r} is empty; valid: tf, torch, or both")
    grid = expand_grid(raw, seeds=seeds, backends=backends, overrides=overrides)
    if engine is not None:  # performance only: the runs (and their hashes) are the same
        grid = dataclasses.replace(grid, perf=dataclasses.replace(grid.perf, engine=engine))
    return grid


def compare(
    preset_or_grid: str | Path | Mapping[str, Any], *, out: str | Path | None = None,
    backends: Sequence[str] | None = None, seeds: int | None = None,
    executor: str = "local", overrides: Sequence[str] = (), engine: str | None = None,
    data_dir: str | Path | None = None, report: str | Path | bool = False,
    progress: bool = True, command: str | None = None, ray_address: str | None = None,
    cpus_per_run: float | None = None, gpus_per_run: float | None = None,
    max_concurrent: int | None = None, train: bool = True,
    claim_wait: float | None = None, claim_stale_after: float | None = None,
    dry_run: bool = False,
) -> Store:
    """Run a grid identically on both backends, resumably (``dpcompare compare``).

    Runs already finished in ``out`` (same config hash and backend) are skipped, interrupted
    ones redone. Runs whose final record is committed in the report folder (without a report:
    ``reports/<grid name>``) or in any folder beside it (``reports/*/records``,
    :mod:`compare.records`) are skipped too: a grid longer than a working session continues
    from what was committed, on any machine, and the report uses that record. A run that
    fails is recorded with status ``failed`` and the grid goes on:
    check ``store.outcome.failed`` or the ``status`` column of :func:`results`.

    Args:
        preset_or_grid: a bundled preset name (``smoke``, ``demo``...), the path of a grid
            file (or of a single run config), or a grid mapping (base + axes).
        out: the results folder (default ``runs/<grid name>``, as the CLI).
        backends: which backends to run (default the grid's); a list or ``"tf,torch"``.
        seeds: seeds per cell (default the grid's).
        executor: where runs execute: ``local`` (one at a time in this process, the default)
            or ``ray`` (one Ray task per unfinished run; needs the ``ray`` extra). On a
            multi-node cluster ``out`` (and the data) must be on storage every node mounts at
            the same path: Ray does not sync files between nodes.
        overrides: ``section.key=value`` settings applied to every cell.
        engine: the DP step engine of both backends, ``fast`` or ``reference`` (performance
            only; default: the grid's, else fast where the model supports it).
        data_dir: the data root (default ``$DPCOMPARE_DATA_DIR``, else ``~/.dpcompare/data``).
        report: False writes no report; True writes it to ``reports/<grid name>``; a path
            writes it there (``report.md``, CSV tables, PNG plots, and ``records/``: the
            compact run records and montage arrays the folder can be rebuilt from with
            :func:`rebuild_report`).
        progress: print one line per run and a summary (False: silent).
        command: the command the report header names (default this call, spelled out).
        ray_address: with ``executor="ray"``: the cluster to join (``HOST:PORT``,
            ``ray://HOST:PORT`` or ``auto``); default: start a local Ray for this grid.
        cpus_per_run: with ``ray``: CPU cores reserved per run (default 1).
        gpus_per_run: with ``ray``: GPUs reserved per run (default 0).
        max_concurrent: with ``ray``: most runs in flight at once (default: what fits).
        train: False trains nothing: the report (and montages) of the runs stored so far, an
            interim report of a long grid whose header says how many runs are missing
            (``store.outcome.not_trained`` lists them).
        claim_wait: seconds to wait at the end for runs other processes sharing ``out``
            hold (default: until they end); those left are in ``store.outcome.still_claimed``.
        claim_stale_after: seconds without a heartbeat after which another process's claim
            on a run is dead and taken over (default 600; see :mod:`dpcore.claims`).
        dry_run: check everything (grid, every run still to do as ``train`` checks it, the
            executor options, folders), log the plan (one line per run still to do, its
            settings with the defaults marked), and train, start and write nothing
            (``store.outcome`` is None).

    Returns:
        The results folder as a :class:`Store` (``.results()``, ``.outcome``...).

    Raises:
        ConfigError: a bad grid, preset, executor (or executor option), backend or override;
            a report folder that cannot be written; Ray not installed, an unreachable
            ``ray_address`` or resources no node has (all checked before any training).
        DataError: the data root does not exist.
    """
    from compare.executors import EXECUTORS, make_executor
    from compare.preflight import check_grid
    from compare.report import ReportContext, write_report
    from compare.runner import run_grid
    from compare.runplan import plan_runs
    from compare.training import Evaluation
    from dpcore.claims import STALE_AFTER_S, ClaimPolicy
    from dpcore.data import resolve_data_root
    from dpcore.defaults import describe_settings

    if executor not in EXECUTORS:
        raise ConfigError(f"executor={executor!r} is not valid; valid: {', '.join(EXECUTORS)}")
    stale = STALE_AFTER_S if claim_stale_after is None else claim_stale_after
    claims = ClaimPolicy(stale_after_s=stale, heartbeat_s=min(30.0, stale / 4),
                         wait_s=claim_wait)
    runner = make_executor(executor, ray_address=ray_address, cpus_per_run=cpus_per_run,
                           gpus_per_run=gpus_per_run, max_concurrent=max_concurrent,
                           claims=claims)
    grid = load_grid(preset_or_grid, backends=backends, seeds=seeds, overrides=overrides,
                     engine=engine)
    out = Path(out) if out is not None else Path("runs") / grid.name
    # Inputs shared by every run are checked before any training (nothing written).
    resolve_data_root(data_dir)
    report_dir = None
    if report is not False:
        report_dir = Path("reports") / grid.name if report is True else Path(report)
        _writable_folder(report_dir, "report")
    log: Log = print if progress else (lambda _msg: None)
    from compare.records import record_folders_beside

    # Runs committed in this report's records or any report beside it count as finished.
    records_from = record_folders_beside(
        report_dir if report_dir is not None else Path("reports") / grid.name)
    if train or dry_run:  # every run still to do is checked before the first one trains
        plan = plan_runs(grid, out, records_from)
        pending = plan.pending
        check_grid(pending, data_dir)
        if dry_run:
            _writable_folder(out, "out")
            for cell, backend in pending:
                rid = run_id(cell.config.config_hash, backend)
                why = f" [redone: {plan.redo[rid]}]" if rid in plan.redo else ""
                log(f"would run {backend} {cell.setting} seed {cell.config.seed} "
                    f"({rid}): {describe_settings(cell.config, cell.defaults)}{why}")
            log(f"dry run: {grid.name}: {len(grid.runs())} run(s), {len(pending)} to train "
                f"into {out}; all checked; nothing trained or written")
            return Store(out, grid=grid, outcome=None)
    if command is None:
        source = (f"<grid {grid.name}>" if isinstance(preset_or_grid, Mapping)
                  else repr(str(preset_or_grid)))
        command = f"compare.api.compare({source}, out={str(out)!r})"
    started = time.perf_counter()
    outcome = run_grid(grid, out, data_dir=data_dir, progress=progress, log=log,
                       executor=runner, train=train, records_from=records_from)
    untrained = (f", {len(outcome.not_trained)} not stored and not trained (train=False)"
                 if outcome.not_trained else "")
    if outcome.elsewhere:
        untrained += f", {len(outcome.elsewhere)} done by another process sharing {out}"
    if outcome.still_claimed:
        untrained += (f", {len(outcome.still_claimed)} still running in another process "
                      "(not in this report)")
    log(f"{grid.name}: {len(outcome.ran)} run(s) done, {len(outcome.skipped)} already finished, "
        f"{len(outcome.failed)} failed, {len(outcome.diverged)} diverged{untrained}; results in "
        f"{out}")
    if report_dir is not None:
        context = ReportContext(
            command=command, wall_seconds=time.perf_counter() - started,
            title=f"{grid.name}: TF Privacy vs Opacus", description=grid.description,
            notes=grid.notes, published=grid.published,
            run_ids=frozenset(run_id(cell.config.config_hash, backend)
                              for cell, backend in grid.runs()),
            axis_order=grid.axis_names,
            labels={run_id(cell.config.config_hash, backend): dict(cell.labels)
                    for cell, backend in grid.runs()},
            montage_grid=grid.name,
            audit_companions=grid.companion_runs() or None,
            faithfulness=Evaluation.of_grid(grid.evaluation).asks_faithfulness,
        )
        log(f"report: {write_report(out, report_dir, context, records=outcome.records)}")
    return Store(out, grid=grid, outcome=outcome)


# --- results and reports -------------------------------------------------------------------

def results(out: str | Path) -> pd.DataFrame:
    """One tidy row per run of the results folder ``out`` (written by :func:`compare` or
    :func:`train`): the flattened config (``data.name``, ``privacy.target_epsilon``...),
    ``backend``, ``seed``, ``status``, every scalar metric (``accuracy``, ``auc``...), every
    epsilon (``epsilon_rdp``, ``epsilon_pld``, ``epsilon_opacus_rdp``, ``epsilon_opacus_prv``,
    ``epsilon_tf_privacy``, and ``epsilon``: the one reports plot, ``inf`` if non-private),
    timing (``timing.total_seconds`` in s, ``timing.examples_per_second``,
    ``timing.peak_memory_mb`` in MiB...), and ``run_dir`` (the run's folder, for
    :func:`load_model`). All columns: :mod:`compare.tidy`. Rows sorted by run id.

    Raises:
        DataError: ``out`` holds no runs.
    """
    from compare import tidy

    table = tidy.results_table(tidy.load_results(out))
    table.insert(1, "run_dir", [str(Path(out) / "runs" / rid) for rid in table["run_id"]])
    return table


def history(out: str | Path) -> pd.DataFrame:
    """One row per run and epoch (``epoch``, ``step``, ``loss``, ``test_accuracy``,
    ``epsilon_spent`` so far, ``seconds``...) with the run's identity and config columns.

    Raises:
        DataError: ``out`` holds no runs.
    """
    from compare import tidy

    return tidy.history_table(tidy.load_results(out))


def faithfulness(out: str | Path) -> pd.DataFrame:
    """One row per run with Grad-CAM faithfulness metrics (``average_drop``,
    ``increase_in_confidence`` in %, ``masked_score``, ``deletion_auc``, ``insertion_auc``)
    next to ``epsilon`` and ``accuracy``; runs without them (text models, or
    ``evaluation.faithfulness: false``) have no row.

    Raises:
        DataError: ``out`` holds no runs.
    """
    from compare import tidy

    return tidy.faithfulness_table(tidy.load_results(out))


def report(out: str | Path, dest: str | Path, *, title: str = "dpcompare report",
           command: str | None = None, latex: bool = False) -> Path:
    """Write ``report.md`` + CSV tables + PNG plots of the runs in ``out`` to the folder
    ``dest`` (``dpcompare report``), with the records it can be rebuilt from (``records/``);
    returns the path of ``report.md``. ``latex``: also the booktabs ``.tex`` tables
    (:func:`compare.latex.write_latex_tables`).

    Raises:
        DataError: ``out`` holds no runs.
        ConfigError: ``dest`` cannot be a writable folder (nothing is written).
    """
    from compare import tidy
    from compare.report import ReportContext, write_report

    tidy.load_results(out)  # raises DataError naming ``out`` when it holds no runs
    _writable_folder(dest, "dest")
    command = command or f"compare.api.report({str(out)!r}, {str(dest)!r})"
    return write_report(Path(out), dest, ReportContext(command=command, title=title),
                        latex=latex)


def rebuild_report(report_dir: str | Path, dest: str | Path | None = None, *,
                   latex: bool = False) -> Path:
    """Rebuild a report folder (report.md, CSV tables, PNG plots, montages, records) from the
    run records committed in it (``report_dir/records``), with no training, no model, no
    store and no checkpoint (``dpcompare report --records``); returns the path of
    ``report.md``. ``dest`` defaults to ``report_dir`` (rebuilt in place). Only the
    header's written time differs from the folder the records were written with, unless the
    report code changed. ``latex``: also the booktabs ``.tex`` tables.

    Raises:
        DataError: ``report_dir`` holds no readable records.
        ConfigError: ``dest`` cannot be a writable folder (nothing is written).
    """
    from compare.records import read_records
    from compare.report import rebuild_report as rebuild

    read_records(report_dir)  # raises DataError naming the folder before anything is written
    target = Path(dest) if dest is not None else Path(report_dir)
    _writable_folder(target, "dest")
    return rebuild(report_dir, target, latex=latex)


# --- models and data -------------------------------------------------------------------------

def _read_run(run_dir: Path) -> RunResult:
    from dpcore.results import read_result

    result = read_result(run_dir / RESULT_FILE)
    if result is None:
        raise DataError(f"{run_dir} holds no readable run record (expected "
                        f"{run_dir / RESULT_FILE})")
    return result


def load_model(run_dir: str | Path, backend: str | None = None) -> TrainedModel:
    """A stored model, loaded into either framework.

    Args:
        run_dir: a run's folder (``OUT/runs/<config_hash>-<backend>``, the ``run_dir`` column
            of :func:`results`) or its ``checkpoint.npz``.
        backend: ``tf`` or ``torch``; default the backend that trained it. The checkpoint is
            framework-neutral: a model trained by one backend loads into the other with the
            same weights (its predictions agree to float tolerance).

    Returns:
        A :class:`~dpcore.trained.TrainedModel` (``.model`` is the Keras / torch model,
        ``.config`` the run config, ``.class_names``) ready for :func:`predict_proba` and
        :func:`gradcam`.

    Raises:
        DataError: no checkpoint there.
        ConfigError: an unknown backend, or a file that is not a dpcompare checkpoint.
    """
    from dpcore.trained import CHECKPOINT_FILE, read_checkpoint

    if backend is not None:
        backend = _check_backend(backend)
    path = Path(run_dir)
    checkpoint = path / CHECKPOINT_FILE if path.is_dir() else path
    if not checkpoint.is_file():
        raise DataError(f"{path} holds no checkpoint (expected a run folder with "
                        f"{CHECKPOINT_FILE}, or the checkpoint file itself)")
    if backend is None:
        backend = _check_backend(str(read_checkpoint(checkpoint)[1].get("backend")))
    return load_backend(backend).load_checkpoint(checkpoint)


def predict_proba(model: TrainedModel, x: np.ndarray) -> np.ndarray:
    """Softmax probabilities [N, K] (float32) of a loaded model (:func:`load_model`).

    ``x``: NHWC images (``uint8`` 0..255 or float32 in [0, 1]) or [N, L] token ids.
    """
    return load_backend(model.backend).predict_proba(model, x)


def gradcam(model: TrainedModel, x: np.ndarray,
            class_idx: np.ndarray | int | None = None, *, layer: str | None = None
            ) -> np.ndarray:
    """Grad-CAM maps float32 [N, H, W] in [0, 1] of a loaded image model, on its last
    convolution or the named layer (the same layer in both frameworks).

    Args:
        model: from :func:`load_model`.
        x: images [N, H, W, C] of the model's input shape, ``uint8`` or float in [0, 1].
        class_idx: the class explained per image: None for the predicted one, an int for all,
            or an int array [N].
        layer: the layer explained (a layer name of the model, e.g. of a custom model's
            ``model.layers``); None: the last convolution.

    Raises:
        ConfigError: a text model, images of the wrong shape, a class out of range, a layer
            the model lacks.
    """
    return load_backend(model.backend).gradcam(model, x, class_idx, layer=layer)


def load_data(config: RunConfig | Mapping[str, Any] | str | Path,
              data_dir: str | Path | None = None) -> Dataset:
    """The data set a config trains on, split as in training (locally privatised for
    local-DP configs), e.g. ``load_data(model.config).x_test``.

    Args:
        config: as :func:`train` accepts, or a run folder (its stored config).
        data_dir: the data root (default ``$DPCOMPARE_DATA_DIR``, else ``~/.dpcompare/data``).

    Raises:
        ConfigError: a bad config. DataError: the data set is missing or malformed.
    """
    from dpcore.pipeline import prepare_dataset

    return prepare_dataset(as_config(config), data_dir)


def download(name: str, data_dir: str | Path | None = None, *, base_url: str | None = None,
             progress: bool = False, dry_run: bool = False) -> list[Path]:
    """Fetch a registered data set (``dpcompare datasets --download NAME``): its published
    files, MD5-verified, placed where the registry looks under the data root (created when
    it is the default one); resumable; nothing partial is ever left under a final name
    (see :mod:`dpcore.data.download`).

    Args:
        name: ``mnist``, ``pneumoniamnist``, ``retinamnist`` or ``imdb-full``.
        data_dir: the data root (default ``$DPCOMPARE_DATA_DIR``, else ``~/.dpcompare/data``).
        base_url: a mirror serving the files by name (default ``$DPCOMPARE_DOWNLOAD_URL``).
        progress: a progress bar on a terminal.
        dry_run: check the name and the data root; fetch nothing.

    Returns:
        The placed files (or unpacked folder); with ``dry_run`` the data root alone.

    Raises:
        DataError: unknown name, HTTP error, broken transfer (resume by calling again),
            checksum mismatch.
    """
    from dpcore.data import resolve_data_root
    from dpcore.data.download import DOWNLOADS
    from dpcore.data.download import download as fetch

    root = resolve_data_root(data_dir)
    if dry_run:
        if name not in DOWNLOADS:
            raise DataError(f"--download {name!r} is not downloadable; valid: "
                            f"{', '.join(DOWNLOADS)}")
        return [root]
    return fetch(name, root, base_url=base_url, progress=progress)


def privatise(
    dataset: str, mechanism: str, params: Mapping[str, Any] | None = None, *, seed: int = 0,
    splits: Sequence[str] = ("train", "test"), delta: float | None = None,
    image_size: int | None = None, train_limit: int | None = None,
    test_limit: int | None = None, out: str | Path | None = None,
    data_dir: str | Path | None = None, montage_levels: Sequence[float] = (),
    montage_rows: int = 4, quality_images: int = 500, dry_run: bool = False,
    names: Mapping[str, str] | None = None,
) -> Any:
    """A locally-private copy of a data set and what it costs (``dpcompare ldp``): every image
    of ``splits`` perturbed once with the local-DP ``mechanism`` (``laplace``, ``gaussian``,
    ``dp_pix``; ``params`` e.g. ``{"scale": 1.0, "clip": True}``) and saved as an npz that
    training reuses, with a montage PNG (``montage_rows`` images at the mechanism's noise
    level and at ``montage_levels``) and ``summary.json`` in ``out`` (default
    ``ldp_out/<dataset>-<mechanism>-seed<seed>``).

    Args:
        delta: delta of the Gaussian (epsilon, delta) figures; default 1/N rounded down to a
            power of ten, N = number of noised images.
        image_size: pixels a side (default: as ``train`` loads the data set).
        quality_images: PSNR/SSIM on at most this many images per split (seeded subset).
        dry_run: check everything and load the data set, noise and write nothing.
        names: how error messages spell ``seed``, ``montage_rows``, ``quality_images``,
            ``out`` (the CLI passes its option names).

    Returns:
        The summary (epsilon per value and per image, PSNR/SSIM per split, fingerprints,
        files, whether the cached npz was reused); with ``dry_run`` the line that says what
        would be done.

    Raises:
        ConfigError: a bad mechanism, parameter or value. DataError: a missing data set.
    """
    from compare.privatise import PYTHON_NAMES, check_splits, data_spec, dry_run_line
    from compare.privatise import privatise as run_privatise
    from dpcore.ldp import build_mechanism

    names = {**PYTHON_NAMES, **(names or {})}
    chosen = build_mechanism(mechanism, params)
    chosen_splits = check_splits(splits, names.get("splits", "splits"))
    spec = data_spec(dataset, image_size, train_limit, test_limit)
    if dry_run:
        return dry_run_line(chosen, spec, seed=seed, splits=chosen_splits, delta=delta, out=out,
                            data_dir=data_dir, names=names)
    return run_privatise(chosen, spec, seed=seed, splits=chosen_splits, delta=delta, out=out,
                         data_dir=data_dir, montage_levels=montage_levels,
                         montage_rows=montage_rows, quality_images=quality_images, names=names)


def audit(run_dir: str | Path, *, data_dir: str | Path | None = None, n: int | None = None,
          seed: int = 0, dry_run: bool = False) -> Any:
    """Membership-inference audit of a stored run (``dpcompare audit``): the model rebuilt from
    its checkpoint by the backend that trained it, attacked on ``n`` training examples
    (members) and ``n`` held-out ones (default: the smaller set's size; seeded subsets), the
    held-out advantage's interval compared with the bound its (epsilon, delta) allows; stored
    as the ``audit`` entry of ``run_dir/result.json`` (see :mod:`compare.audit_run`).

    Returns:
        The audit (attacks' AUC and advantage, held-out advantage and interval, bound,
        ``suspected_privacy_bug``); with ``dry_run`` (the run, checkpoint and data checked,
        nothing attacked or written) the line that says what would be done.

    Raises:
        DpCompareError: no readable record, a run not finished, no checkpoint.
        DataError: the rebuilt data set is not the one the run trained on.
    """
    from compare.audit_run import audit_run, dry_run_line

    if dry_run:
        return dry_run_line(run_dir, data_dir, n, seed)
    return audit_run(run_dir, data_dir, n=n, seed=seed)


def verify(config: RunConfig | Mapping[str, Any] | str | Path, backend: str, *,
           data_dir: str | Path | None = None, engine: str = "all",
           perf: PerfSpec | None = None, log: Log | None = None) -> Any:
    """``dpcompare verify``: a conformance check of one configured DP step (sensitivity,
    noise, divisor, accounting) on ``backend``, training nothing. ``config`` is anything
    :func:`train` takes, completed by :func:`resolve_config`; the rest is
    :func:`compare.verify.verify_config`'s (arguments, report and errors there)."""
    from compare.verify import verify_config

    backend = _check_backend(backend)
    return verify_config(resolve_config(config, backend)[0], backend, data_dir=data_dir,
                         engine=engine, perf=perf, log=log)


def bench(out: str | Path, *, quick: bool = False, cases: Sequence[str] | None = None,
          sweep: bool = True, data_dir: str | Path | None = None, log: Log | None = None,
          command: str = "compare.api.bench") -> tuple[dict[str, Any], Path]:
    """Time DP and non-private training in both frameworks (``dpcompare bench``): steady-state
    speed and peak memory of every DP tier of TF Privacy and Opacus, their ratios against the
    targets, and a batch-size sweep of the fast engines (:mod:`benchmarks.bench`); writes
    ``out/report.md``, ``out/results.json`` and ``out/sweep.png``.

    Args:
        quick: few steps, cnn4 at batch 256, a 2-point sweep.
        cases: run only these cases (default: all of the mode's); an unknown name fails
            before anything runs.
        sweep: run the batch-size sweep.
        log: called with each progress line.
        command: the command the report's header names.

    Returns:
        (every figure as one JSON-ready dict, the path of ``report.md``).
    """
    from benchmarks.bench import run_benchmark, select_cases
    from benchmarks.render import write_report

    names = list(cases) if cases else None
    select_cases(quick, names)  # an unknown case name fails before anything runs
    figures = run_benchmark(quick=quick, data_dir=None if data_dir is None else str(data_dir),
                            case_names=names, sweep=sweep, log=log or (lambda _msg: None))
    figures["preset_costs"] = preset_costs(figures)
    return figures, write_report(figures, out, command)


def preset_costs(figures: Mapping[str, Any]) -> list[dict[str, Any]]:
    """What the medical presets' whole grids would take to train here, estimated from the
    bench's step times (:mod:`benchmarks.grid_cost`; each preset expanded as ``dpcompare
    compare`` expands it)."""
    from benchmarks.grid_cost import PRICED_PRESETS, preset_cost
    from compare.grid import expand_grid, load_preset

    return [preset_cost(figures, expand_grid(load_preset(name))) for name in PRICED_PRESETS]


def dataset_rows(data_dir: str | Path | None = None) -> list[dict[str, Any]]:
    """The registered data sets (``dpcompare datasets``), one dict each: ``name``, ``task``,
    ``classes``, ``train``/``test`` sizes and whether they are read from the files or the
    documented ones (``sizes``), ``status`` (``built in``, ``found``, ``missing``,
    ``unreadable``), ``found_at``, ``how_to_get`` or ``error``.

    Raises:
        DataError: ``data_dir`` (or ``$DPCOMPARE_DATA_DIR``) does not exist.
    """
    from dpcore.data import dataset_table, resolve_data_root

    resolve_data_root(data_dir)
    return dataset_table(data_dir)


def datasets(data_dir: str | Path | None = None) -> pd.DataFrame:
    """The registered data sets (``dpcompare datasets``): one row each with ``name``,
    ``task``, ``classes``, ``train``/``test`` sizes, ``status`` (``built in``, ``found``,
    ``missing``, ``unreadable``), ``found_at`` or ``how_to_get`` (:func:`dataset_rows` as a
    table).

    Raises:
        DataError: ``data_dir`` (or ``$DPCOMPARE_DATA_DIR``) does not exist.
    """
    import pandas as pd

    return pd.DataFrame(dataset_rows(data_dir))
