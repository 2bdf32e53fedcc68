"""The ``local`` executor: the grid's runs one after the other in this process (the default).

It must not import Ray: a user without the ``ray`` extra runs every grid through it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from compare.executors.base import GridJob, RunTracker
from dpcore.results import ResultsStore, run_id

if TYPE_CHECKING:
    from compare.cellrun import DatasetCache
    from compare.grid import GridCell


class LocalExecutor:
    """Runs each pending run in process with :func:`compare.cellrun.run_one`, in grid order.

    Ctrl-C: ``run_one`` stores an ``interrupted`` record for the run in progress and
    re-raises; the runs already finished are not touched.
    """

    name = "local"

    def prepare(self) -> None:
        """Nothing to check: this process is the executor."""

    def run(self, job: GridJob, pending: Sequence[tuple[GridCell, str]],
            tracker: RunTracker, log: Callable[[str], None], datasets: DatasetCache) -> None:
        from compare import cellrun  # looked up at call time: tests may replace run_one

        store = ResultsStore(job.out_dir)
        for cell, backend in pending:
            tracker.started(cell, backend)
            # no bars (a log file, or --quiet, whose log is silent): a line per epoch instead
            result = cellrun.run_one(cell, backend, job.grid, store, datasets,
                                    progress=tracker.show, log=log,
                                    log_epochs=not tracker.show)
            tracker.finished(run_id(cell.config.config_hash, backend), result)

    def close(self) -> None:
        """Nothing to release."""
