"""The one record path of a run: train, evaluate, checkpoint, store (:func:`train_and_record`).

Both ``dpcompare train`` (:mod:`compare.cli.train`) and the grid runner
(:func:`compare.cellrun.run_one`) call :func:`train_and_record`, so a stored RunResult always went
through the same steps, in this order:

1. the backend trains (:func:`dpcore.backend.load_backend` ``(backend).train``, which is
   :func:`dpcore.assembly.train`: the data factors applied, a DP-SGD model holding a layer the
   accountant cannot cover (BatchNorm) refused before the first step, the one-run audit's
   canaries inserted and scored);
2. for a finished run, the evaluations of :mod:`dpcore.evaluation` through the backend
   contract: Grad-CAM faithfulness on a fixed seeded test subset (image conv models; the
   reason is recorded where it is skipped) with the model-randomisation sanity check of its
   maps and its figures after temperature scaling; a local-DP run's test metrics on clean and
   on privatised test images; then the empirical audit if asked;
3. the checkpoint is written, then the RunResult (both atomically) with its path relative to
   the store root and its SHA-256 (:func:`dpcore.runstore.save_run`: when the storage refuses
   a write, the store is left consistent, the trained run is kept in the rescue folder and a
   :class:`~dpcore.errors.StorageError` says where).

Ctrl-C (KeyboardInterrupt) during any of these stores an ``interrupted`` record (not final:
the next invocation redoes the run) and is re-raised, never swallowed: the CLI exits 130.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compare.calibrators import load_config_calibrator
from dpcore.backend import load_backend
from dpcore.config import PerfSpec, RunConfig
from dpcore.data.dataset import Dataset
from dpcore.errors import DpCompareError
from dpcore.evaluation.faithfulness import record_faithfulness
from dpcore.evaluation.ldp import ldp_test_metrics
from dpcore.evaluation.membership import audit_trained
from dpcore.results import ResultsStore, RunResult, library_versions, run_id, utc_now
from dpcore.runstore import save_run
from dpcore.trainloop import EpochCallback

INTERRUPTED_MESSAGE = "interrupted (KeyboardInterrupt); redone by the next invocation"


@dataclass(frozen=True)
class Evaluation:
    """What is measured after a finished run.

    Attributes:
        faithfulness_subset: Grad-CAM faithfulness on this many seeded test images (0 skips).
        audit: run the empirical membership-inference audit
            (:mod:`dpcore.evaluation.membership`).
    """

    faithfulness_subset: int = 500
    audit: bool = False

    @property
    def asks_faithfulness(self) -> bool:
        """Whether Grad-CAM faithfulness is measured (a subset of at least one image)."""
        return self.faithfulness_subset > 0

    @classmethod
    def of_grid(cls, evaluation: Mapping[str, Any]) -> Evaluation:
        """The options of a grid's ``evaluation`` mapping (``faithfulness: false`` skips)."""
        subset = int(evaluation.get("faithfulness_subset", 500))
        if not evaluation.get("faithfulness", True):
            subset = 0
        return cls(faithfulness_subset=subset, audit=bool(evaluation.get("audit", False)))


def epoch_line_logger(total_epochs: int | None, log: Callable[[str], None], *,
                      indent: str = "") -> EpochCallback:
    """A training callback that logs one line per epoch, for output that is not a terminal
    (a log file, a notebook), where the per-epoch bar is not shown: the epoch (of
    ``total_epochs``, left out when None), the mean training loss in nats, the test accuracy
    as a fraction, the epsilon spent so far (``n/a`` without DP accounting, ``inf`` without
    DP), the optimizer step reached and the seconds of training. Never asks training to stop.
    The one line format of ``dpcompare train`` and of grids logging to a file."""
    of_total = "" if total_epochs is None else f"/{total_epochs}"

    def show(record: dict[str, Any]) -> None:
        eps = record.get("epsilon_spent")
        log(f"{indent}epoch {record['epoch']}{of_total}: loss {record['loss']:.4f}, test "
            f"accuracy {record['test_accuracy']:.4f}, epsilon "
            f"{'n/a' if eps is None else f'{eps:.3g}'}, step {record['step']}, "
            f"{record['seconds']:.1f} s")
    return show


def train_and_record(
    config: RunConfig, dataset: Dataset, backend: str, store: ResultsStore, *,
    perf: PerfSpec | None = None, evaluation: Evaluation | None = None,
    progress: bool = True, callbacks: Sequence[EpochCallback] = (),
    labels: Mapping[str, str] | None = None, grid_name: str | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> tuple[RunResult, Path]:
    """Train one run, evaluate it, write its checkpoint and store its RunResult.

    Args:
        config: the run's configuration.
        dataset: the prepared data (privatised already for a local-DP run).
        backend: ``tf`` or ``torch``.
        store: where ``runs/<config_hash>-<backend>/`` is written.
        perf: performance switches (never change the result beyond float tolerance).
        evaluation: what to measure after training (default :class:`Evaluation`).
        progress: tqdm bars (only on a terminal).
        callbacks: per-epoch callbacks, passed to the backend.
        labels: the grid's labels of this run (recorded).
        grid_name: the grid's name (recorded).
        defaults: the config keys the bench's defaults filled in (recorded as ``defaults``).

    Returns:
        The stored RunResult (status ``finished`` or ``diverged``) and the path of its file.

    Raises:
        PrivacyError: the model holds a layer DP-SGD cannot account for (nothing stored).
        KeyboardInterrupt: after an ``interrupted`` record was stored.
    """
    started = utc_now()
    evaluation = evaluation or Evaluation()
    load_config_calibrator(config)  # the backend registering its accountant (e.g. prv)
    try:
        train = load_backend(backend)
        trained = train.train(config, dataset, perf or PerfSpec(), progress=progress,
                              callbacks=list(callbacks))
        result: RunResult | None = trained.result
        if result is None or trained.dataset is None:  # pragma: no cover - the contract
            raise DpCompareError(f"backend {backend!r} returned no RunResult or data set")
        # the inputs as the model was trained on them (factors.input_scaling / eval_split):
        # the evaluations below see them too
        dataset = trained.dataset
        evaluation_started = time.perf_counter()
        if result.status == "finished" and evaluation.asks_faithfulness:
            record_faithfulness(result, train, trained, dataset,
                                evaluation.faithfulness_subset, seed=0)
        if result.status == "finished" and dataset.ldp_test_images is not None:
            result.metrics["ldp_test_inputs"] = ldp_test_metrics(train, trained, dataset,
                                                                 config.data.ldp_test_inputs)
        if result.status == "finished" and evaluation.audit:
            result.audit = {**(result.audit or {}),
                            **audit_trained(train, trained, dataset, result.privacy)}
        # seconds of the evaluations after training (faithfulness, local-DP test inputs,
        # membership audit): what pricing a grid from its records needs beside train_seconds
        result.timing["evaluation_seconds"] = round(time.perf_counter() - evaluation_started, 3)
        record_privacy_figures(result)
        result.labels = dict(labels or {})
        result.grid = grid_name
        result.defaults = dict(defaults or {})
        # checkpoint (with its SHA-256) then record; a storage fault keeps the run elsewhere
        return result, save_run(store, result,
                                lambda path: train.save_checkpoint(trained, path))
    except KeyboardInterrupt:
        store_interrupted(store, config, backend, dataset, started, labels=labels,
                          grid_name=grid_name)
        raise


def record_privacy_figures(result: RunResult) -> None:
    """Put the claimed and proved epsilon (:mod:`dpcore.proved`) in ``result.privacy`` and,
    for an audited run, whether the audit found a privacy violation in
    ``result.audit["one_run"]``: its audited bound above the proved epsilon (above the claim
    where nothing is proved), or its per-step audit flagged (noise not fresh at every step,
    or a canary not clipped as an honest step clips it: :mod:`dpcore.audit.per_step`); a
    run with ``factors.fault`` is marked ``deliberately_broken`` in both."""
    from dpcore.audit.faults import BROKEN_LABEL
    from dpcore.audit.per_step import per_step_findings
    from dpcore.proved import is_violation, privacy_figures

    result.privacy.update(privacy_figures(result.config, result.backend, result.privacy))
    fault = (result.config.get("factors") or {}).get("fault", "none")
    if fault != "none":
        result.privacy["deliberately_broken"] = f"{BROKEN_LABEL}: factors.fault={fault}"
    one_run = (result.audit or {}).get("one_run")
    if one_run is not None:
        bound = is_violation(one_run.get("epsilon_lower_bound"),
                             result.privacy.get("epsilon_claimed"),
                             result.privacy.get("epsilon_proved"))
        one_run["violation"] = bound or bool(per_step_findings(one_run.get("per_step")))
        if fault != "none":
            one_run["deliberately_broken"] = fault


def incomplete_record(
    config: RunConfig, backend: str, dataset: Dataset | None, *, status: str, error: str,
    started: str, labels: Mapping[str, str] | None = None, grid_name: str | None = None,
) -> RunResult:
    """A schema-valid record of a run that did not finish: ``failed`` (with its error) or
    ``interrupted``. Neither is final: the runner redoes such a run."""
    return RunResult(
        run_id=run_id(config.config_hash, backend), config=config.to_dict(),
        config_hash=config.config_hash, backend=backend, seed=config.seed, status=status,
        versions=library_versions(),
        dataset={"name": config.data.name,
                 "fingerprint": dataset.fingerprint if dataset else "",
                 "n_train": len(dataset.x_train) if dataset else 1,
                 "n_test": len(dataset.x_test) if dataset else 1},
        privacy={"mechanism": config.privacy.mechanism, "noise_multiplier": None,
                 "delta": None, "steps": None, "sampling_rate": None, "epsilon_rdp": None,
                 "epsilon_pld": None, "dp_event": {}},
        error=error, labels=dict(labels or {}), grid=grid_name, started_at=started,
        finished_at=utc_now(),
    )


def store_interrupted(
    store: ResultsStore, config: RunConfig, backend: str, dataset: Dataset | None,
    started: str, *, labels: Mapping[str, str] | None = None, grid_name: str | None = None,
) -> Path:
    """Store that this run was interrupted; returns the record's path.

    Best effort by design: the write is atomic, so a second Ctrl-C during it loses only this
    marker, never a finished result of another run.
    """
    return store.save(incomplete_record(
        config, backend, dataset, status="interrupted", error=INTERRUPTED_MESSAGE,
        started=started, labels=labels, grid_name=grid_name))
