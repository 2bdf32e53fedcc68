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

A run whose final record is committed in one of the report folders ``records_from`` (see
:mod:`compare.records`: same config hash and backend, status finished or diverged) also counts
as finished: it is not retrained, even on a machine without the store that trained it, and the
report uses that record. ``compare`` passes folders only with ``--resume-from-records``
(:mod:`compare.resume`); by default ``records_from`` is empty and every run not finished in
the store trains.

After the grid, the arrays of a saliency montage per (data set, model) group are computed from
the stored checkpoints and kept in the store (:func:`compare.grid_montages.store_montages`);
the report layer draws each montage from those arrays.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from compare.grid import Grid
from compare.grid_montages import store_montages
from dpcore.pipeline import DatasetCache
from dpcore.results import ResultsStore, RunResult, run_id

__all__ = ["GridOutcome", "run_grid"]

if TYPE_CHECKING:
    from compare.executors import Executor
    from compare.runplan import RunPlan



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
    (the unfinished runs are listed in ``outcome.not_trained``) and only recomputes the
    montage arrays of the stored runs, for an interim report of a long grid.
    ``records_from``: report folders whose committed final records count as finished runs
    (first folder wins; see
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
        store_montages(grid, store, datasets, log=log, records=outcome.records,
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
