"""``dpcompare reproduce REPORT``: retrain a committed report's runs and compare every figure.

The runs are rebuilt from the configs in the report's records (``REPORT/records``,
:func:`compare.records.read_records`): each selected run is trained again into a scratch
store (``--out``, default ``runs/reproduce/<report name>``) with its record's performance
settings (engine, physical batch, memory format, front-end cache; ``threads`` may be set)
and the evaluations its record holds (Grad-CAM faithfulness on as many images, the membership
audit), through the same record path as every run (:func:`compare.cellrun.run_one`). A run
whose final record is already in the scratch store is not trained again (an interrupted
reproduction resumes; use another ``--out`` for another condition, e.g. other threads).

Then every figure of each fresh record is compared with its committed record
(:mod:`compare.reproduction`, :mod:`compare.recorded_figures`) and two files are written into
the scratch store: ``reproduction.md`` (per run the headline figures committed and fresh, the
largest difference, the verdict, whether the committed record was made by the same training
code; what produced each side: machine, CPU and its instruction-set flags, versions, threads,
device, code; the tolerance and why) and ``reproduction.csv`` (one row per run and figure).

Which runs: all the report's final records, or ``runs`` of them drawn at random with ``seed``
(the same sample on every machine), or the ``run_ids`` named, restricted to ``backends``.
"""

from __future__ import annotations

import csv
import io
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from compare.recorded_figures import ATOL, HEADLINE_FIGURES, RTOL, figure_text
from compare.reproduction import (
    NOT_COMPARABLE,
    RunComparison,
    compare_run,
    over_seeds,
    side_lines,
    summary_line,
)
from dpcore.config import PerfSpec, RunConfig
from dpcore.errors import ConfigError, DpCompareError
from dpcore.results import FINAL_STATUSES, ResultsStore, RunResult, utc_now

__all__ = ["CSV_FILE", "DEFAULT_OUT", "MARKDOWN_FILE", "Reproduction", "reproduce",
           "select_runs"]

#: The scratch stores' parent folder when ``out`` is not given (one folder per report).
DEFAULT_OUT = Path("runs") / "reproduce"
MARKDOWN_FILE = "reproduction.md"
CSV_FILE = "reproduction.csv"
#: The CSV's columns (one row per run and figure).
CSV_COLUMNS = ("run_id", "backend", "setting", "seed", "figure", "committed", "fresh",
               "difference", "status", "verdict", "code")

Log = Callable[[str], None]


@dataclass
class Reproduction:
    """What a reproduction did.

    Attributes:
        report: the report folder reproduced.
        out: the scratch store.
        selected: the committed records retrained (run-id order).
        comparisons: one per selected run (empty for a dry run).
        wall_seconds: wall time of the training and the comparison, in s.
        markdown, csv: the files written (None for a dry run).
    """

    report: Path
    out: Path
    selected: list[RunResult]
    comparisons: list[RunComparison]
    wall_seconds: float = 0.0
    markdown: Path | None = None
    csv: Path | None = None

    @property
    def summary(self) -> str:
        """The one-line comparison (:func:`compare.reproduction.summary_line`)."""
        return summary_line(self.comparisons)


def _backends(backends: Sequence[str] | str | None) -> set[str] | None:
    from dpcore.names import resolve_backend
    from dpcore.results import BACKENDS

    if backends is None:
        return None
    if isinstance(backends, str):
        backends = [b.strip() for b in backends.split(",") if b.strip()]
    if not backends:
        raise ConfigError(f"backends={backends!r} is empty; valid: tf, torch, or both")
    return {resolve_backend(b, BACKENDS) for b in backends}


def select_runs(records: Sequence[RunResult], *, runs: int | None = None,
                run_ids: Sequence[str] | None = None,
                backends: Sequence[str] | str | None = None, seed: int = 0) -> list[RunResult]:
    """The committed records to retrain, in run-id order: the final ones (finished or
    diverged) of ``records`` on ``backends`` (default all), those named in ``run_ids`` (every
    one must be there), then ``runs`` of them drawn with ``random.Random(seed)`` from the
    run-id order (the same sample on every machine).

    Raises:
        ConfigError: an unknown run id (the closest is named), ``runs`` out of range, no run.
    """
    from dpcore.suggest import did_you_mean

    final = sorted((r for r in records if r.status in FINAL_STATUSES), key=lambda r: r.run_id)
    allowed = _backends(backends)
    if allowed is not None:
        final = [r for r in final if r.backend in allowed]
    if run_ids:
        named = [i.strip() for ids in run_ids for i in str(ids).split(",") if i.strip()]
        by_id = {r.run_id: r for r in final}
        unknown = [i for i in named if i not in by_id]
        if unknown:
            raise ConfigError(
                f"run id {unknown[0]!r} is not a final record of the report"
                f"{' on ' + ','.join(sorted(allowed)) if allowed else ''}"
                f"{did_you_mean(unknown[0], by_id)}; valid: one of its {len(by_id)} run ids "
                "(records/records.jsonl.gz, or runs.csv's run_id column)")
        final = [by_id[i] for i in sorted(set(named))]
    if not final:
        raise ConfigError("no run to reproduce: the report holds no final record"
                          + (f" on {','.join(sorted(allowed))}" if allowed else ""))
    if runs is not None:
        if isinstance(runs, bool) or not isinstance(runs, int) or not 1 <= runs <= len(final):
            raise ConfigError(f"--runs={runs!r} is not valid; valid: 1..{len(final)} (the "
                              "report's final records on the chosen backends)")
        final = sorted(random.Random(seed).sample(final, runs), key=lambda r: r.run_id)
    return final


def perf_of(record: RunResult, threads: int | None = None) -> PerfSpec:
    """The performance settings a record was trained with (its ``perf`` entry's
    :class:`PerfSpec` fields; defaults for those it lacks), ``threads`` when given."""
    names = {f.name for f in fields(PerfSpec)}
    given = {k: v for k, v in (record.perf or {}).items() if k in names}
    if threads is not None:
        given["threads"] = threads
    try:
        return PerfSpec(**given)
    except (ConfigError, TypeError):
        return PerfSpec(threads=threads)


def evaluation_of(record: RunResult) -> dict[str, Any]:
    """The grid evaluation that gives a fresh record the evaluations ``record`` holds:
    faithfulness on as many images (or none), the membership audit when it has one, no
    montage."""
    from compare.records import has_membership_audit

    asked = record.faithfulness is not None or "faithfulness_note" in (record.metrics or {})
    subset = int((record.faithfulness or {}).get("n") or 500)
    return {"faithfulness": asked, "faithfulness_subset": max(subset, 1),
            "audit": has_membership_audit(record), "montage_images": 0}


def _cell_and_grid(record: RunResult, report_name: str, threads: int | None) -> tuple[Any, Any]:
    """The grid cell and one-run grid that retrain ``record`` (its config, labels, defaults,
    performance settings, evaluations and grid name)."""
    from compare.grid import EVALUATION_DEFAULTS, Grid, GridCell

    config = RunConfig.from_dict(record.config)
    cell = GridCell(config=config, labels=dict(record.labels), backends=(record.backend,),
                    defaults=dict(record.defaults))
    grid = Grid(name=record.grid or report_name, description="", cells=(cell,),
                backends=(record.backend,), perf=perf_of(record, threads),
                evaluation={**EVALUATION_DEFAULTS, **evaluation_of(record)})
    return cell, grid


def reproduce(report_dir: str | Path, *, runs: int | None = None,
              run_ids: Sequence[str] | None = None, backends: Sequence[str] | str | None = None,
              out: str | Path | None = None, seed: int = 0, threads: int | None = None,
              data_dir: str | Path | None = None, progress: bool = True, log: Log = print,
              command: str | None = None, dry_run: bool = False) -> Reproduction:
    """Retrain the selected runs of the committed report ``report_dir`` in a scratch store and
    compare them with their records (see the module docstring).

    Raises:
        DataError: the folder holds no readable records; the data set is missing.
        ConfigError: a bad selection, ``threads``, or an output folder that cannot be written
            (checked before anything is trained or written).
    """
    from compare.cellrun import DatasetCache, run_one
    from compare.folders import check_output_folder
    from compare.preflight import check_grid
    from compare.records import read_records
    from dpcore.data import resolve_data_root
    from dpcore.provenance import current_sources

    report = Path(report_dir)
    records = read_records(report)
    wanted = records.context.run_ids
    shown = [r for r in records.results if wanted is None or r.run_id in wanted]
    selected = select_runs(shown, runs=runs, run_ids=run_ids, backends=backends, seed=seed)
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                or threads < 1):
        raise ConfigError(f"--threads={threads!r} is not valid; valid: an integer >= 1")
    target = Path(out) if out is not None else DEFAULT_OUT / report.resolve().name
    try:
        check_output_folder(target, "--out", "scratch store")
    except DpCompareError as exc:
        raise ConfigError(str(exc)) from exc
    resolve_data_root(data_dir)
    pairs = [_cell_and_grid(r, report.name, threads) for r in selected]
    check_grid([(cell, grid.backends[0]) for cell, grid in pairs], data_dir)
    for record, (cell, _grid) in zip(selected, pairs, strict=True):
        if cell.config.config_hash != record.config_hash:
            log(f"  {record.run_id}: its config now hashes to {cell.config.config_hash} (the "
                "config format changed since); retrained and compared all the same")
    if dry_run:
        for record in selected:
            log(f"would retrain {record.backend} {' · '.join(record.labels.values())} seed "
                f"{record.seed} ({record.run_id})")
        log(f"dry run: reproduce {report}: {len(selected)} of the report's {len(shown)} "
            f"run(s) to retrain into {target}; all checked; nothing trained or written")
        return Reproduction(report, target, selected, [])
    store = ResultsStore(target)
    store.ensure_writable()
    datasets = DatasetCache(data_dir)
    started = time.perf_counter()
    comparisons = []
    for index, (record, (cell, grid)) in enumerate(zip(selected, pairs, strict=True), 1):
        backend = record.backend
        fresh = store.load(cell.config.config_hash, backend)
        if fresh is not None and fresh.status in FINAL_STATUSES:
            log(f"[{index}/{len(selected)}] {record.run_id}: already in {target}, not retrained")
        else:
            log(f"[{index}/{len(selected)}] retraining {record.run_id}")
            run_one(cell, backend, grid, store, datasets, progress=progress, log=log)
            fresh = store.load(cell.config.config_hash, backend)  # as stored, as committed
        comparison = compare_run(record, fresh, current_sources())
        log(f"  {record.run_id}: {comparison.verdict}"
            + (f" ({comparison.why})" if comparison.why else ""))
        comparisons.append(comparison)
    result = Reproduction(report, target, selected, comparisons,
                          wall_seconds=time.perf_counter() - started)
    result.markdown, result.csv = write_reproduction(
        result, command or f"compare.api.reproduce({str(report)!r})", len(shown),
        runs=runs, seed=seed)
    log(f"reproduce {report}: {result.summary}")
    log(f"reproduction: {result.markdown}")
    return result


def _csv_value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, tuple):
        return f"[{len(value)} values]"
    if isinstance(value, float):
        return "null" if math.isnan(value) else repr(value)
    return str(value)


def csv_text(comparisons: Sequence[RunComparison]) -> str:
    """``reproduction.csv``: one row per run and figure (:data:`CSV_COLUMNS`): the committed
    and fresh values (full precision; a list as ``[N values]``), their absolute difference
    (the largest element-wise for a list), the figure's status and the run's verdict."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for c in comparisons:
        r = c.committed
        for f in c.figures:
            writer.writerow([r.run_id, r.backend, " · ".join(r.labels.values()), r.seed,
                             f.name, _csv_value(f.committed), _csv_value(f.fresh),
                             _csv_value(f.difference), f.status, c.verdict, c.code])
    return buffer.getvalue()


def _headline(c: RunComparison, name: str) -> str:
    figure = next((f for f in c.figures if f.name == name), None)
    if figure is None:
        return "-"
    if figure.status == "identical":
        return figure_text(figure.committed)
    return f"{figure_text(figure.committed)} → {figure_text(figure.fresh)}"


def markdown_text(result: Reproduction, command: str, n_report: int, *,
                  runs: int | None = None, seed: int = 0) -> str:
    """``reproduction.md`` (see the module docstring)."""
    comparisons = result.comparisons
    how = (f", a seeded sample (`--runs {runs}`, seed {seed}) of" if runs is not None
           else " of")
    lines = [f"# Reproduction of `{result.report.as_posix()}`", "",
             f"- command: `{command}`", f"- written: {utc_now()}",
             f"- wall time: {result.wall_seconds:.0f} s (retraining and evaluating the runs "
             "not already in the scratch store, and the comparison)",
             f"- runs: {len(comparisons)}{how} the report's {n_report} runs, retrained in "
             f"`{result.out.as_posix()}`",
             f"- verdict: {summary_line(comparisons)}", "",
             "## Verdicts", "",
             "Every figure of each fresh record (accuracy, AUC, loss, per-class figures, every "
             "epsilon, faithfulness, the audit; all numbers under `metrics`, `privacy`, "
             "`faithfulness` and `audit`) against its committed record. *identical*: equal "
             f"bit for bit; *within tolerance*: |fresh − committed| ≤ {ATOL:g} + {RTOL:g} × "
             "max(|fresh|, |committed|) for every figure, the rounding of float32 arithmetic "
             "in one evaluation of the same weights; *differs*: beyond it, i.e. another "
             "trained model (DP-SGD turns any float-level difference in its steps into "
             "another model, so nothing between rounding and a real difference is tolerated). "
             "A → B is committed → fresh; a single value is identical on both sides.", ""]
    header = ["run", "backend", "setting", "seed", "accuracy", "AUC", "loss", "epsilon (RDP)",
              "largest relative difference", "verdict", "code"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for c in comparisons:
        r = c.committed
        largest = c.largest
        worst = "-" if largest is None else largest.change_text()
        verdict = c.verdict + (f" ({c.why})" if c.why else "")
        code = c.code + (f" ({', '.join(c.code_parts)})" if c.code_parts else "")
        lines.append("| " + " | ".join([
            f"`{r.run_id}`", r.backend, " · ".join(r.labels.values()) or "-", str(r.seed),
            *(_headline(c, name) for name in HEADLINE_FIGURES), worst, verdict, code]) + " |")
    one_sided: dict[tuple[str, str], int] = {}
    for c in comparisons:
        for f in c.one_sided:
            key = (f.name, f.status)
            one_sided[key] = one_sided.get(key, 0) + 1
    if one_sided:
        lines += ["", "Figures recorded on one side only (added or dropped by the code since; "
                  "not part of the verdict): " + "; ".join(
                      f"`{name}` ({status.replace('only ', '')} only, {n} run(s))"
                      for (name, status), n in sorted(one_sided.items())) + "."]
    seeds = over_seeds(comparisons)
    if any(c.verdict == NOT_COMPARABLE for c in comparisons):
        lines += ["", "## Over seeds (runs computed on another kind of device)", "",
                  "A GPU run draws its noise from a CUDA generator, another stream than the "
                  "CPU's for the same seed: run by run the two sides are different draws. Per "
                  "setting and backend, the mean test accuracy over the seeds of each side and "
                  "a 95 % Welch interval of the difference (fresh − committed):", "",
                  "| setting | backend | seeds | committed | fresh | difference | 95 % interval "
                  "| verdict |", "|---|---|---:|---:|---:|---:|---|---|"]
        for row in seeds:
            interval = ("-" if row["low"] is None
                        else f"[{row['low']:+.4f}, {row['high']:+.4f}]")
            lines.append(f"| {row['setting']} | {row['backend']} | {row['n']} | "
                         f"{figure_text(row['committed'])} | {figure_text(row['fresh'])} | "
                         f"{figure_text(row['difference'])} | {interval} | {row['verdict']}"
                         + (f" ({row['why']})" if row["why"] else "") + " |")
    lines += ["", "## What produced each side", "",
              *side_lines("Committed records", [c.committed for c in comparisons]),
              *side_lines("Fresh records", [c.fresh for c in comparisons
                                            if c.fresh is not None]),
              f"Every figure of every run: [`{CSV_FILE}`]({CSV_FILE}) (columns: "
              + ", ".join(CSV_COLUMNS) + ").", ""]
    return "\n".join(lines)


def write_reproduction(result: Reproduction, command: str, n_report: int, *,
                       runs: int | None = None, seed: int = 0) -> tuple[Path, Path]:
    """Write ``reproduction.md`` and ``reproduction.csv`` into the scratch store; returns
    their paths. Text naming a folder of this machine is made portable
    (:func:`compare.records.portable_text`)."""
    from compare.records import portable_text
    from dpcore.io import atomic_write_text

    md = result.out / MARKDOWN_FILE
    table = result.out / CSV_FILE
    atomic_write_text(md, portable_text(markdown_text(result, command, n_report, runs=runs,
                                                      seed=seed)))
    atomic_write_text(table, csv_text(result.comparisons))
    return md, table

