"""Run a grid on both backends with identical configurations, resumably.

For every (cell, backend) of a :class:`~compare.grid.Grid`:

* a run whose valid RunResult (status ``finished`` or ``diverged``) is already in the store is
  skipped (keyed by config hash + backend), so re-running the same command resumes the grid;
  a run that was interrupted has no final record and is redone from its start;
* otherwise the data set is prepared once per data spec (local DP applied, cached) and
  :func:`compare.training.train_and_record` trains, computes Grad-CAM faithfulness on a fixed
  seeded test subset, and writes the checkpoint then the RunResult atomically (the same
  record path as ``dpcompare train``);
* a diverged run (NaN loss) is recorded as such and the grid goes on; a run that fails with an
  error is recorded as ``failed`` with the message, and the grid goes on;
* a stored result that does not read as a valid RunResult (e.g. truncated by a crash outside
  the atomic write) counts as not finished: a warning names it and the run is redone;
* Ctrl-C (KeyboardInterrupt) during a run stores an ``interrupted`` record for that run (not
  final: the next invocation redoes it) and re-raises; finished runs are never touched. A run
  killed outright (SIGKILL) has no record and is redone in the same way;
* a DP-SGD model holding a layer the accountant cannot cover (BatchNorm) is refused with the
  privacy reason before its first step (:func:`dpcore.privacy_checks.check_dp_model`), never
  stored as finished.

A run whose final record is committed in a report folder (``records_from``, see
:mod:`compare.records`: same config hash and backend, status finished or diverged) also counts
as finished: it is not retrained, even on a machine without the store that trained it, and the
report uses that record.

After the grid, a saliency montage per (data set, model) group is computed from the stored
checkpoints (so it is complete after a resume too; a run known only from its committed record
contributes its committed montage column) and kept as arrays plus a PNG in the grid's own
montage folder (:func:`compare.montage.grid_montage_folder`); the report draws its montages
from those arrays.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from compare.cellrun import DatasetCache, run_one  # re-exported: callers import them here too
from compare.grid import Grid, GridCell
from compare.training import (  # re-exported: callers import them from here too
    CONV_MODELS,
    faithfulness_of,
    faithfulness_skip_reason,
    record_faithfulness,
)
from dpcore.backend import load_backend
from dpcore.errors import DpCompareError
from dpcore.mechanisms import is_non_private, privatises_images
from dpcore.results import FINAL_STATUSES, ResultsStore, RunResult, run_id

__all__ = [
    "CONV_MODELS", "FINAL_STATUSES", "DatasetCache", "GridOutcome",
    "faithfulness_of", "faithfulness_skip_reason", "record_faithfulness",
    "run_grid", "run_one", "write_montages",
]

if TYPE_CHECKING:
    from compare.executors import Executor
    from compare.runplan import RunPlan
    from dpcore.data.dataset import Dataset



@dataclass
class GridOutcome:
    """Counts of what a grid run did, and the wall time it took."""

    ran: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    diverged: list[str] = field(default_factory=list)
    #: unfinished runs left untrained (``run_grid(train=False)``)
    not_trained: list[str] = field(default_factory=list)
    #: runs another process sharing the store trained during this invocation (run claims)
    elsewhere: list[str] = field(default_factory=list)
    #: runs another process still held when this one stopped waiting (``--claim-wait``)
    still_claimed: list[str] = field(default_factory=list)
    wall_seconds: float = 0.0
    #: run id -> the committed record a skipped run was taken from (``records_from``)
    records: dict[str, RunResult] = field(default_factory=dict)


def montage_column_title(setting: str, result: RunResult) -> str:
    """A montage column's title: the setting, its epsilon when the setting does not say it,
    and "(collapsed)" when the model predicts (almost) one class (its maps explain a
    near-constant model; see :func:`compare.reporting.collapse.collapse_reason`)."""
    from compare.reporting.collapse import collapse_reason

    eps = result.privacy.get("epsilon_rdp") or result.privacy.get("epsilon_pld")
    eps_text = "non-private" if is_non_private(result.privacy.get("mechanism")) else (
        f"eps={eps:.2g}" if eps is not None and math.isfinite(eps) else setting)
    same = eps_text in setting or setting in eps_text
    title = setting if same else f"{setting} ({eps_text})"
    return title + (" (collapsed)" if collapse_reason(result.metrics) else "")


def run_grid(
    grid: Grid, out_dir: str | Path, *, data_dir: str | Path | None = None,
    progress: bool = True, log: Callable[[str], None] = print,
    executor: Executor | None = None, train: bool = True,
    records_from: Sequence[str | Path] = (), plan: RunPlan | None = None,
) -> GridOutcome:
    """Run every (cell, backend) not yet finished in ``out_dir``; returns what happened.

    ``executor`` runs the unfinished runs (default: :class:`~compare.executors.LocalExecutor`,
    in this process); it is prepared before anything is written (a bad executor setting is a
    DpCompareError with nothing written) and closed at the end. ``train=False`` runs nothing
    (the unfinished runs are listed in ``outcome.not_trained``) and only redraws the montages
    of the stored runs, for an interim report of a long grid. ``records_from``: report folders
    whose committed final records count as finished runs (first folder wins; see
    :func:`compare.records.committed_records`); those runs are listed in ``outcome.records``.
    ``plan``: the grid's :func:`compare.runplan.plan_runs` of ``out_dir`` and
    ``records_from``, when the caller listed it already (its preflight); listed here if None.
    """
    from compare.executors import GridJob, LocalExecutor, RunTracker
    from compare.executors.base import progress_shown
    from compare.runplan import plan_runs

    executor = executor or LocalExecutor()
    if train:  # nothing to execute otherwise: no cluster is started
        executor.prepare()
    try:
        store = ResultsStore(out_dir)
        store.ensure_writable()
        datasets = DatasetCache(data_dir)
        outcome = GridOutcome()
        start = time.perf_counter()
        runs = grid.runs()
        tracker = RunTracker(total=len(runs), desc=f"{grid.name}: runs", log=log,
                             show=progress_shown(progress),
                             on_result=lambda rid, result: _count(outcome, rid, result),
                             on_elsewhere=lambda rid, _result: outcome.elsewhere.append(rid),
                             on_still_claimed=outcome.still_claimed.append)
        if plan is None:
            plan = plan_runs(grid, out_dir, records_from)
        outcome.records = dict(plan.committed)
        for rid in plan.done:
            outcome.skipped.append(rid)
            tracker.skipped()
        for rid, why in plan.redo.items():
            log(f"  {rid}: {why}; redoing the run")
        pending = plan.pending
        try:
            if train:
                job = GridJob(grid, Path(out_dir).absolute(),  # a worker's cwd may differ
                              None if data_dir is None else Path(data_dir).absolute())
                executor.run(job, pending, tracker, log, datasets)
            else:
                outcome.not_trained = [run_id(c.config.config_hash, b) for c, b in pending]
                # A run whose record only lacks an asked evaluation is still reported, as
                # recorded (retraining it is a call that trains).
                outcome.records.update(plan.incomplete)
        finally:
            tracker.close()
    finally:
        if train:
            executor.close()
    if grid.evaluation.get("montage_images", 0):
        write_montages(grid, store, datasets, log=log, records=outcome.records,
                       records_from=records_from)
    outcome.wall_seconds = time.perf_counter() - start
    return outcome


def _count(outcome: GridOutcome, rid: str, result: RunResult) -> None:
    """Book one run that ran (whatever its status) into ``outcome``."""
    outcome.ran.append(rid)
    if result.status == "failed":
        outcome.failed.append(rid)
    elif result.status == "diverged":
        outcome.diverged.append(rid)


def _has_checkpoint(store: ResultsStore, result: RunResult | None) -> bool:
    """Whether ``result`` is a finished run of ``store`` whose checkpoint file is there."""
    return (result is not None and result.status == "finished" and bool(result.checkpoint)
            and (store.root / str(result.checkpoint)).is_file())


def _montage_sample(dataset: Dataset, n_images: int) -> tuple[np.ndarray, np.ndarray]:
    """The montage's sample of ``dataset``'s test split: its images in [0, 1] and their true
    classes (the same seeded indices wherever a montage is drawn or labelled)."""
    from dpcore.data import as_float01
    from dpcore.metrics import seeded_subset

    idx = seeded_subset(len(dataset.x_test), n_images, 1)
    return as_float01(dataset.x_test[idx]), np.asarray(dataset.y_test[idx]).astype(np.int64)


def _true_labels(members: Sequence[tuple[GridCell, str]], datasets: DatasetCache,
                 shown: np.ndarray, n_images: int,
                 log: Callable[[str], None]) -> np.ndarray | None:
    """The true classes of the montage images ``shown`` (taken from committed montage arrays
    stored before true labels were kept): the test labels at the montage's sample indices of
    the first member's data set whose images there are ``shown``; None (logged) when the data
    set cannot be loaded here or shows other images."""
    # runs without local DP first: their data set is not privatised for this
    clean_first = sorted(members, key=lambda m: privatises_images(m[0].config.privacy.mechanism))
    reasons = []
    for cell, _backend in clean_first:
        try:
            x, y = _montage_sample(datasets.get(cell.config), n_images)
            if np.array_equal(np.asarray(x, np.float16), np.asarray(shown, np.float16)):
                return y
            reasons.append("the committed images are not the data set's montage sample here")
        except DpCompareError as exc:
            reasons.append(str(exc))
    log(f"montage {members[0][0].config.data.name}: no true labels "
        f"({'; '.join(dict.fromkeys(reasons))})")
    return None


def write_montages(grid: Grid, store: ResultsStore, datasets: DatasetCache,
                   *, log: Callable[[str], None] = print,
                   records: Mapping[str, RunResult] | None = None,
                   records_from: Sequence[str | Path] = ()) -> list[Path]:
    """One saliency montage per (data set, model): rows = sample test images, columns = the
    input then the Grad-CAM overlay of every setting (first seed), one block per backend.

    Each montage is kept in the grid's montage folder of the store as its arrays
    (``NAME.npz``, :func:`compare.montage.save_montage_data`, what a report draws) and as the
    PNG drawn from them. A run with its checkpoint in this store is explained from it, also
    when a committed record reports it (e.g. a run another grid trained into the same store,
    whose own report drew no montage); a run without a checkpoint here but with a committed
    record (``records``) takes its column from the committed montage arrays of
    ``records_from`` when they show the same images. Returns the PNG paths.
    """
    from compare.montage import (
        MontageData,
        draw_montage,
        grid_montage_folder,
        safe_file_name,
        save_montage_data,
    )
    from compare.records import committed_montage_columns

    records = records or {}
    committed = committed_montage_columns(records_from) if records else {}
    groups: dict[tuple[str, str], list[tuple[GridCell, str]]] = {}
    first_seed = min((c.config.seed for c in grid.cells), default=0)
    for cell, backend in grid.runs():
        if cell.config.seed != first_seed or cell.config.model.name not in CONV_MODELS:
            continue
        key = (cell.config.data.name, cell.config.model.name)
        groups.setdefault(key, []).append((cell, backend))
    written = []
    n_images = int(grid.evaluation.get("montage_images", 4))
    for (data_name, model_name), members in groups.items():
        # (None, None, column) of a run explained here, (the images it showed, their true
        # classes or None, column) of a column taken from committed montage arrays; in the
        # grid's order
        entries: list[tuple[np.ndarray | None, np.ndarray | None, dict]] = []
        images = clean = None  # the first run's test images; those of a run without local DP
        images_labels = clean_labels = None  # their true classes (from the same data set)
        class_names: tuple[str, ...] = ()
        for cell, backend in sorted(members, key=lambda m: m[1]):
            rid = run_id(cell.config.config_hash, backend)
            result = store.load(cell.config.config_hash, backend)
            if rid in records and not _has_checkpoint(store, result):
                result = records[rid]
                if rid in committed:
                    data, column = committed[rid]
                    entries.append((data.images, data.labels, {
                        **column, "title": montage_column_title(cell.setting, result),
                        "inputs": column["inputs"] if column["inputs"] is not None
                        else data.images}))
                    class_names = class_names or tuple(data.class_names)
                continue
            if not _has_checkpoint(store, result):
                continue
            checkpoint = store.root / str(result.checkpoint)  # type: ignore[union-attr]
            result = records.get(rid, result)  # the record is the one reported
            try:
                dataset = datasets.get(cell.config)
                # The run's own test images (privatised for local-DP runs: a run whose
                # noise leaves [0, 1] is skipped with the reason logged).
                x, y = _montage_sample(dataset, n_images)
                if images is None:
                    images, images_labels = x, y
                    class_names = tuple(dataset.class_names)
                if clean is None and not privatises_images(cell.config.privacy.mechanism):
                    clean, clean_labels = x, y
                code = load_backend(backend)
                trained = code.load_checkpoint(checkpoint)
                # Each model is explained on the inputs it is evaluated on.
                proba = code.predict_proba(trained.model, x)
                pred = proba.argmax(axis=1)
                maps = code.gradcam(trained.model, x, pred)
            except DpCompareError as exc:
                log(f"montage {data_name}/{model_name}: skipped {backend}: {exc}")
                continue
            entries.append((None, None, {"title": montage_column_title(cell.setting, result),
                                   "backend": backend, "run_id": rid, "inputs": x, "maps": maps,
                                   "pred_class": pred,
                                   "confidence": proba[np.arange(len(pred)), pred]}))
        base, labels = (clean, clean_labels) if clean is not None else (images, images_labels)
        columns = []
        for shown, shown_labels, column in entries:  # committed columns showing these images
            if shown is not None and base is None:
                base = shown
            if shown is None or np.array_equal(np.asarray(shown, np.float16),
                                               np.asarray(base, np.float16)):
                columns.append(column)
                if labels is None and shown_labels is not None:  # the labels of these images
                    labels = shown_labels
            else:
                log(f"montage {data_name}/{model_name}: committed column of "
                    f"{column['run_id']} shows other images; left out")
        if base is None or not columns:
            continue
        if labels is None:  # every column committed before true labels were kept
            labels = _true_labels(members, datasets, base, n_images, log)
        name = safe_file_name(f"{data_name}-{model_name}")
        folder = grid_montage_folder(store.root, grid.name)
        folder.mkdir(parents=True, exist_ok=True)
        data = MontageData(f"{name}.png", base, tuple(columns), class_names,
                           title=f"Grad-CAM, {data_name} / {model_name}", labels=labels)
        save_montage_data(folder / f"{name}.npz", data)
        written.append(draw_montage(folder / f"{name}.png", data))
    return written
