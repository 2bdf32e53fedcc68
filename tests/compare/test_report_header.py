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
