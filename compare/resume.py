"""Which committed run records a grid may take its runs from instead of training them.

By default none: ``dpcompare compare`` trains every run that is not finished in its own
``--out`` store, so a fresh clone trains the grid and its numbers are its own. With
``--resume-from-records`` (``compare.api.compare(..., resume_from_records=True)``) the final
records committed in the repository's report folders (``reports/*/records``,
:func:`compare.records.committed_records`) count as finished too: a grid longer than one
working session continues on another machine, without the store that trained the first part,
and its report shows those records.

The folders read are those of one *records root*: ``reports`` (relative to the working
folder, the repository's committed reports) or a folder given instead. A ``--report`` folder
elsewhere (a report rebuilt into a scratch folder) is never read unless it is the root or in
it, so its records cannot make other grids skip their runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from compare.reproduction import committed_comparison, read_committed, summary_line
from dpcore.errors import ConfigError
from dpcore.results import run_id

if TYPE_CHECKING:
    from compare.grid import Grid
    from dpcore.results import RunResult

__all__ = ["COMMITTED_REPORTS", "RecordSources", "committed_folders", "grid_committed_records",
           "record_sources", "resume_folders", "store_comparison_line"]

#: The folder of the repository's committed report folders, relative to the working folder.
COMMITTED_REPORTS = Path("reports")

#: What ``resume_from_records`` may be: False (train), True (the committed reports) or a
#: folder (of report folders, or one report folder).
ResumeFrom = bool | str | Path | None


def committed_folders(root: str | Path = COMMITTED_REPORTS, first: str | Path | None = None
                      ) -> list[Path]:
    """The report folders of ``root`` (every sub-folder, by name), the grid's own report
    (``root``'s folder named as ``first``) first, even when it does not exist, so that no other
    report is taken for the grid's own: the order :func:`compare.records.committed_records`
    prefers a run's record in. A ``root`` that is itself a report folder (it holds
    ``records/``) is the only folder. Empty when ``root`` is no folder."""
    from compare.records import has_records

    root = Path(root)
    if has_records(root):
        return [root]
    if not root.is_dir():
        return []
    folders = sorted(p for p in root.iterdir() if p.is_dir())
    if first is not None:  # first even when absent: the first folder is the grid's own report,
        # whose records must read; every later one is another report's (a damaged file there
        # is skipped with a warning, :func:`compare.records.committed_records`)
        own = root / Path(first).name  # its folder of ``root`` (only ``root``'s reports count)
        folders = [own] + [p for p in folders if p.resolve() != own.resolve()]
    return folders


def resume_folders(resume_from_records: ResumeFrom, grid_name: str,
                   report_dir: str | Path | None = None) -> list[Path]:
    """The report folders whose committed final records count as finished runs of the grid
    ``grid_name``: none when ``resume_from_records`` is False or None; the folders of
    :data:`COMMITTED_REPORTS` when it is True; those of the folder it names otherwise (a folder
    of report folders, or one report folder). The grid's own report folder (``report_dir``,
    else ``ROOT/<grid name>``) comes first when it is among them.

    Raises:
        ConfigError: the folder does not exist (nothing is written).
    """
    if resume_from_records is None or resume_from_records is False:
        return []
    root = COMMITTED_REPORTS if resume_from_records is True else Path(resume_from_records)
    if not root.is_dir():
        where = ("run from the repository's root, where the committed reports are, or name "
                 "the folder" if resume_from_records is True else "a folder of report folders "
                 "(e.g. reports) or one report folder")
        raise ConfigError(f"--resume-from-records: {root} is not a folder; valid: {where}")
    own = Path(report_dir) if report_dir is not None else root / grid_name
    return committed_folders(root, first=own)


@dataclass(frozen=True)
class RecordSources:
    """What a ``compare`` call takes from committed records, decided once before it trains.

    Attributes:
        records_from: the report folders whose final records count as finished runs (empty
            unless ``resume_from_records``).
        resumed: whether ``resume_from_records`` was asked.
        committed: run id -> the committed record of each run of the grid found in the
            repository's reports (read before anything is written; empty when resuming and
            training): what the runs trained here are compared with at the end, and what the
            dry run's hint and estimate use.
    """

    records_from: list[Path]
    resumed: bool
    committed: dict[str, RunResult] = field(default_factory=dict)

    def closing_line(self, out: str | Path, grid: Grid) -> str | None:
        """The line a grid ends with: its stored runs that also have a committed record,
        compared with it (:func:`store_comparison_line`); None when
        resuming or when no run of the store is committed."""
        if self.resumed or not self.committed:
            return None
        return store_comparison_line(out, grid, self.committed)


def record_sources(resume_from_records: ResumeFrom, grid: Grid,
                   report_dir: str | Path | None, *, dry_run: bool, train: bool,
                   log: Callable[[str], None]) -> RecordSources:
    """The :class:`RecordSources` of a ``compare`` call (see :func:`resume_folders`).

    Raises:
        ConfigError: ``resume_from_records`` names no folder.
    """
    folders = resume_folders(resume_from_records, grid.name, report_dir)
    resumed = bool(folders) or resume_from_records not in (False, None)
    wanted = dry_run or (train and not resumed)
    return RecordSources(folders, resumed, grid_committed_records(grid, log) if wanted else {})


def grid_committed_records(grid: Grid, log: Callable[[str], None] = print,
                           root: str | Path | None = None) -> dict[str, RunResult]:
    """Run id -> the committed final record of each run of ``grid`` found in the report
    folders of ``root`` (default :data:`COMMITTED_REPORTS`, the repository's ``reports``); a
    folder whose records do not read is named in a logged note and skipped."""
    wanted = {run_id(cell.config.config_hash, backend) for cell, backend in grid.runs()}
    known, warnings = read_committed(committed_folders(root or COMMITTED_REPORTS))
    for warning in warnings:
        log(f"note: {warning}")
    return {rid: record for rid, record in known.items() if rid in wanted}


def store_comparison_line(out: str | Path, grid: Grid,
                          committed: Mapping[str, RunResult]) -> str | None:
    """The one line a grid ends with when runs of its store ``out`` also have committed
    records (:func:`compare.reproduction.summary_line`), or None when none has."""
    from dpcore.provenance import current_sources
    from dpcore.results import ResultsStore

    store = ResultsStore(out)
    fresh = []
    for cell, backend in grid.runs():
        if run_id(cell.config.config_hash, backend) in committed:
            result = store.load(cell.config.config_hash, backend)
            if result is not None:
                fresh.append(result)
    comparisons = committed_comparison(fresh, committed, current_sources())
    if not comparisons:
        return None
    return (f"{grid.name}: {summary_line(comparisons)} ({COMMITTED_REPORTS.as_posix()}/*/records"
            f"; `dpcompare reproduce` tables every figure)")
