"""Reports from a results store: ``report.md`` + CSV tables + PNG plots.

Every number in a report comes from a stored :class:`~dpcore.results.RunResult`. The header
states the exact command, the library versions, the data used and the wall time; then come
the headline (generated sentences), the published figures beside ours, and the sections. A
report is a pipeline (:mod:`compare.reporting.pipeline`): the report data built once from the
runs, each section of :func:`~compare.reporting.pipeline.report_sections` a pure function of it
(:mod:`compare.reporting.section`), and one writer (:mod:`compare.reporting.writer`). This
module keeps the entry points other code calls (:class:`ReportContext`, :func:`write_report`,
:func:`rebuild_report`, :func:`render_report`, :func:`command_line`, and the table helpers
re-exported below).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import sys
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from compare.final_weights import WEIGHTS_FOLDER, FinalWeights, collect_final_weights
from compare.montage_data import MontageData
from compare.report_context import ReportContext  # re-exported: callers import it from here
from compare.reporting.audited_column import companion_view
from compare.reporting.frames import front_end_mismatches, per_class_frame, results_frame
from compare.reporting.header_section import engines_used
from compare.reporting.pipeline import render_sections, report_data
from compare.reporting.stats import seeds_phrase, summary_table
from compare.reporting.tables import markdown_table
from compare.reporting.time_section import front_end_sentence, time_ratio_table
from compare.reporting.writer import write_latex, write_report_files
from dpcore.errors import DpCompareError
from dpcore.results import ResultsStore, RunResult


def preset_published(results: Sequence[RunResult]) -> tuple[dict[str, Any], ...]:
    """The ``published:`` entries of the bundled preset that wrote these runs, so that
    ``dpcompare report`` shows the papers' figures as ``compare`` does; empty when the runs
    come from several grids or from no bundled preset."""
    from compare.grid import bundled_grid_of

    grid = bundled_grid_of(results)
    return () if grid is None else grid.published


def _single_grid_name(results: Sequence[RunResult]) -> str | None:
    """The grid that wrote every one of these runs (RunResult ``grid``), if they share one."""
    names = {r.grid for r in results}
    return str(next(iter(names))) if len(names) == 1 and next(iter(names)) else None


def write_report(
    store_root: str | Path, out_dir: str | Path, context: ReportContext, *,
    records: Mapping[str, RunResult] | None = None, latex: bool = False,
    record_folders: Sequence[str | Path] | None = None,
) -> Path:
    """Write report.md, CSV tables, PNG plots and the run records (``records/``, see
    :mod:`compare.records`) for every run in ``store_root``.

    Returns the path of ``report.md``. ``records`` (run id -> RunResult, e.g. the committed
    records a grid resumed from, :func:`compare.records.committed_records`) are reported
    with the store's runs; for a run in both, the record is the one reported (one record per
    run id across reports). Montages are drawn from the arrays the runner stored (one folder
    per grid under ``montages/`` of the store, :func:`report_montages`); a store written
    before montage arrays existed shows its montages once ``dpcompare compare`` has redrawn
    them. The final weights of shared-noise runs (:mod:`compare.final_weights`) come from
    their checkpoints, else from the committed ``records/weights`` of ``record_folders``
    (default: ``out_dir`` and the folders beside it; a grid passes the folders it resumed
    from, none when it resumed from no records). ``latex``: also the booktabs ``.tex`` tables
    (:func:`render_report`).
    """
    from compare.records import RECORDS_FOLDER, record_folders_beside

    runs = {r.run_id: r for r in ResultsStore(store_root).list_runs()}
    runs.update(records or {})
    results = [runs[key] for key in sorted(runs)]
    if context.run_ids is not None:
        results = [r for r in results if r.run_id in context.run_ids]
    grid_name = context.montage_grid or _single_grid_name(results)
    montages = report_montages(Path(store_root), grid_name)
    folders = record_folders_beside(out_dir) if record_folders is None else record_folders
    weights = collect_final_weights(results, store_root, [
        Path(folder) / RECORDS_FOLDER / WEIGHTS_FOLDER for folder in folders])
    return render_report(results, dataclasses.replace(context, montage_grid=grid_name),
                         out_dir, montages, latex=latex, weights=weights)


def rebuild_report(report_dir: str | Path, out_dir: str | Path | None = None, *,
                   latex: bool = False) -> Path:
    """Rebuild the report folder ``report_dir`` (report.md, CSVs, PNGs, montages, records)
    from its records alone (:func:`compare.records.read_records`): no training, no model, no
    store. ``out_dir`` defaults to ``report_dir`` itself; ``latex``: also the booktabs ``.tex``
    tables. Returns the path of report.md.

    Raises:
        DataError: ``report_dir`` holds no (readable) records.
    """
    from compare.records import read_records

    records = read_records(report_dir)
    return render_report(records.results, records.context, out_dir or report_dir,
                         records.montages, resolved=True, latex=latex,
                         weights=records.weights)


def resolve_context(results: Sequence[RunResult], context: ReportContext
                    ) -> tuple[list[RunResult], ReportContext]:
    """``results`` named and ordered as the reported grid names them, and ``context`` with
    everything a rebuild needs fixed: the axis order and published figures (looked up from
    the bundled preset when not given), the command with no folder of this machine. What a
    report's records hold, so that rebuilding it consults no preset file and no store."""
    from compare.grid import bundled_grid_of, in_axis_order, with_grid_labels
    from compare.records import portable_text

    axis_order = tuple(context.axis_order)
    if not axis_order:
        grid = bundled_grid_of(results)
        axis_order = () if grid is None else tuple(grid.axis_names)
    results = in_axis_order(with_grid_labels(results, context.labels), axis_order)
    published = tuple(context.published) or preset_published(results)
    return results, dataclasses.replace(context, command=portable_text(context.command),
                                        labels=None, axis_order=axis_order,
                                        published=published)


def render_report(results: Sequence[RunResult], context: ReportContext, out_dir: str | Path,
                  montages: Sequence[MontageData] = (), *, resolved: bool = False,
                  latex: bool = False, weights: Mapping[str, FinalWeights] | None = None
                  ) -> Path:
    """Write the report of ``results`` into ``out_dir``: report.md, CSVs, PNGs, montages
    drawn from ``montages``, and the records it can be rebuilt from (with the digest of every
    figure's plotted data, :mod:`compare.figdigest`); with ``latex`` then the booktabs
    ``.tex`` tables (:func:`compare.reporting.writer.write_latex`). A pure function of its
    arguments but for the header's written time. ``resolved``: ``results`` and ``context``
    are already as :func:`resolve_context` returns them (a rebuild from records).
    ``weights``: run id -> the final weights of the shared-noise runs
    (:mod:`compare.final_weights`), kept in the records too. The metrics of a run whose
    record keeps its test outputs are recomputed from them (:func:`dpcore.scoring.rescored`;
    a warning names a run whose recorded figures differ); the records are written as given.
    """
    from compare.figdigest import collecting
    from compare.records import write_records
    from dpcore.scoring import rescored_results

    results = sorted(results, key=lambda r: r.run_id)  # the records' order: a rebuild's too
    if not resolved:
        results, context = resolve_context(results, context)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    weights = dict(weights or {})
    scored, disagreements = rescored_results(results)
    for message in disagreements:
        warnings.warn(message, stacklevel=2)
    view = companion_view(scored, context)  # audit companions: only in the privacy table
    outputs = render_sections(report_data(view.results, view.context, montages,
                                          folder=out.name, weights=weights,
                                          companions=view.companions))
    with collecting(out) as figures:
        path = write_report_files(out, outputs)
    write_records(out, results, context, montages, figures, weights)
    if latex:
        write_latex(out)
    return path


def report_montages(store_root: Path, grid_name: str | None) -> list[MontageData]:
    """The montages a report of the store ``store_root`` shows, as the arrays the runner
    stored (:func:`compare.montage_data.save_montage_data`), each named as its PNG in the report.

    With ``grid_name``: that grid's montages only (a store shared by several grids holds a
    montage per grid for the same data set and model, with different columns). Without: every
    grid's montage in the store, each named after its grid. A damaged file is skipped with a
    warning (``dpcompare compare`` redraws it from the checkpoints).
    """
    from compare.montage_data import (
        MONTAGE_DATA_SUFFIX,
        MONTAGES_FOLDER,
        grid_montage_folder,
        load_montage_data,
    )

    if grid_name is not None:
        found = [(f"{p.stem}.png", p) for p in sorted(grid_montage_folder(store_root, grid_name)
                                                      .glob(f"*{MONTAGE_DATA_SUFFIX}"))]
    else:
        found = [(f"{p.parent.name}-{p.stem}.png", p) for p in sorted(
            (store_root / MONTAGES_FOLDER).glob(f"*/*{MONTAGE_DATA_SUFFIX}"))]
    montages = []
    for name, path in found:
        try:
            montages.append(dataclasses.replace(load_montage_data(path), name=name))
        except DpCompareError as exc:
            warnings.warn(f"montage skipped: {exc}", stacklevel=2)
    return montages


def command_line(args: Sequence[str] | None = None) -> str:
    """The command as typed (``dpcompare`` plus its arguments, ``sys.argv`` by default), naming
    no folder of this machine: the data root, the current folder and the home folder as
    :func:`compare.records.portable_text` writes them, and any other absolute path
    (``--out /elsewhere/runs/x``) relative to the current folder (``../runs/x``), so that the
    command still runs from where it was typed."""
    from compare.records import portable_text

    def relative(arg: str) -> str:
        option, equals, value = arg.rpartition("=") if arg.startswith("--") else ("", "", arg)
        if value.startswith("/"):
            value = os.path.relpath(value, Path.cwd())
        return f"{option}{equals}{value}"

    def quoted(arg: str) -> str:  # as a shell reads it; $DPCOMPARE_DATA_DIR left to expand
        return arg if re.fullmatch(r"[\w@%+=:,./$~-]+", arg) else shlex.quote(arg)

    typed = " ".join(shlex.quote(a) for a in (sys.argv[1:] if args is None else args))
    return "dpcompare " + " ".join(quoted(relative(arg))
                                   for arg in shlex.split(portable_text(typed)))


__all__ = ["ReportContext", "command_line", "engines_used", "front_end_mismatches",
           "front_end_sentence", "markdown_table", "per_class_frame", "preset_published",
           "rebuild_report", "render_report", "report_montages", "resolve_context",
           "results_frame", "seeds_phrase", "summary_table", "time_ratio_table", "write_report"]
