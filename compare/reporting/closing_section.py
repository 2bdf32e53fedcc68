"""The report's closing sections: the notes, the runs that did not finish, the files."""

from __future__ import annotations

from compare.reporting.section import ReportData, SectionOutput, section
from compare.reporting.tables import markdown_table


@section("notes")
def notes(data: ReportData) -> SectionOutput:
    """The report's notes (the grid's ``notes:``), as one paragraph."""
    if not data.context.notes:
        return SectionOutput()
    return SectionOutput(["## Notes", "", " ".join(data.context.notes.split()), ""])


@section("unfinished runs")
def unfinished_runs(data: ReportData) -> SectionOutput:
    """The runs that did not finish (failed, interrupted), with their status."""
    failed = data.frame[data.frame["status"] != "finished"]
    if failed.empty:
        return SectionOutput()
    return SectionOutput([
        "## Runs that did not finish", "",
        markdown_table(failed, ["run_id", "setting", "backend", "seed", "status"]), ""])


@section("all runs")
def all_runs(data: ReportData) -> SectionOutput:
    """Where every run's figures are (``runs.csv`` and the other tables)."""
    return SectionOutput(["## All runs", "",
                          "See `runs.csv` (one row per run), `summary.csv` (per setting and "
                          "backend), `history.csv` (per epoch) and `per_class.csv`.", ""])


__all__ = ["all_runs", "notes", "unfinished_runs"]
