"""The bench from Python: the ``dpcompare`` commands as functions, and tidy results.

This is the documented, stable Python interface (the CLI is a thin layer over it: one code
path). Typical notebook use::

    from compare import api

    api.epsilon(n=60000, batch_size=256, noise_multiplier=1.1, epochs=15)   # what it costs
    store = api.compare("smoke", out="runs/smoke")      # run a grid on both backends
    df = api.results("runs/smoke")                       # one tidy row per run
    model = api.load_model(df.loc[0, "run_dir"], backend="torch")  # either framework
    maps = api.gradcam(model, images)                    # Grad-CAM maps [N, H, W] in [0, 1]

Functions (this module only delegates; each entry point lives in a module of its own):

* :func:`epsilon`, :func:`calibrate` — ``dpcompare epsilon``
  (:mod:`dpcore.accounting_figures`);
* :func:`train` — ``dpcompare train`` (:mod:`compare.train_run`); :func:`compare`,
  :func:`load_grid`, :class:`Store` — ``dpcompare compare`` (:mod:`compare.gridrun`);
* :func:`results`, :func:`history`, :func:`faithfulness` — tidy pandas tables of a results
  folder (:mod:`compare.tidy`); :func:`report` — ``dpcompare report``;
  :func:`rebuild_report` — ``dpcompare report --records`` (a report from its committed records);
  :func:`reproduce` — ``dpcompare reproduce`` (a committed report's runs retrained and compared);
* :func:`load_model`, :func:`predict_proba`, :func:`gradcam`, :func:`load_data` — use a
  stored model and its data; :func:`as_config`, :func:`resolve_config`,
  :func:`with_train_defaults` — a config from a mapping, file or run folder
  (:mod:`compare.run_config`);
* :func:`datasets`, :func:`dataset_rows`, :func:`download` — ``dpcompare datasets``;
* :func:`privatise` — ``dpcompare ldp`` (:mod:`compare.privatise`); :func:`audit` —
  ``dpcompare audit`` (:mod:`compare.audit_run`); :func:`bench` — ``dpcompare bench``
  (:mod:`compare.bench`).

The backends (``tfpipe``, ``torchpipe``) are reached only through
:func:`dpcore.backend.load_backend`.

Bad input raises :class:`~dpcore.errors.ConfigError` or :class:`~dpcore.errors.DataError`
(both :class:`~dpcore.errors.DpCompareError`) with the one-line message the CLI prints; library
code never exits the interpreter. Frameworks (TensorFlow, PyTorch) are imported only by the
calls that need them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from compare.audit_run import audit
from compare.bench import bench
from compare.calibrators import load_calibrator
from compare.folders import check_output_folder
from compare.gridrun import Store, compare, load_grid
from compare.privatise import privatise
from compare.records import read_records
from compare.report import ReportContext, write_report
from compare.report import rebuild_report as rebuild_report_folder
from compare.reproduce import Reproduction
from compare.reproduce import reproduce as run_reproduction
from compare.run_config import as_config, check_backend, resolve_config, with_train_defaults
from compare.tidy import faithfulness, history, load_results, results
from compare.train_run import DEFAULT_TRAIN_OUT, train
from compare.verify import verify_config
from dpcore import accounting_figures as figures
from dpcore.accounting_figures import PYTHON_NAMES
from dpcore.backend import load_backend
from dpcore.config import PerfSpec, RunConfig
from dpcore.data import dataset_table, resolve_data_root
from dpcore.data.download import DOWNLOADS
from dpcore.data.download import download as fetch
from dpcore.errors import DataError
from dpcore.pipeline import prepare_dataset
from dpcore.results import RESULT_FILE, read_result
from dpcore.trained import CHECKPOINT_FILE, read_checkpoint, verify_checkpoint

if TYPE_CHECKING:
    import numpy as np

    from dpcore.data.dataset import Dataset
    from dpcore.trained import TrainedModel

__all__ = [
    "DEFAULT_TRAIN_OUT", "Store", "accounting_figures", "as_config", "audit", "bench",
    "calibrate", "compare", "dataset_rows", "datasets", "download", "epsilon", "faithfulness",
    "gradcam", "history", "load_data", "load_grid", "load_model", "mechanisms",
    "predict_proba", "privatise", "rebuild_report", "report", "reproduce", "resolve_config",
    "results",
    "train", "verify", "with_train_defaults",
]

#: Noise distributions of :func:`epsilon` / :func:`calibrate` by their CLI names, CLI name ->
#: config name (``gaussian`` -> ``dpsgd-gaussian``...): the registered DP-SGD mechanisms.
mechanisms = figures.epsilon_mechanisms
#: Accountants that can turn a target epsilon into a noise multiplier: dp_accounting's RDP
#: and PLD, and Opacus's PRV (what ``make_private_with_epsilon`` uses; imports torch).
CALIBRATE_WITH = figures.calibrators()

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
        delta: target delta in (0, 1); default the largest power of ten below 1/(10 N).
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
    """The shared core of :func:`epsilon` and :func:`calibrate`
    (:func:`dpcore.accounting_figures.accounting_figures`; give exactly one of
    ``noise_multiplier`` and ``target_epsilon``), with the libraries' own figures from each
    backend when ``library``. ``names`` spells each parameter in error messages (the CLI
    passes its option names, e.g. ``--batch-size``)."""
    return figures.accounting_figures(
        n=n, batch_size=batch_size, noise_multiplier=noise_multiplier,
        target_epsilon=target_epsilon, epochs=epochs, steps=steps, sampling_rate=sampling_rate,
        delta=delta, mechanism=mechanism, calibrate_with=calibrate_with,
        library=library_epsilons if library else None, load_calibrator=load_calibrator,
        names=names)


def library_epsilons(noise_multiplier: float, sampling_rate: float, steps: int, delta: float,
                     *, n: int, batch_size: int, epochs: float) -> dict[str, float | None]:
    """Opacus's (RDP, PRV) and TF Privacy's own epsilons of one Gaussian DP-SGD setting, each
    from its backend's ``accountant_epsilons`` (loads both frameworks)."""
    found: dict[str, float | None] = {}
    for name in ("torch", "tf"):
        found.update(load_backend(name).accountant_epsilons(
            noise_multiplier, sampling_rate, steps, delta, n=n, batch_size=batch_size,
            epochs=epochs))
    return found


# --- reports: dpcompare report -------------------------------------------------------------

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
    load_results(out)  # raises DataError naming ``out`` when it holds no runs
    check_output_folder(dest, "dest")
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
    read_records(report_dir)  # raises DataError naming the folder before anything is written
    target = Path(dest) if dest is not None else Path(report_dir)
    check_output_folder(target, "dest")
    return rebuild_report_folder(report_dir, target, latex=latex)


def reproduce(report_dir: str | Path, *, runs: int | None = None,
              run_ids: Sequence[str] | None = None, backends: Sequence[str] | str | None = None,
              out: str | Path | None = None, seed: int = 0, threads: int | None = None,
              data_dir: str | Path | None = None, progress: bool = True,
              command: str | None = None, dry_run: bool = False) -> Reproduction:
    """Retrain a committed report's runs (all, a seeded sample of ``runs``, ``run_ids``, or
    those of ``backends``) in the scratch store ``out`` and compare every recorded figure with
    the committed one (``dpcompare reproduce``): writes ``OUT/reproduction.md`` and ``.csv``
    and returns the :class:`~compare.reproduce.Reproduction` (one verdict per run: identical /
    within tolerance / differs / not comparable run by run / not reproduced). The arguments
    and errors are those of :func:`compare.reproduce.reproduce`."""
    return run_reproduction(report_dir, runs=runs, run_ids=run_ids, backends=backends, out=out,
                            seed=seed, threads=threads, data_dir=data_dir, progress=progress,
                            log=print if progress else (lambda _msg: None), command=command,
                            dry_run=dry_run)


def verify(config: RunConfig | Mapping[str, Any] | str | Path, backend: str, *,
           data_dir: str | Path | None = None, engine: str = "all", perf: PerfSpec | None = None,
           log: Callable[[str], None] | None = None, processes: int | str = 1) -> Any:
    """``dpcompare verify``: a conformance check of one configured DP step (sensitivity,
    noise, divisor, accounting) on ``backend``, training nothing. ``config`` is anything
    :func:`train` takes, completed by :func:`resolve_config`; the rest is
    :func:`compare.verify.verify_config`'s (arguments, report and errors there)."""
    backend = check_backend(backend)
    return verify_config(resolve_config(config, backend)[0], backend, data_dir=data_dir,
                         engine=engine, perf=perf, log=log, processes=processes)


# --- models and data -------------------------------------------------------------------------

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
        DataError: no checkpoint there; CheckpointChangedError: the run's record beside it
            keeps the checkpoint's SHA-256 and the file's differs (it changed since the run
            stored it).
        ConfigError: an unknown backend, or a file that is not a dpcompare checkpoint.
    """
    if backend is not None:
        backend = check_backend(backend)
    path = Path(run_dir)
    checkpoint = path / CHECKPOINT_FILE if path.is_dir() else path
    if not checkpoint.is_file():
        raise DataError(f"{path} holds no checkpoint (expected a run folder with "
                        f"{CHECKPOINT_FILE}, or the checkpoint file itself)")
    # the run's record, when the file is in its folder (an unreadable one: warned, None)
    stored = read_result(checkpoint.parent / RESULT_FILE)
    if stored is not None and Path(str(stored.checkpoint)).name == checkpoint.name:
        verify_checkpoint(checkpoint, stored.checkpoint_sha256)
    if backend is None:
        backend = check_backend(str(read_checkpoint(checkpoint)[1].get("backend")))
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
    root = resolve_data_root(data_dir)
    if dry_run:
        if name not in DOWNLOADS:
            raise DataError(f"--download {name!r} is not downloadable; valid: "
                            f"{', '.join(DOWNLOADS)}")
        return [root]
    return fetch(name, root, base_url=base_url, progress=progress)


def dataset_rows(data_dir: str | Path | None = None) -> list[dict[str, Any]]:
    """The registered data sets (``dpcompare datasets``), one dict each: ``name``, ``task``,
    ``classes``, ``train``/``test`` sizes and whether they are read from the files or the
    documented ones (``sizes``), ``status`` (``built in``, ``found``, ``missing``,
    ``unreadable``), ``found_at``, ``how_to_get`` or ``error``.

    Raises:
        DataError: ``data_dir`` (or ``$DPCOMPARE_DATA_DIR``) does not exist.
    """
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
    return pd.DataFrame(dataset_rows(data_dir))
