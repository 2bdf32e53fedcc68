"""The one writer of a report folder: the sections' markdown, CSV tables and PNG figures
(:func:`write_report_files`), and the booktabs LaTeX tables on request (:func:`write_latex`).
Sections never write; everything a report folder holds passes through here (the records:
:func:`compare.records.write_records`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from compare.reporting.foreign import is_foreign
from compare.reporting.section import SectionOutput
from dpcore.io import atomic_path
from dpcore.results import atomic_write_bytes

#: The report's markdown file in its folder.
REPORT_FILE = "report.md"


def write_report_files(out: str | Path, outputs: Sequence[SectionOutput]) -> Path:
    """Write ``outputs`` into the folder ``out`` (created): every table as CSV (no index),
    every figure as PNG (its ``write``; subfolders created), then ``report.md`` (the lines of
    all outputs, in order, one per line, UTF-8), each file atomically (:mod:`dpcore.io`: a
    write cut short leaves the earlier file). Returns the path of ``report.md``.

    Rewriting a report folder removes the tables and figures of the earlier report that this
    one no longer has (:data:`OWNED_FILES`: e.g. the faithfulness figures of a section now
    left out), so no stale figure stays beside the report; other files are kept."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    earlier = _owned_files(folder) if (folder / REPORT_FILE).is_file() else set()
    written: set[Path] = set()
    for output in outputs:
        for name, table in output.tables.items():
            with atomic_path(folder / name) as tmp:
                table.to_csv(tmp, index=False)
            written.add(folder / name)
    for output in outputs:
        for figure in output.figures:
            path = folder / figure.name
            path.parent.mkdir(parents=True, exist_ok=True)
            figure.write(path)
            written.add(path)
    lines = [line for output in outputs for line in output.lines]
    report_path = folder / REPORT_FILE
    atomic_write_bytes(report_path, ("\n".join(lines) + "\n").encode("utf-8"))
    for stale in sorted(earlier - written):
        stale.unlink()
    return report_path


#: The files of a report folder its writer owns (glob patterns relative to the folder): the
#: tables and figures a rewrite replaces or, when the new report has no such file, removes.
OWNED_FILES: tuple[str, ...] = ("*.csv", "*.png", "montages/*.png")


def _owned_files(folder: Path) -> set[Path]:
    return {path for pattern in OWNED_FILES for path in folder.glob(pattern)
            if path.is_file() and not is_foreign(path.relative_to(folder).as_posix())}


def write_latex(out: str | Path) -> list[Path]:
    """The booktabs ``.tex`` tables of the report in ``out``, from its CSV tables
    (:func:`compare.latex.write_latex_tables`); returns the paths written.

    Raises:
        DataError: the report has no ``summary.csv`` (no finished runs).
    """
    from compare.latex import write_latex_tables

    return write_latex_tables(out)


__all__ = ["OWNED_FILES", "REPORT_FILE", "write_latex", "write_report_files"]
