"""One rule for which runs of a grid are done: the runner and the dry run share
:func:`compare.runplan.plan_runs`, so a dry run lists exactly the runs a real call trains."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from compare import api
from compare.grid import expand_grid
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
    assert plan.redo == {interrupted.run_id: "stored record is interrupted, not final"}
    assert [run_id(c.config.config_hash, b) for c, b in plan.pending] == [interrupted.run_id]
    assert set(plan.stored) == set(tf_ids) - {interrupted.run_id}
    assert sorted(plan.done) == sorted(torch_ids | set(plan.stored))

    again = api.compare(TINY, out=store, report=report, progress=False,
                        resume_from_records=tmp_path / "reports")
    assert again.outcome.ran == [interrupted.run_id]
    assert sorted(again.outcome.skipped) == sorted(plan.done)


def test_planning_a_store_that_does_not_exist_creates_nothing(tmp_path: Path) -> None:
    grid = expand_grid(TINY)
    plan = plan_runs(grid, tmp_path / "absent")
    assert len(plan.pending) == len(grid.runs()) and not plan.done and not plan.redo
    assert not (tmp_path / "absent").exists()


def test_a_record_without_an_evaluation_the_grid_asks_for_is_retrained_and_replaces_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run another grid trained without faithfulness (``evaluation.faithfulness: false``)
    is not done for a grid asking for it: it is trained again, gives the same figures (a run
    is deterministic on this stack) plus the faithfulness, and the committed record with
    more evaluations is then the one every report regenerated after it shows."""
    from compare.records import committed_records, read_records, record_folders_beside

    reports = tmp_path / "reports"
    first = api.compare(TINY, out=tmp_path / "a", backends=["torch"],  # no faithfulness
                        report=reports / "tiny", progress=False)
    old = {r.run_id: r for r in read_records(reports / "tiny").results}
    assert len(first.outcome.ran) == 2 and all(r.faithfulness is None for r in old.values())

    asking = {**TINY, "name": "tiny-faithful",
              "evaluation": {"faithfulness": True, "faithfulness_subset": 8,
                             "montage_images": 0}}
    folders = record_folders_beside(reports / "tiny-faithful")
    plan = plan_runs(expand_grid(asking, backends=["torch"]), tmp_path / "b", folders)
    assert not plan.done and set(plan.redo) == set(old)
    assert all(why == "committed record lacks faithfulness, asked by this grid"
               for why in plan.redo.values())

    capsys.readouterr()
    api.compare(asking, out=tmp_path / "b", backends=["torch"],
                report=reports / "tiny-faithful", dry_run=True, resume_from_records=reports)
    planned = [line for line in capsys.readouterr().out.splitlines()
               if line.startswith("would run")]
    assert len(planned) == 2 and all(line.endswith(
        "[redone: committed record lacks faithfulness, asked by this grid]") for line in planned)
    again = api.compare(asking, out=tmp_path / "b", backends=["torch"],
                        report=reports / "tiny-faithful", progress=False,
                        resume_from_records=reports)
    assert set(again.outcome.ran) == set(old)
    new = {r.run_id: r for r in read_records(reports / "tiny-faithful").results}
    for rid, record in new.items():
        assert record.faithfulness is not None
        assert record.metrics == old[rid].metrics  # the same run, evaluated further
    # Both report folders are looked in; the more complete record wins whichever is first.
    for order in (folders, folders[::-1]):
        assert all(r.faithfulness is not None for r in committed_records(order).values())
    # The first grid, regenerated without training, now shows the more complete record,
    # and asks for nothing more.
    api.compare(TINY, out=tmp_path / "a", backends=["torch"], report=reports / "tiny",
                progress=False, train=False, resume_from_records=reports)
    assert all(r.faithfulness is not None for r in read_records(reports / "tiny").results)
    # ... and, not asking for faithfulness, shows no faithfulness section for them.
    assert "## Grad-CAM faithfulness" in (reports / "tiny-faithful" / "report.md").read_text()
    assert "## Grad-CAM faithfulness" not in (reports / "tiny" / "report.md").read_text()
    import pandas as pd

    for table in ("runs.csv", "summary.csv"):
        frame = pd.read_csv(reports / "tiny" / table)
        assert not any(frame[c].notna().any() for c in frame if "average_drop" in c), table
    assert not plan_runs(expand_grid(asking, backends=["torch"]), tmp_path / "b",
                         folders).pending


def test_a_record_whose_faithfulness_was_skipped_for_a_reason_is_done() -> None:
    """A record that says why faithfulness was not computed (local-DP test images outside
    [0, 1]) or whose model it does not apply to is complete: it is never retrained."""
    from compare.runplan import evaluation_gap
    from dpcore.results import RunResult

    grid = expand_grid(TINY)
    cell = grid.cells[0]
    asks = {"faithfulness": True, "faithfulness_subset": 8}
    base = RunResult(run_id="x-torch", config={}, config_hash="x", backend="torch", seed=0,
                     status="finished", dataset={"task": "image"}, metrics={})
    assert evaluation_gap(asks, cell, base) == ["faithfulness"]
    assert evaluation_gap({"faithfulness": False}, cell, base) == []
    noted = dataclasses.replace(base, metrics={"faithfulness_note": "not computed: ..."})
    assert evaluation_gap(asks, cell, noted) == []
    assert evaluation_gap(asks, cell, dataclasses.replace(base, status="diverged")) == []
    assert evaluation_gap(asks, cell, dataclasses.replace(base, dataset={"task": "text"})) == []


def test_a_record_without_the_membership_audit_the_grid_asks_for_is_redone() -> None:
    """``evaluation.audit``: a finished record with no membership-inference audit, or with
    only the one-run canary audit (part of its config, not this evaluation), lacks it; one
    holding it, or a diverged run (never audited), does not. Of two records of one run, the
    one holding the audit counts as more complete."""
    from compare.records import evaluations_held
    from compare.runplan import evaluation_gap
    from dpcore.results import RunResult

    cell = expand_grid(TINY).cells[0]
    asks = {"faithfulness": False, "audit": True}
    base = RunResult(run_id="x-torch", config={}, config_hash="x", backend="torch", seed=0,
                     status="finished", dataset={"task": "image"}, metrics={})
    canary_only = dataclasses.replace(base, audit={"one_run": {"epsilon_lower": 0.1}})
    audited = dataclasses.replace(base, audit={"one_run": {"epsilon_lower": 0.1},
                                               "backend": "torch", "claim": "as run"})
    assert evaluation_gap(asks, cell, base) == ["membership audit"]
    assert evaluation_gap(asks, cell, canary_only) == ["membership audit"]
    assert evaluation_gap(asks, cell, audited) == []
    assert evaluation_gap({"faithfulness": False}, cell, base) == []
    assert evaluation_gap(asks, cell, dataclasses.replace(base, status="diverged")) == []
    assert evaluations_held(audited) > evaluations_held(canary_only) == evaluations_held(base)


def test_a_call_that_trains_nothing_still_reports_a_record_lacking_an_evaluation(
        tmp_path: Path) -> None:
    """Regenerating a report (``--no-train``) never drops a run because its record lacks an
    evaluation the grid asks for: the record is reported as it is, and the run is listed as
    not trained."""
    from compare.records import read_records

    reports = tmp_path / "reports"
    api.compare(TINY, out=tmp_path / "a", backends=["torch"], report=reports / "tiny",
                progress=False)
    asking = {**TINY, "name": "tiny-faithful",
              "evaluation": {"faithfulness": True, "faithfulness_subset": 8,
                             "montage_images": 2}}
    regenerated = api.compare(asking, out=tmp_path / "b", backends=["torch"],
                              report=reports / "tiny-faithful", progress=False, train=False,
                              resume_from_records=reports)
    assert len(regenerated.outcome.not_trained) == 2 and not regenerated.outcome.ran
    shown = read_records(reports / "tiny-faithful").results
    assert len(shown) == 2 and all(r.faithfulness is None for r in shown)


def test_a_stored_record_lacking_an_asked_evaluation_is_retrained_in_the_same_store(
        tmp_path: Path) -> None:
    """Two grids sharing one store: the record the first stored without faithfulness is not
    taken as 'done by another process' by the second (which asks for it); it is trained
    again and the store's record gains the faithfulness."""
    store = tmp_path / "store"
    first = api.compare(TINY, out=store, backends=["torch"], progress=False)
    asking = {**TINY, "name": "tiny-faithful",
              "evaluation": {"faithfulness": True, "faithfulness_subset": 8,
                             "montage_images": 0}}
    again = api.compare(asking, out=store, backends=["torch"], progress=False)
    assert sorted(again.outcome.ran) == sorted(first.outcome.ran)
    assert not again.outcome.elsewhere
    assert all(r.faithfulness is not None for r in ResultsStore(store).list_runs())
