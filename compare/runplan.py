"""Which runs of a grid are already done and which a ``compare`` call trains: one rule,
used by the runner (:func:`compare.runner.run_grid`) and by the dry run and the pre-training
check (:func:`compare.preflight.pending_runs`), so the two can never disagree.

A (cell, backend) run is done when its final record (status in
:data:`dpcore.results.FINAL_STATUSES`) is committed in a report folder (``records_from``,
:func:`compare.records.committed_records`; first folder wins, and that record is the one
reported) or stored in the store ``out``. Every other run is pending; a stored record that
is not final (interrupted, failed) or does not read is noted, and the run is redone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from compare.grid import Grid, GridCell
from dpcore.results import FINAL_STATUSES, RESULT_FILE, ResultsStore, RunResult, run_id

__all__ = ["RunPlan", "plan_runs"]


@dataclass
class RunPlan:
    """The runs of a grid split by what a ``compare`` call does with them (grid order)."""

    #: run id -> the committed final record the run is taken from
    committed: dict[str, RunResult] = field(default_factory=dict)
    #: run ids with a final record in the store (and none committed)
    stored: list[str] = field(default_factory=list)
    #: the runs to train
    pending: list[tuple[GridCell, str]] = field(default_factory=list)
    #: run id -> why a stored record does not count ("interrupted", "unreadable", ...)
    redo: dict[str, str] = field(default_factory=dict)
    #: the run ids not to train (committed or stored), in grid order
    done: list[str] = field(default_factory=list)


def plan_runs(grid: Grid, out: str | Path,
              records_from: Sequence[str | Path] = ()) -> RunPlan:
    """Split the runs of ``grid`` into committed, stored and pending (see the module
    docstring). Reads the store ``out`` without creating it (a dry run writes nothing) and
    the committed records of ``records_from`` once."""
    from compare.records import committed_records

    store = ResultsStore(out)
    known = committed_records(records_from)
    plan = RunPlan()
    for cell, backend in grid.runs():
        rid = run_id(cell.config.config_hash, backend)
        if rid in known:  # one record per run id, shared by every report
            plan.committed[rid] = known[rid]
            plan.done.append(rid)
            continue
        stored = store.load(cell.config.config_hash, backend)  # unreadable: warns, None
        if stored is not None and stored.status in FINAL_STATUSES:
            plan.stored.append(rid)
            plan.done.append(rid)
            continue
        if (store.run_dir(cell.config.config_hash, backend) / RESULT_FILE).is_file():
            plan.redo[rid] = "unreadable" if stored is None else stored.status
        plan.pending.append((cell, backend))
    return plan
