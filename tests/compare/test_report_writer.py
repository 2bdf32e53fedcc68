"""Rewriting a report folder leaves no stale table or figure of the earlier report."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from compare.reporting.section import ReportFigure, SectionOutput
from compare.reporting.writer import write_report_files


def _figure(name: str) -> ReportFigure:
    return ReportFigure(name, lambda path: Path(path).write_bytes(b"png"))


def test_a_rewrite_removes_the_files_the_new_report_does_not_have(tmp_path: Path) -> None:
    table = pd.DataFrame({"a": [1]})
    first = SectionOutput(["# first"], {"runs.csv": table, "faithfulness.csv": table},
                          (_figure("accuracy.png"), _figure("average_drop.png"),
                           _figure("montages/m.png")))
    write_report_files(tmp_path, [first])
    (tmp_path / "notes.txt").write_text("mine")  # not the writer's: kept
    (tmp_path / "records").mkdir()
    (tmp_path / "records" / "figures.json").write_text("{}")
    assert (tmp_path / "average_drop.png").is_file()

    second = SectionOutput(["# second"], {"runs.csv": table}, (_figure("accuracy.png"),))
    write_report_files(tmp_path, [second])
    left = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")
                  if p.is_file())
    assert left == ["accuracy.png", "notes.txt", "records/figures.json", "report.md",
                    "runs.csv"]


def test_a_first_write_into_a_folder_with_other_files_removes_nothing(tmp_path: Path) -> None:
    (tmp_path / "plot.png").write_bytes(b"a user's own figure")
    write_report_files(tmp_path, [SectionOutput(["# report"])])
    assert (tmp_path / "plot.png").is_file()


def test_a_rewrite_keeps_what_another_generator_wrote_into_the_folder(tmp_path: Path) -> None:
    """The detection matrix (tests/verify/detection_matrix.py) writes its CSV and PNG into
    reports/audit-check: regenerating that report must not remove them."""
    write_report_files(tmp_path, [SectionOutput(["# first"])])
    for name in ("detection-matrix.csv", "detection-matrix.png", "detection-matrix.md"):
        (tmp_path / name).write_text("the matrix")
    (tmp_path / "old-figure.png").write_bytes(b"the writer's own, now stale")
    write_report_files(tmp_path, [SectionOutput(["# second"])])
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["detection-matrix.csv", "detection-matrix.md", "detection-matrix.png",
                    "report.md"]
