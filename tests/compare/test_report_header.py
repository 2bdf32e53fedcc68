"""The report header says what its wall time covers: the command's own runs and montages, not
the runs it found already stored (a report of stored runs only shows 0 s)."""

from __future__ import annotations

from pathlib import Path

from compare.report import ReportContext, write_report
from dpcore.results import ResultsStore
from tests.compare.attribution_fakes import make_run


def test_header_says_what_the_wall_time_covers(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path / "runs")
    store.save(make_run("harmonised tf", 0, 0.8))
    report = write_report(tmp_path / "runs", tmp_path / "report",
                          ReportContext(command="dpcompare compare --preset x", wall_seconds=12.4))
    header = report.read_text().split("\n## ")[0]
    assert ("- wall time of the command that wrote this report, before the report (the runs it "
            "trained, not those already stored, and the montages): 12 s") in header
    assert "- training time summed over the 1 stored runs: " in header


def test_header_sums_the_evaluation_time_of_the_runs_that_record_it(tmp_path: Path) -> None:
    """A record written before runs timed their evaluation has none: the line counts only
    the runs that record it, and a report of such records alone has no line."""
    store = ResultsStore(tmp_path / "runs")
    timed = make_run("harmonised tf", 0, 0.8)
    timed.timing["evaluation_seconds"] = 30.4
    store.save(timed)
    store.save(make_run("harmonised tf", 1, 0.8))
    report = write_report(tmp_path / "runs", tmp_path / "report",
                          ReportContext(command="dpcompare compare --preset x"))
    assert ("- evaluation time after training (faithfulness, audits) summed over the 1 stored "
            "runs that record it: 30 s") in report.read_text()
    old = ResultsStore(tmp_path / "old")
    old.save(make_run("harmonised tf", 0, 0.8))
    text = write_report(tmp_path / "old", tmp_path / "old-report",
                        ReportContext(command="x")).read_text()
    assert "evaluation time" not in text
