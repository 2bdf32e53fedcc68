"""Every committed report is a pure function of the run records committed beside it.

Each report folder under ``reports/`` that holds ``records/`` is rebuilt from them into a
temporary folder (no training, no model, no store) and compared with the committed folder by
:func:`compare.records.report_differences`: the same files; CSVs, JSON and the records byte for
byte; report.md byte for byte except its written-time line; PNGs by the digest of their
plotted data (``records/figures.json``), because PNG bytes depend on the matplotlib, FreeType
and zlib build while the data they show must not change. A change to the report code that
changes a committed report fails here until the report is rebuilt (``dpcompare report
--records reports/*``) and the change is committed on purpose.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from compare.records import has_records, read_records, report_differences
from compare.report import rebuild_report

REPORTS = Path(__file__).resolve().parents[2] / "reports"

#: Folders under reports/ that are not grid reports (no RunResults behind them): never rebuilt.
NOT_GRID_REPORTS = {
    "reproduce-demo": "reproductions of demo runs (dpcompare reproduce): reproduction.md / "
                      ".csv against records, not a grid of runs",
    "auc-scoring": "stored runs re-scored from their checkpoints (benchmarks/auc_scoring), "
                   "not a grid of runs",
    "benchmarks": "speed/memory benchmark (dpcompare bench), written from results.json",
    "defaults-sweep": "tuning sweep of the train defaults (benchmarks/), not a grid of runs",
    "tuning": "hyper-parameter tuning notes (benchmarks/tuning_sweep), not a grid of runs",
}

_RETRAIN = ("written before report folders held records; its store did not survive the "
            "checkout, so it needs retraining (dpcompare compare --preset {0} --report "
            "reports/{0})")
#: Grid reports without records yet. This list may only shrink: a test asserts it is exactly
#: the set of grid report folders lacking records.
NO_RECORDS: dict[str, str] = {name: _RETRAIN.format(name) for name in (
)}


def _folders() -> list[str]:
    return sorted(p.name for p in REPORTS.iterdir() if p.is_dir())


def _with_records() -> list[str]:
    return [name for name in _folders() if has_records(REPORTS / name)]


def test_the_folders_without_records_are_exactly_the_listed_ones() -> None:
    lacking = {name for name in _folders()
               if name not in NOT_GRID_REPORTS and not has_records(REPORTS / name)}
    assert lacking == set(NO_RECORDS), (
        "update NO_RECORDS: it must list exactly the grid reports without records/")
    assert not set(NOT_GRID_REPORTS) & set(_with_records())
    assert set(NOT_GRID_REPORTS) <= set(_folders())


@pytest.mark.parametrize("name", _with_records())
def test_a_committed_report_is_its_rebuild_from_records(name: str, tmp_path: Path) -> None:
    rebuilt = tmp_path / name
    rebuild_report(REPORTS / name, rebuilt)
    problems = report_differences(REPORTS / name, rebuilt)
    assert not problems, (f"reports/{name} differs from its rebuild from records (rebuild it "
                          f"with `dpcompare report --records reports/{name}`):\n"
                          + "\n".join(problems))


def test_one_record_per_run_id_across_committed_reports() -> None:
    """A run shown by several reports has one record (docs/findings/same-hash-conflict.md:
    one config trained in several stores, by different code versions, gave each report its
    own numbers). Labels are the reporting grid's own and may differ."""
    seen: dict[str, tuple[str, dict]] = {}
    for name in _with_records():
        for result in read_records(REPORTS / name).results:
            body = {k: v for k, v in result.to_dict().items() if k != "labels"}
            if result.run_id in seen:
                first, other = seen[result.run_id]
                assert other == body, f"{result.run_id}: reports/{first} and reports/{name} differ"
            else:
                seen[result.run_id] = (name, body)
