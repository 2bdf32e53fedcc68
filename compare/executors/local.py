"""The ``local`` executor: the grid's runs one after the other in this process (the default).

It must not import Ray: a user without the ``ray`` extra runs every grid through it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from compare.executors.base import GridJob, RunTracker
from compare.executors.claiming import GridClaims
from dpcore.claims import ClaimPolicy
from dpcore.results import ResultsStore, run_id

if TYPE_CHECKING:
    from compare.cellrun import DatasetCache
    from compare.grid import GridCell


class LocalExecutor:
    """Runs each pending run in process with :func:`compare.cellrun.run_one`, in grid order.

    Each run is claimed first (:class:`~compare.executors.claiming.GridClaims`): runs another
    process holds are left to it, waited for at the end (``claims.wait_s``), and taken over
    if their holder dies. Ctrl-C: ``run_one`` stores an ``interrupted`` record for the run in
    progress and re-raises (its claim is released); the runs already finished are not touched.
    """

    name = "local"

    def __init__(self, claims: ClaimPolicy | None = None) -> None:
        self.claims = claims or ClaimPolicy()

    def prepare(self) -> None:
        """Nothing to check: this process is the executor."""

    def run(self, job: GridJob, pending: Sequence[tuple[GridCell, str]],
            tracker: RunTracker, log: Callable[[str], None], datasets: DatasetCache) -> None:
        from compare import cellrun  # looked up at call time: tests may replace run_one

        store = ResultsStore(job.out_dir)
        with GridClaims(job.out_dir, pending, tracker, log, self.claims).active() as claims:
            while True:
                taken = claims.next()
                if taken is None:
                    if claims.wait():
                        continue
                    break
                cell, backend, claim = taken
                tracker.started(cell, backend)
                # no bars (a log file, or --quiet, whose log is silent): a line per epoch
                result = cellrun.run_one(cell, backend, job.grid, store, datasets,
                                        progress=tracker.show, log=log,
                                        log_epochs=not tracker.show)
                result = claims.finished(claim, result)
                tracker.finished(run_id(cell.config.config_hash, backend), result)

    def close(self) -> None:
        """Nothing to release."""
