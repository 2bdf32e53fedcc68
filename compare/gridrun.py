"""Run a grid identically on both backends, resumably, and report it (``dpcompare compare``,
:func:`compare.api.compare`): the grid loaded (:func:`load_grid`), every run still to do
checked before the first trains, the runs executed (:func:`compare.runner.run_grid`), the
report written, and the results folder returned as a :class:`Store`."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from compare import tidy
from compare.executors import EXECUTORS, make_executor
from compare.folders import check_output_folder
from compare.grid import Grid, expand_grid, load_grid_file, load_preset, preset_names
from compare.grid_dry_run import dry_run_lines
from compare.preflight import check_grid
from compare.report import ReportContext, write_report
from compare.resume import record_sources
from compare.runner import GridOutcome, run_grid
from compare.runplan import plan_runs
from compare.storage_faults import raise_grid_storage_fault
from compare.training import Evaluation
from dpcore.claims import STALE_AFTER_S, ClaimPolicy
from dpcore.data import resolve_data_root
from dpcore.defaults import describe_settings
from dpcore.errors import ConfigError
from dpcore.results import ResultsStore, run_id

Log = Callable[[str], None]


class Store(ResultsStore):
    """A results folder (:class:`~dpcore.results.ResultsStore`) with its tidy tables.

    Attributes:
        grid: the grid :func:`compare` ran (None for a folder opened with ``Store(path)``).
        outcome: what the call did: run ids ``ran``, ``skipped`` (already finished),
            ``failed``, ``diverged``, and ``wall_seconds`` (None when opened from a path).
    """

    def __init__(self, root: str | Path, grid: Grid | None = None,
                 outcome: GridOutcome | None = None) -> None:
        super().__init__(root)
        self.grid = grid
        self.outcome = outcome

    def results(self) -> pd.DataFrame:
        """:func:`compare.tidy.results` of this folder."""
        return tidy.results(self.root)

    def history(self) -> pd.DataFrame:
        """:func:`compare.tidy.history` of this folder."""
        return tidy.history(self.root)

    def faithfulness(self) -> pd.DataFrame:
        """:func:`compare.tidy.faithfulness` of this folder."""
        return tidy.faithfulness(self.root)

    def __repr__(self) -> str:
        return f"Store({str(self.root)!r})"


def load_grid(
    preset_or_grid: str | Path | Mapping[str, Any], *, backends: Sequence[str] | None = None,
    seeds: int | None = None, overrides: Sequence[str] = (), engine: str | None = None,
) -> Grid:
    """Expand a preset name, a grid file (or single run config file) or a grid mapping.

    Raises:
        ConfigError: an unknown preset (the valid names are listed), a bad grid or override.
    """
    if isinstance(preset_or_grid, Mapping):
        raw = dict(preset_or_grid)
    elif not isinstance(preset_or_grid, str | Path):
        raise ConfigError(f"a grid of type {type(preset_or_grid).__name__} is not valid; valid: "
                          "a preset name, a grid file path, or a grid mapping")
    elif isinstance(preset_or_grid, str) and preset_or_grid in preset_names():
        raw = load_preset(preset_or_grid)
    elif isinstance(preset_or_grid, Path) or Path(preset_or_grid).suffix in (
            ".yaml", ".yml", ".json") or Path(preset_or_grid).is_file():
        raw = load_grid_file(preset_or_grid)
    else:
        raw = load_preset(preset_or_grid)  # an unknown name: the message lists the valid ones
    if backends is not None:
        if isinstance(backends, str):
            backends = [b.strip() for b in backends.split(",") if b.strip()]
        if not backends:
            raise ConfigError(f"backends={backends!r} is empty; valid: tf, torch, or both")
    grid = expand_grid(raw, seeds=seeds, backends=backends, overrides=overrides)
    if engine is not None:  # performance only: the runs (and their hashes) are the same
        grid = dataclasses.replace(grid, perf=dataclasses.replace(grid.perf, engine=engine))
    return grid


def compare(
    preset_or_grid: str | Path | Mapping[str, Any], *, out: str | Path | None = None,
    backends: Sequence[str] | None = None, seeds: int | None = None,
    executor: str = "local", overrides: Sequence[str] = (), engine: str | None = None,
    data_dir: str | Path | None = None, report: str | Path | bool = False,
    progress: bool = True, command: str | None = None, ray_address: str | None = None,
    cpus_per_run: float | None = None, gpus_per_run: float | None = None,
    max_concurrent: int | None = None, train: bool = True,
    claim_wait: float | None = None, claim_stale_after: float | None = None,
    dry_run: bool = False, resume_from_records: bool | str | Path = False,
) -> Store:
    """Run a grid identically on both backends, resumably (``dpcompare compare``).

    Every run not finished in ``out`` (same config hash and backend) is trained; interrupted
    ones are redone. Committed records count as finished only with ``resume_from_records``
    (:mod:`compare.resume`): then a run whose final record is committed in ``reports/*/records``
    (or the folder named) is skipped and reported from that record, so a grid longer than a
    working session continues on another machine. Without it, the runs that also have a
    committed record are compared with it at the end, in one logged line
    (:mod:`compare.reproduction`: "30 of 30 runs reproduce the committed records:
    identical"). A run that fails is recorded with status ``failed`` and the grid goes on:
    check ``store.outcome.failed`` or the ``status`` column of :func:`compare.tidy.results`.

    Args:
        preset_or_grid: a bundled preset name (``smoke``, ``demo``...), the path of a grid
            file (or of a single run config), or a grid mapping (base + axes).
        out: the results folder (default ``runs/<grid name>``, as the CLI).
        backends: which backends to run (default the grid's); a list or ``"tf,torch"``.
        seeds: seeds per cell (default the grid's).
        executor: where runs execute: ``local`` (one at a time in this process, the default)
            or ``ray`` (one Ray task per unfinished run; needs the ``ray`` extra). On a
            multi-node cluster ``out`` (and the data) must be on storage every node mounts at
            the same path: Ray does not sync files between nodes.
        overrides: ``section.key=value`` settings applied to every cell.
        engine: the DP step engine of both backends, ``fast`` or ``reference`` (performance
            only; default: the grid's, else fast where the model supports it).
        data_dir: the data root (default ``$DPCOMPARE_DATA_DIR``, else ``~/.dpcompare/data``).
        report: False writes no report; True writes it to ``reports/<grid name>``; a path
            writes it there (``report.md``, CSV tables, PNG plots, and ``records/``: the
            compact run records and montage arrays the folder can be rebuilt from with
            :func:`compare.api.rebuild_report`).
        progress: print one line per run and a summary (False: silent).
        command: the command the report header names (default this call, spelled out).
        ray_address: with ``executor="ray"``: the cluster to join (``HOST:PORT``,
            ``ray://HOST:PORT`` or ``auto``); default: start a local Ray for this grid.
        cpus_per_run: with ``ray``: CPU cores reserved per run (default 1).
        gpus_per_run: with ``ray``: GPUs reserved per run (default 0).
        max_concurrent: with ``ray``: most runs in flight at once (default: what fits).
        train: False trains nothing: the report (and montages) of the runs stored so far, an
            interim report of a long grid whose header says how many runs are missing
            (``store.outcome.not_trained`` lists them).
        claim_wait: seconds to wait at the end for runs other processes sharing ``out``
            hold (default: until they end); those left are in ``store.outcome.still_claimed``.
        claim_stale_after: seconds without a heartbeat after which another process's claim
            on a run is dead and taken over (default 600; see :mod:`dpcore.claims`).
        dry_run: check everything (grid, every run still to do as ``train`` checks it, the
            executor options, folders), log the plan (one line per run still to do, its
            settings with the defaults marked; where every run comes from; the estimated
            training time, :mod:`compare.grid_dry_run`), and train, start and write nothing
            (``store.outcome`` is None).
        resume_from_records: False (default) trains every run not finished in ``out``; True
            counts the final records committed in ``reports/*/records`` as finished runs; a
            folder (of report folders, or one report folder) counts those instead.

    Returns:
        The results folder as a :class:`Store` (``.results()``, ``.outcome``...).

    Raises:
        ConfigError: a bad grid, preset, executor (or executor option), backend or override;
            a report folder that cannot be written; Ray not installed, an unreachable
            ``ray_address`` or resources no node has (all checked before any training).
        DataError: the data root does not exist.
        StorageError: the storage refused a write while the grid ran or its report was
            written (no space, a read-only folder): the message names the folder and the bytes
            needed, how many runs are finished and kept in ``out``, where a run trained when
            the fault struck was kept, and how to write the report elsewhere
            (:mod:`compare.storage_faults`).
    """
    if executor not in EXECUTORS:
        raise ConfigError(f"executor={executor!r} is not valid; valid: {', '.join(EXECUTORS)}")
    stale = STALE_AFTER_S if claim_stale_after is None else claim_stale_after
    claims = ClaimPolicy(stale_after_s=stale, heartbeat_s=min(30.0, stale / 4),
                         wait_s=claim_wait)
    runner = make_executor(executor, ray_address=ray_address, cpus_per_run=cpus_per_run,
                           gpus_per_run=gpus_per_run, max_concurrent=max_concurrent,
                           claims=claims)
    grid = load_grid(preset_or_grid, backends=backends, seeds=seeds, overrides=overrides,
                     engine=engine)
    out = Path(out) if out is not None else Path("runs") / grid.name
    # Inputs shared by every run are checked before any training (nothing written).
    resolve_data_root(data_dir)
    report_dir = None
    if report is not False:
        report_dir = Path("reports") / grid.name if report is True else Path(report)
        check_output_folder(report_dir, "report")
    log: Log = print if progress else (lambda _msg: None)
    # Committed records count as finished only when asked (compare/resume.py); those of the
    # grid's runs are read before anything is written, to compare the fresh runs with.
    sources = record_sources(resume_from_records, grid, report_dir, dry_run=dry_run,
                             train=train, log=log)
    records_from = sources.records_from
    plan = None  # what is done and what is left: listed once, here or by run_grid
    if train or dry_run:  # every run still to do is checked before the first one trains
        plan = plan_runs(grid, out, records_from)
        pending = plan.pending
        check_grid(pending, data_dir)
        if dry_run:
            check_output_folder(out, "out")
            for line in dry_run_lines(grid, plan, out, sources, data_dir, lambda cell:
                                      describe_settings(cell.config, cell.defaults)):
                log(line)
            return Store(out, grid=grid, outcome=None)
    if command is None:
        source = (f"<grid {grid.name}>" if isinstance(preset_or_grid, Mapping)
                  else repr(str(preset_or_grid)))
        command = f"compare.api.compare({source}, out={str(out)!r})"
    started = time.perf_counter()
    try:
        outcome = run_grid(grid, out, data_dir=data_dir, progress=progress, log=log,
                           executor=runner, train=train, records_from=records_from,
                           plan=plan)
    except OSError as exc:  # a storage fault names what is kept and what to do
        raise_grid_storage_fault(exc, grid, out)
        raise
    log(outcome_line(grid.name, out, outcome))
    if report_dir is not None:
        context = report_context(grid, command, time.perf_counter() - started)
        try:
            written = write_report(out, report_dir, context, records=outcome.records,
                                   record_folders=records_from)
        except OSError as exc:
            raise_grid_storage_fault(exc, grid, out, report_dir=report_dir)
            raise
        log(f"report: {written}")
    closing = sources.closing_line(out, grid)
    if closing:
        log(closing)
    return Store(out, grid=grid, outcome=outcome)


def outcome_line(grid_name: str, out: Path, outcome: GridOutcome) -> str:
    """The one summary line of a grid run: how many runs ran, were skipped, failed, diverged,
    were left untrained, done or still held by another process, and where the results are."""
    untrained = (f", {len(outcome.not_trained)} not stored and not trained (train=False)"
                 if outcome.not_trained else "")
    if outcome.elsewhere:
        untrained += f", {len(outcome.elsewhere)} done by another process sharing {out}"
    if outcome.still_claimed:
        untrained += (f", {len(outcome.still_claimed)} still running in another process "
                      "(not in this report)")
    return (f"{grid_name}: {len(outcome.ran)} run(s) done, {len(outcome.skipped)} already "
            f"finished, {len(outcome.failed)} failed, {len(outcome.diverged)} diverged"
            f"{untrained}; results in {out}")


def report_context(grid: Grid, command: str, wall_seconds: float) -> ReportContext:
    """What the report of ``grid`` states beside its runs: the command, the wall time (s),
    the grid's title, notes and published figures, its runs and their labels, its montages,
    its audit companions and whether it asks for faithfulness."""
    runs = grid.runs()
    return ReportContext(
        command=command, wall_seconds=wall_seconds,
        title=f"{grid.name}: TF Privacy vs Opacus", description=grid.description,
        notes=grid.notes, published=grid.published,
        run_ids=frozenset(run_id(cell.config.config_hash, backend) for cell, backend in runs),
        axis_order=grid.axis_names,
        labels={run_id(cell.config.config_hash, backend): dict(cell.labels)
                for cell, backend in runs},
        montage_grid=grid.name,
        audit_companions=grid.companion_runs() or None,
        faithfulness=Evaluation.of_grid(grid.evaluation).asks_faithfulness,
        selection=grid.selection,
    )


__all__ = ["Store", "compare", "load_grid", "outcome_line", "report_context"]
