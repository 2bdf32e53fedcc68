"""What a grid says when the storage refuses a write (no space, a quota, a read-only folder).

The fault itself is named by :mod:`dpcore.storage` (the folder, the file, the bytes needed, and
for a run written when it struck, where that trained run was kept). A grid adds what the user
still has: how many of its runs are finished and kept in the store (each run is stored when it
ends, so a fault loses none of them), and how to get their report written to another folder
(``dpcompare report OUT --out OTHER``, which reads the store and writes nothing into it).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from dpcore.errors import StorageError
from dpcore.results import ResultsStore
from dpcore.storage import is_write_fault, storage_error

if TYPE_CHECKING:
    from compare.grid import Grid

__all__ = ["raise_grid_storage_fault"]


def finished_runs(grid: Grid, out: str | Path) -> int:
    """How many runs of ``grid`` have a final record in the store ``out``."""
    store = ResultsStore(out)
    return sum(store.is_finished(cell.config.config_hash, backend)
               for cell, backend in grid.runs())


def raise_grid_storage_fault(exc: OSError, grid: Grid, out: str | Path, *,
                             report_dir: str | Path | None = None) -> None:
    """Raise the grid's :class:`StorageError` for ``exc`` if it is a storage fault (met while
    the grid trained, or while its report was written to ``report_dir``); return otherwise
    (the caller re-raises ``exc`` as it is)."""
    if not is_write_fault(exc):
        return
    fault = storage_error(exc)
    done, total = finished_runs(grid, out), len(grid.runs())
    kept = (f"{done} of the grid's {total} runs are finished and kept in {out} (nothing "
            "half-written)")
    if report_dir is not None:
        todo = (f"write their report to another folder with `dpcompare report {out} --out "
                "OTHER_FOLDER`, or free room and run the command again")
    else:
        todo = (f"free room and run the same command again to train the rest, or write the "
                f"report of the finished runs to another folder with `dpcompare report {out} "
                "--out OTHER_FOLDER`")
    raise StorageError(f"{fault}; {kept}; {todo}", errno=exc.errno,
                       folder=getattr(fault, "folder", None),
                       needed=getattr(fault, "needed", None)) from exc
