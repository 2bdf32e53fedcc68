"""What ``dpcompare compare --dry-run`` prints: each run still to do, where every run of the
grid will come from, and what the runs to train would cost here.

* one ``would run ...`` line per run to train (its settings, the defaults marked, and why a
  stored or committed record is redone);
* where the grid's runs come from: trained here into ``--out``, finished in that store, or
  taken from committed records (only with ``--resume-from-records``); without it, how many of
  the runs to train are committed in ``reports/*/records`` (what ``--resume-from-records``
  would take from there);
* the estimated training time of the runs to train, from the step times of the bench's
  committed results (``reports/benchmarks/results.json``, :mod:`benchmarks.grid_cost`; each
  run priced on its real training-set size and input shape); a model the bench times no case
  of is priced by its committed record's measured training time where one exists (same run
  id), else named as not estimated. Training only: evaluation (faithfulness, the audit), data
  loading and start-up are not included;
* the evaluation time of the runs to train whose committed record measured it
  (``timing.evaluation_seconds``), on a line of its own (none when no record has it);
* the closing line ``dry run: NAME: N run(s), P to train into OUT; all checked; nothing
  trained or written``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from compare.bench import load_grid_cost
from compare.grid import Grid, GridCell
from compare.resume import RecordSources
from compare.runplan import RunPlan
from dpcore.config import RunConfig
from dpcore.results import RunResult, run_id

__all__ = ["BENCH_RESULTS", "bench_results", "dry_run_lines", "estimate_lines",
           "source_line"]

#: The bench's committed results (``dpcompare bench``), relative to the working folder or to
#: the repository holding the packages.
BENCH_RESULTS = Path("reports") / "benchmarks" / "results.json"


def bench_results() -> tuple[dict[str, Any] | None, Path | None]:
    """The bench's committed results and their file: ``reports/benchmarks/results.json`` of
    the working folder, else of the repository holding the packages; (None, None) when
    neither exists or reads."""
    from dpcore.provenance import repository_root

    for path in (BENCH_RESULTS, repository_root() / BENCH_RESULTS):
        try:
            return json.loads(path.read_text(encoding="utf-8")), path
        except (OSError, ValueError):
            continue
    return None, None


def _duration(seconds: float) -> str:
    costs = load_grid_cost()
    return str(costs.duration(seconds / costs.SECONDS_PER_HOUR))


def estimate_lines(grid: Grid, pending: Sequence[tuple[GridCell, str]],
                   shape_of: Callable[[RunConfig], tuple[int, Sequence[int]] | None],
                   committed: Mapping[str, RunResult],
                   results: Mapping[str, Any] | None, source: Path | None) -> list[str]:
    """The estimate of the runs to train (see the module docstring), one or two lines."""
    run_cost = load_grid_cost().run_cost
    if not pending:
        return []
    if results is None:
        return [f"estimated time: not estimated: no bench results here ({BENCH_RESULTS} not "
                "found; `dpcompare bench` writes them)"]
    shapes = {c.config.config_hash: shape_of(c.config) for c, _b in pending}
    costs = [run_cost(results, cell.config, backend, grid.perf, shapes[cell.config.config_hash])
             for cell, backend in pending]
    by_backend: dict[str, float] = {}
    from_records = 0
    missing: dict[str, int] = {}
    for (cell, backend), cost in zip(pending, costs, strict=True):
        seconds = cost.seconds
        if seconds is None:
            record = committed.get(run_id(cell.config.config_hash, backend))
            recorded = (record.timing or {}).get("train_seconds") if record else None
            if recorded is not None:
                seconds, from_records = float(recorded), from_records + 1
            else:
                why = cost.why or "not measured"
                missing[why] = missing.get(why, 0) + 1
                continue
        by_backend[backend] = by_backend.get(backend, 0.0) + seconds
    machine = results.get("machine") or {}
    scaled = sorted({f"{c.model} x{c.scale:.2g}" for c in costs
                     if c.seconds is not None and abs(c.scale - 1.0) > 1e-9})
    estimated = len(pending) - sum(missing.values())
    total = sum(by_backend.values())
    text = (f"estimated training time of the {estimated} of {len(pending)} run(s) to train "
            f"that could be estimated" if missing else
            f"estimated training time of the {len(pending)} run(s) to train")
    text += (f": {_duration(total)} ("
             + ", ".join(f"{b} {_duration(s)}" for b, s in by_backend.items()) + "), one run "
             f"after another, from the step times of {source.as_posix() if source else 'the bench'}"
             f" (machine with {machine.get('cpu_count', '?')} CPUs, torch threads "
             f"{machine.get('torch_threads', '?')})")
    if scaled:
        text += f"; time per example scaled by input size from the bench case ({', '.join(scaled)})"
    if from_records:
        text += (f"; {from_records} run(s) of models the bench does not time priced by the "
                 "training time of their committed record")
    text += ("; training only: evaluation (faithfulness, audit), data loading and start-up "
             "not included")
    lines = [text]
    lines += [f"  not estimated: {n} run(s): {why}" for why, n in missing.items()]
    return lines + evaluation_lines(pending, committed)


def evaluation_lines(pending: Sequence[tuple[GridCell, str]],
                     committed: Mapping[str, RunResult]) -> list[str]:
    """The evaluation time (faithfulness, audits) of the runs to train whose committed record
    measured it (``timing.evaluation_seconds``), one line; none when no record has it."""
    seconds = [float(record.timing["evaluation_seconds"]) for cell, backend in pending
               if (record := committed.get(run_id(cell.config.config_hash, backend)))
               is not None and (record.timing or {}).get("evaluation_seconds") is not None]
    if not seconds:
        return []
    return [f"estimated evaluation time after training (faithfulness, audits) of the "
            f"{len(seconds)} of {len(pending)} run(s) to train whose committed record measured "
            f"it: {_duration(sum(seconds))}, from those records"]


def source_line(grid: Grid, plan: RunPlan, out: Path, resumed: bool,
                committed: Mapping[str, RunResult]) -> str:
    """Where the grid's runs come from (see the module docstring)."""
    from compare.resume import COMMITTED_REPORTS

    parts = [f"{len(plan.pending)} trained here into {out}",
             f"{len(plan.stored)} finished in the store {out}"]
    if resumed:
        parts.append(f"{len(plan.committed)} from committed records (--resume-from-records)")
    text = f"from where: {len(grid.runs())} run(s): " + "; ".join(parts)
    if not resumed:
        available = sum(run_id(c.config.config_hash, b) in committed for c, b in plan.pending)
        if available:
            text += (f" ({available} of the runs to train are committed in "
                     f"{COMMITTED_REPORTS.as_posix()}/*/records: --resume-from-records would "
                     "take them from there instead)")
    return text


def dry_run_lines(grid: Grid, plan: RunPlan, out: Path, sources: RecordSources,
                  data_dir: str | Path | None, describe: Callable[[GridCell], str]
                  ) -> list[str]:
    """Every line of a grid's dry run (see the module docstring). ``sources``: what the call
    takes from committed records (:func:`compare.resume.record_sources`; its ``committed``
    records of the repository's reports serve the hint and the estimate); ``describe(cell)``:
    a run's settings as the start line gives them."""
    resumed, committed = sources.resumed, sources.committed
    lines = []
    for cell, backend in plan.pending:
        rid = run_id(cell.config.config_hash, backend)
        why = f" [redone: {plan.redo[rid]}]" if rid in plan.redo else ""
        lines.append(f"would run {backend} {cell.setting} seed {cell.config.seed} ({rid}): "
                     f"{describe(cell)}{why}")
    lines.append(source_line(grid, plan, out, resumed, committed))
    results, source = bench_results()
    lines += estimate_lines(grid, plan.pending, _shape_loader(data_dir), committed, results,
                            source)
    lines.append(f"dry run: {grid.name}: {len(grid.runs())} run(s), {len(plan.pending)} to "
                 f"train into {out}; all checked; nothing trained or written")
    return lines


def _shape_loader(data_dir: str | Path | None
                  ) -> Callable[[RunConfig], tuple[int, Sequence[int]] | None]:
    """(training-set size, input shape) of a config's data, loaded once per data spec (from
    the decoded-data cache the grid's check has just filled); None when it does not load."""
    from compare.preflight import _data_only
    from dpcore.errors import DpCompareError
    from dpcore.pipeline import prepare_dataset

    seen: dict[str, tuple[int, Sequence[int]] | None] = {}

    def shape_of(config: RunConfig) -> tuple[int, Sequence[int]] | None:
        loadable = _data_only(config)
        key = repr(loadable.data)
        if key not in seen:
            try:
                data = prepare_dataset(loadable, data_dir)
                seen[key] = (len(data.x_train), tuple(data.input_shape))
            except DpCompareError:
                seen[key] = None
        return seen[key]
    return shape_of
