"""One run of a grid, end to end, as every executor does it: the data set prepared once per
data spec (:class:`DatasetCache`), then :func:`compare.training.train_and_record`; an error is
recorded as a ``failed`` run so the grid goes on (:func:`run_one`).

Below both the grid runner (:mod:`compare.runner`) and the executors (:mod:`compare.executors`),
so that neither imports the other.
"""

from __future__ import annotations

import math
import traceback
from collections.abc import Callable
from typing import Any

from compare.grid import Grid, GridCell
from compare.training import (
    Evaluation,
    epoch_line_logger,
    incomplete_record,
    store_interrupted,
    train_and_record,
)
from dpcore.config import RunConfig
from dpcore.data.dataset import Dataset
from dpcore.defaults import describe_settings
from dpcore.errors import DpCompareError, StorageError
from dpcore.pipeline import DatasetCache
from dpcore.results import ResultsStore, RunResult, utc_now
from dpcore.storage import is_storage_fault

__all__ = ["DatasetCache", "failed_cell_record", "run_one"]


def run_one(
    cell: GridCell, backend: str, grid: Grid, store: ResultsStore, datasets: DatasetCache,
    *, progress: bool = True, log: Callable[[str], None] = print, log_epochs: bool = False,
) -> RunResult:
    """Train, evaluate and store one (cell, backend); returns the stored RunResult.

    The data set comes from ``datasets`` (prepared once per data spec); the rest is
    :func:`compare.training.train_and_record`, the record path ``dpcompare train`` uses too.
    An error is recorded as a ``failed`` run (the grid goes on); Ctrl-C stores an
    ``interrupted`` record and is re-raised. ``log_epochs``: send one line per epoch to
    ``log`` (:func:`compare.training.epoch_line_logger`; for a grid that draws no bars,
    e.g. logging to a file). A storage fault (:class:`~dpcore.errors.StorageError`: no space,
    a read-only folder) is not recorded as a failed run (that record would be refused too): it
    is raised, and stops the grid.
    """
    config = cell.config
    started = utc_now()
    dataset: Dataset | None = None
    try:
        try:
            dataset = datasets.get(config)
        except KeyboardInterrupt:
            store_interrupted(store, config, backend, None, started, labels=cell.labels,
                              grid_name=grid.name)
            raise
        callbacks: list[Callable[[dict[str, Any]], None]] = []
        log(f"    {backend} {cell.setting} seed {config.seed}: "
            f"{describe_settings(config, cell.defaults)}")
        if log_epochs:
            epochs = config.train.epochs
            callbacks.append(epoch_line_logger(None if epochs is None else math.ceil(epochs),
                                               log, indent="    "))
        result, _path = train_and_record(
            config, dataset, backend, store, perf=grid.perf,
            evaluation=Evaluation.of_grid(grid.evaluation), progress=progress,
            callbacks=callbacks, labels=cell.labels, grid_name=grid.name,
            defaults=cell.defaults,
        )
        return result
    except (KeyboardInterrupt, SystemExit, StorageError):
        raise  # a storage fault stops the grid: every later run would be refused too
    except DpCompareError as exc:
        log(f"  {backend} {cell.setting}: error: {exc}")
        error = str(exc)
    except Exception as exc:  # a bug in one run must not lose the rest of the grid
        if is_storage_fault(exc):
            raise
        log(f"  {backend} {cell.setting}: failed: {type(exc).__name__}: {exc}")
        error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    failed = incomplete_record(config, backend, dataset, status="failed", error=error,
                               started=started, labels=cell.labels, grid_name=grid.name)
    store.save(failed)
    return failed


def failed_cell_record(config: RunConfig, backend: str, grid: Grid, cell: GridCell,
                   dataset: Dataset | None, error: str, started: str,
                   status: str = "failed") -> RunResult:
    """:func:`compare.training.incomplete_record` of a grid cell (the former signature, kept
    for the executors that record a run they could not start)."""
    return incomplete_record(config, backend, dataset, status=status, error=error,
                             started=started, labels=cell.labels, grid_name=grid.name)
