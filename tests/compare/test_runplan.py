"""One rule for which runs of a grid are done: the runner and the dry run share
:func:`compare.runplan.plan_runs`, so a dry run lists exactly the runs a real call trains."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from compare import api
from compare.grid import expand_grid
from compare.preflight import pending_runs
from compare.runplan import plan_runs
from dpcore.results import ResultsStore, run_id
from tests.compare.test_resume_from_records import TINY


def test_runs_split_into_committed_stored_redone_and_pending(tmp_path: Path) -> None:
    report = tmp_path / "reports" / "tiny"
    torch_ids = set(api.compare(TINY, out=tmp_path / "old", backends=["torch"],
                                report=report, progress=False).outcome.ran)
    store = tmp_path / "store"
    tf_ids = api.compare(TINY, out=store, backends=["tf"], progress=False).outcome.ran
    assert len(torch_ids) == 2 and len(tf_ids) == 2
    # one tf run was interrupted: its stored record is not final
    interrupted = ResultsStore(store).list_runs()[0]
    ResultsStore(store).save(dataclasses.replace(interrupted, status="interrupted"))

    grid = expand_grid(TINY)
    plan = plan_runs(grid, store, [report])
    assert set(plan.committed) == torch_ids
    assert plan.redo == {interrupted.run_id: "interrupted"}
    assert [run_id(c.config.config_hash, b) for c, b in plan.pending] == [interrupted.run_id]
    assert set(plan.stored) == set(tf_ids) - {interrupted.run_id}
    assert sorted(plan.done) == sorted(torch_ids | set(plan.stored))
    assert pending_runs(grid, store, [report]) == plan.pending

    again = api.compare(TINY, out=store, report=report, progress=False)
    assert again.outcome.ran == [interrupted.run_id]
    assert sorted(again.outcome.skipped) == sorted(plan.done)


def test_planning_a_store_that_does_not_exist_creates_nothing(tmp_path: Path) -> None:
    grid = expand_grid(TINY)
    plan = plan_runs(grid, tmp_path / "absent")
    assert len(plan.pending) == len(grid.runs()) and not plan.done and not plan.redo
    assert not (tmp_path / "absent").exists()
