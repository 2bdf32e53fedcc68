"""Train one model with one backend and keep it (``dpcompare train``, :func:`compare.api.train`):
every check first, then the one line that says what will run (:func:`start_line`), then the
one record path (:func:`compare.training.train_and_record`)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from compare.folders import check_output_folder
from compare.preflight import check_run
from compare.run_config import check_backend, resolve_config
from compare.train_claim import claim_policy, train_claimed
from compare.training import Evaluation, epoch_line_logger, train_and_record
from dpcore.accounting import PrivacyPlan
from dpcore.config import PerfSpec, RunConfig
from dpcore.data.dataset import Dataset
from dpcore.data.survey import data_notes
from dpcore.defaults import describe_settings
from dpcore.errors import ConfigError
from dpcore.library_run import library_as_run
from dpcore.mechanisms import noises_gradients
from dpcore.names import check_names
from dpcore.noise_key import noise_key_label, resolved_noise_key
from dpcore.pipeline import prepare_dataset
from dpcore.recipes import check_backend_recipe
from dpcore.results import ResultsStore, RunResult, run_id

#: Results folder of :func:`train` when ``out`` is not given (as ``dpcompare train``).
DEFAULT_TRAIN_OUT = "dpcompare-runs"

Log = Callable[[str], None]


def train(
    config: RunConfig | Mapping[str, Any] | str | Path, backend: str, *,
    out: str | Path | None = None, data_dir: str | Path | None = None,
    perf: PerfSpec | None = None, faithfulness_subset: int = 500, progress: bool = False,
    log: Log | None = None, dry_run: bool = False, claim_wait: float | None = None,
    claim_stale_after: float | None = None,
) -> RunResult | str:
    """Train one model with one backend and keep it (``dpcompare train``).

    Writes ``OUT/runs/<config_hash>-<backend>/result.json`` (the returned RunResult, whose
    ``checkpoint`` is relative to OUT, with the checkpoint's SHA-256) and ``checkpoint.npz``
    (framework-neutral weights that load into either backend, see
    :func:`compare.api.load_model`). A run with the same config and backend in OUT is
    overwritten, unless another process is training it right now: the run is claimed first,
    as a grid claims it (:mod:`compare.train_claim`), and this call waits for that process and
    returns the record it stored, training nothing.

    Args:
        config: a :class:`RunConfig` (used as it is), or a (partial) config mapping or
            YAML/JSON file, whose missing hyper-parameters take the tuned defaults of
            :mod:`dpcore.defaults` (as ``dpcompare train``;
            :func:`compare.run_config.with_train_defaults`).
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
        claim_wait: seconds to wait for another process training the same run into ``out``
            (0: do not wait; default: until it ends); past it, RunClaimedError.
        claim_stale_after: seconds without a heartbeat after which another host's claim on
            the run is dead and taken over (default 600; see :mod:`dpcore.claims`).

    Returns:
        The stored RunResult (``.config`` its config mapping, ``.run_config`` the
        :class:`RunConfig`, ``.defaults`` the keys filled from the defaults); with
        ``dry_run``, the start line.

    Raises:
        ConfigError: a bad config, backend or subset size, or an impossible privacy setting
            (checked before anything is written); ``out`` cannot be a writable folder.
        DataError: the data set or data root is missing or malformed.
        DpCompareError: ``out`` is not writable; RunClaimedError: another process trains the
            run and ``claim_wait`` passed.
        StorageError: the storage refused a write while the run was stored (no space, a
            read-only folder): the message says where the trained run was kept
            (:func:`dpcore.runstore.save_run`).
    """
    backend = check_backend(backend)
    config, filled = resolve_config(config, backend)
    check_names(config)  # a typo is named (with the closest name) before anything is loaded
    perf = perf or PerfSpec()
    if isinstance(faithfulness_subset, bool) or not isinstance(faithfulness_subset, int) or (
            faithfulness_subset < 0):
        raise ConfigError(f"faithfulness_subset={faithfulness_subset!r} is not valid; valid: "
                          "an integer >= 0 (0 skips the metrics)")
    if dry_run:  # what training would refuse first (dpcore.assembly.train), asked here
        check_backend_recipe(config, backend)
        check_output_folder(out if out is not None else DEFAULT_TRAIN_OUT, "--out",
                            "output folder")
        dataset = prepare_dataset(config, data_dir)
        return start_line(config, backend, dataset, check_run(config, dataset), filled)
    store = ResultsStore(out if out is not None else DEFAULT_TRAIN_OUT)
    # checked, nothing created yet (the store is created by the run's first write, after the
    # checks of dpcore.assembly.train)
    check_output_folder(store.root, "--out", "output folder")
    dataset = prepare_dataset(config, data_dir)
    plan = check_run(config, dataset)  # fail fast on impossible settings, before the line
    callbacks = []
    if log is not None:
        log(start_line(config, backend, dataset, plan, filled))
        if not (progress and sys.stderr.isatty()):  # the bar shows progress otherwise
            epochs = -(-plan.batches.steps // plan.batches.steps_per_epoch)
            callbacks.append(epoch_line_logger(epochs, log))
    return train_claimed(  # the run's claim, as a grid takes it: trained once (module doc)
        store, run_id(config.config_hash, backend), lambda: train_and_record(
            config, dataset, backend, store, perf=perf,
            evaluation=Evaluation(faithfulness_subset=faithfulness_subset),
            progress=progress, callbacks=callbacks, defaults=filled)[0],
        policy=claim_policy(claim_wait, claim_stale_after), log=log)


def start_line(config: RunConfig, backend: str, dataset: Dataset, plan: PrivacyPlan,
               filled: Mapping[str, Any]) -> str:
    """The one line ``train`` prints before training: model, data, the privacy (noise and the
    epsilon it plans, by the shared RDP and PLD accountants), steps, and every
    hyper-parameter in force with those filled from the defaults marked ``(default)``. A
    library recipe may run other steps than planned (Opacus's loader): the line then gives
    the epsilon of what ran beside the planned one (:func:`dpcore.library_run.library_as_run`).
    What loading changed or left out of the data (files converted or resized because they
    disagreed, unreadable files skipped: :func:`dpcore.data.survey.data_notes`) ends the line,
    each as ``; data: ...``."""

    def figures(rdp: float | None, pld: float | None) -> str:
        shown = [f"{kind} {eps:.4g}" for kind, eps in (("RDP", rdp), ("PLD", pld))
                 if eps is not None]
        return ", ".join(shown) or "n/a"

    privacy = plan.mechanism
    steps = f"{plan.batches.steps} steps of B={plan.batches.expected_batch_size}"
    if noises_gradients(plan.mechanism):
        privacy += (f" noise {plan.noise_multiplier:.4g}, epsilon "
                    f"{figures(plan.epsilon_rdp, plan.epsilon_pld)} planned")
        ran = library_as_run(config, backend, plan, len(dataset.x_train))
        if ran is not None:  # the library's loader runs other steps than planned
            privacy = (f"{plan.mechanism} noise {plan.noise_multiplier:.4g}, epsilon "
                       f"{figures(ran.epsilon_rdp, ran.epsilon_pld)} for the {ran.steps} "
                       f"steps at q={ran.sampling_rate:.4g} its library runs "
                       f"({figures(plan.epsilon_rdp, plan.epsilon_pld)} planned for "
                       f"{plan.batches.steps})")
            steps = f"{ran.steps} steps of B={plan.batches.expected_batch_size}"
        privacy += f", noise key {noise_key_label(resolved_noise_key(config))}"
    notes = "".join(f"; data: {note}" for note in data_notes(dataset.extra))
    return (f"{backend}: {config.model.name} on {dataset.name} "
            f"({len(dataset.x_train)} train / {len(dataset.x_test)} test), {privacy}, "
            f"{steps}; {describe_settings(config, filled)}{notes}")


__all__ = ["DEFAULT_TRAIN_OUT", "start_line", "train"]
