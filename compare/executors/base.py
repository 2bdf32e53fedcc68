"""What every executor shares: the run it is handed, the protocol it follows, and the progress
bar (runs done / running / left) that the grid runner shows whichever executor runs the grid.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from dpcore.results import RunResult, run_id

if TYPE_CHECKING:
    from compare.cellrun import DatasetCache
    from compare.grid import Grid, GridCell


@dataclass(frozen=True)
class GridJob:
    """The grid-wide inputs of every run: the grid, the results store folder and the data root.

    Everything here is picklable, so a job can be shipped to another process or node; the
    runner makes the paths absolute (a worker's working directory is not the driver's).
    """

    grid: Grid
    out_dir: Path
    data_dir: str | Path | None = None


@dataclass
class RunTracker:
    """Counts and progress bar of one grid: done (run or skipped) / running / left.

    The executor calls :meth:`started` when it hands a run over (in process, or submitted to
    a cluster) and :meth:`finished` with the stored RunResult; ``on_result`` receives every
    finished result (the runner's bookkeeping). With ``show`` false (no terminal, or
    ``--quiet``) no bar is drawn and one ``[i/N] ...`` line per started run goes to ``log``;
    once a run of this invocation has ended, the line adds the wall time so far and the time
    left at that pace (runs already in the store are skipped in no time and do not count).
    ``clock``: seconds, monotonic (injectable for tests). Runs that another process sharing
    the store trained meanwhile go to ``on_elsewhere`` (they count as done), runs still claimed
    by another process when this one stops waiting to ``on_still_claimed``.
    """

    total: int
    desc: str
    show: bool
    log: Callable[[str], None]
    on_result: Callable[[str, RunResult], None]
    running: set[str] = field(default_factory=set)
    done: int = 0
    clock: Callable[[], float] = time.monotonic
    on_elsewhere: Callable[[str, RunResult], None] = lambda _rid, _result: None
    on_still_claimed: Callable[[str], None] = lambda _rid: None
    ended_here: int = 0
    _bar: Any = None
    _first_start: float | None = None

    def __post_init__(self) -> None:
        from tqdm import tqdm

        self._bar = tqdm(total=self.total, desc=self.desc, unit="run", disable=not self.show)

    def skipped(self) -> None:
        """A run already finished in the store: counts as done, nothing is run."""
        self.done += 1
        self._refresh(redraw=False)
        self._bar.update(1)

    def elsewhere(self, rid: str, result: RunResult) -> None:
        """Another process sharing the store ran ``rid`` (its stored ``result``): done here."""
        self.done += 1
        self.on_elsewhere(rid, result)
        self._refresh(redraw=False)
        self._bar.update(1)

    def still_claimed(self, rid: str) -> None:
        """Another process still holds ``rid`` and this one stopped waiting for it."""
        self.on_still_claimed(rid)

    def started(self, cell: GridCell, backend: str) -> None:
        """``(cell, backend)`` is now running (or queued on the cluster for a free slot)."""
        rid = run_id(cell.config.config_hash, backend)
        if self._first_start is None:
            self._first_start = self.clock()
        self.running.add(rid)
        what = f"{backend} {cell.setting} seed {cell.config.seed}"
        if not self.show:
            self.log(f"[{self.done + len(self.running)}/{self.total}] {what} ({rid})"
                     + self._pace())
        self._refresh(what)

    def _pace(self) -> str:
        """``; 6 runs in 14 min, about 2 h 45 min left`` once a run of this invocation ended:
        the mean wall time per ended run times the runs not ended (running ones included)."""
        if not self.ended_here or self._first_start is None:
            return ""
        elapsed = self.clock() - self._first_start
        left = (self.total - self.done) * elapsed / self.ended_here
        runs = "run" if self.ended_here == 1 else "runs"
        return (f"; {self.ended_here} {runs} in {duration_text(elapsed)}, about "
                f"{duration_text(left)} left")

    def finished(self, rid: str, result: RunResult) -> None:
        """The run ``rid`` ended with the stored ``result`` (finished, diverged or failed)."""
        self.running.discard(rid)
        self.done += 1
        self.ended_here += 1
        self.on_result(rid, result)
        self._refresh(redraw=False)
        self._bar.update(1)  # one redraw with the new count and the new postfix

    def close(self) -> None:
        self._bar.close()

    def _refresh(self, current: str | None = None, *, redraw: bool = True) -> None:
        left = self.total - self.done - len(self.running)
        text = f"running {len(self.running)}, left {left}"
        self._bar.set_postfix_str(f"{text}; {current}" if current else text, refresh=redraw)


class Executor(Protocol):
    """Runs the unfinished runs of a grid and reports each stored result to the tracker.

    Guarantees every executor gives: each run is done by :func:`compare.cellrun.run_one` (so a
    run's RunResult does not depend on the executor), its result is in the store at
    ``job.out_dir`` before :meth:`RunTracker.finished` is called, and on KeyboardInterrupt
    the runs still going are stopped, finished results are left untouched, and the interrupt
    is re-raised (the next invocation resumes).
    """

    name: str

    def prepare(self) -> None:
        """Check the executor can run (connect to a cluster, check resources), before anything
        is written. Raises :class:`~dpcore.errors.DpCompareError` with what to do."""

    def run(self, job: GridJob, pending: Sequence[tuple[GridCell, str]],
            tracker: RunTracker, log: Callable[[str], None], datasets: DatasetCache) -> None:
        """Run every ``(cell, backend)`` of ``pending`` and report it to ``tracker``.

        ``datasets`` is the driver's cache of prepared data sets (used by an in-process
        executor; a remote worker prepares its own from ``job.data_dir``).
        """

    def close(self) -> None:
        """Release what :meth:`prepare` acquired (e.g. a local Ray started for this grid)."""


def duration_text(seconds: float) -> str:
    """``45 s``, ``14 min``, ``2 h 45 min`` (rounded down to the unit shown)."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def progress_shown(progress: bool) -> bool:
    """Whether a progress bar is drawn: asked for and stderr is a terminal."""
    return progress and sys.stderr.isatty()
