"""Which runs of a grid are already done and which a ``compare`` call trains: one rule,
used by the runner (:func:`compare.runner.run_grid`) and by the dry run and the pre-training
check (:func:`compare.api.compare`), so the two can never disagree.

A (cell, backend) run is done when its final record (status in
:data:`dpcore.results.FINAL_STATUSES`) is committed in a report folder of ``records_from``
(:func:`compare.records.committed_records`; that record is the one reported; ``compare``
passes folders only with ``--resume-from-records``, :mod:`compare.resume`) or stored in the
store ``out``, and that record holds every evaluation the grid asks for
(:data:`EVALUATION_GAPS`). Every other run is pending; a stored record that is not final
(interrupted, failed), does not read, or lacks an asked evaluation is noted, and the run is
redone.

A record can lack an evaluation because another grid trained the run without it (e.g.
``pneumonia-noise-draws`` runs with ``evaluation.faithfulness: false``, and
``interpretability-vs-epsilon-tuned`` shares five of its seeds and asks for faithfulness).
The run is then trained again: with the same training code, versions, CPU and threads a run
is a deterministic function of its config (the same seed gives the same weights, metrics and
history, timing aside; records say what produced them, :mod:`dpcore.provenance`), so the new
record repeats the old figures and adds the evaluation, and it replaces the old record in
every report that shows the run (:func:`compare.records.committed_records` prefers the
record with more evaluations), which keeps one record per run id.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compare.grid import Grid, GridCell
from dpcore.results import FINAL_STATUSES, RESULT_FILE, ResultsStore, RunResult, run_id

__all__ = ["EVALUATION_GAPS", "RunPlan", "evaluation_gap", "plan_runs"]


def _faithfulness_gap(evaluation: Mapping[str, Any], cell: GridCell,
                      record: RunResult) -> str | None:
    """"faithfulness" when the grid asks for Grad-CAM faithfulness, the finished run is an
    explainable image model, and the record has neither the figures nor the reason they were
    skipped (``metrics["faithfulness_note"]``, test images outside [0, 1])."""
    from compare.training import Evaluation
    from dpcore.evaluation.faithfulness import faithfulness_applies

    asked = Evaluation.of_grid(evaluation).asks_faithfulness
    applies = (record.status == "finished"  # as train_and_record measures it
               and faithfulness_applies(record.dataset.get("task"), cell.config.model))
    if (asked and applies and record.faithfulness is None
            and "faithfulness_note" not in record.metrics):
        return "faithfulness"
    return None


def _audit_gap(evaluation: Mapping[str, Any], cell: GridCell,
               record: RunResult) -> str | None:
    """"membership audit" when the grid asks for the empirical membership-inference audit
    (``evaluation.audit``), the run finished (as train_and_record audits it), and the record
    holds no such audit (:func:`compare.records.has_membership_audit`; a one-run canary audit
    alone, ``audit["one_run"]``, is part of the run's config, not this evaluation)."""
    from compare.records import has_membership_audit
    from compare.training import Evaluation

    if (Evaluation.of_grid(evaluation).audit and record.status == "finished"
            and not has_membership_audit(record)):
        return "membership audit"
    return None


#: The evaluations a grid can ask for and a record can lack, one check each:
#: ``check(grid.evaluation, cell, record)`` names what the record lacks, or None. Register a
#: new evaluation here and a record without it is redone.
EVALUATION_GAPS: list[Callable[[Mapping[str, Any], GridCell, RunResult], str | None]] = [
    _faithfulness_gap,
    _audit_gap,
]


def evaluation_gap(evaluation: Mapping[str, Any], cell: GridCell,
                   record: RunResult) -> list[str]:
    """The evaluations ``evaluation`` (a grid's) asks for that ``record`` lacks (empty: the
    record covers the grid)."""
    return [gap for check in EVALUATION_GAPS if (gap := check(evaluation, cell, record))]


@dataclass
class RunPlan:
    """The runs of a grid split by what a ``compare`` call does with them (grid order)."""

    #: run id -> the committed final record the run is taken from
    committed: dict[str, RunResult] = field(default_factory=dict)
    #: run ids with a final record in the store (and none committed)
    stored: list[str] = field(default_factory=list)
    #: the runs to train
    pending: list[tuple[GridCell, str]] = field(default_factory=list)
    #: run id -> why a stored or committed record does not count, a phrase ("stored record
    #: is interrupted, not final", "committed record lacks faithfulness, asked by this grid")
    redo: dict[str, str] = field(default_factory=dict)
    #: the run ids not to train (committed or stored), in grid order
    done: list[str] = field(default_factory=list)
    #: run id -> the final record of a pending run that lacks an evaluation the grid asks
    #: for (committed, else stored): what a call that trains nothing still reports
    incomplete: dict[str, RunResult] = field(default_factory=dict)


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
        lacking: list[str] = []
        if rid in known:  # one record per run id, shared by every report
            lacking = evaluation_gap(grid.evaluation, cell, known[rid])
            if not lacking:
                plan.committed[rid] = known[rid]
                plan.done.append(rid)
                continue
        stored = store.load(cell.config.config_hash, backend)  # unreadable: warns, None
        if stored is not None and stored.status in FINAL_STATUSES:
            stored_lacks = evaluation_gap(grid.evaluation, cell, stored)
            if not stored_lacks:
                plan.stored.append(rid)
                plan.done.append(rid)
                continue
            lacking = lacking or stored_lacks
        if lacking:
            where = "committed" if rid in known else "stored"
            record = known.get(rid, stored)
            assert record is not None  # a gap was found in one of them
            plan.incomplete[rid] = record
            plan.redo[rid] = f"{where} record lacks {', '.join(lacking)}, asked by this grid"
        elif (store.run_dir(cell.config.config_hash, backend) / RESULT_FILE).is_file():
            status = "unreadable" if stored is None else stored.status
            plan.redo[rid] = f"stored record is {status}, not final"
        plan.pending.append((cell, backend))
    return plan
