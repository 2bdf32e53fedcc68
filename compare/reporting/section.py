"""A report section: what it reads, what it returns, and the protocol every section follows.

A report is the registered sections (:data:`SECTIONS`, in the reading order of
:data:`compare.reporting.pipeline.READING_ORDER`) applied to one :class:`ReportData`, built
once from the run records (the run table, the summary, the paired table); each section
returns a :class:`SectionOutput` (its markdown lines, its CSV tables and its figures, drawn
but not saved) and writes nothing. One writer (:func:`compare.reporting.writer.write_report_files`)
saves every output. Adding a figure or a table to reports is one section in one file
(``@section(name)``), and its place in the reading order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pandas as pd
from matplotlib.figure import Figure

from compare.final_weights import FinalWeights
from compare.montage_data import MontageData
from compare.report_context import ReportContext
from dpcore.registry import Registry
from dpcore.results import RunResult


@dataclass(frozen=True)
class ReportData:
    """Everything a section may read, built once per report.

    Attributes:
        results: the reported runs, sorted by run id, labelled in the grid's axis order.
        context: the command, title, notes and published figures of the report.
        frame: one row per run (:func:`compare.reporting.frames.results_frame`; ``runs.csv``).
        summary: per setting and backend (:func:`compare.reporting.summary.summary_table`;
            ``summary.csv``); empty when no run finished.
        paired: the backends paired by seed
            (:func:`compare.reporting.stats.paired_backend_table`).
        montages: the saliency montages' arrays.
        folder: the name of the report folder (links to write-ups are relative to
            ``reports/<folder>/``).
        weights: run id -> the final weights of the shared-noise runs
            (:mod:`compare.final_weights`), for the framework-equivalence section.
        companions: the grid's audit companion runs, kept out of every table but the
            privacy section's (:mod:`compare.reporting.audited_column`).
    """

    results: tuple[RunResult, ...]
    context: ReportContext
    frame: pd.DataFrame
    summary: pd.DataFrame
    paired: pd.DataFrame
    montages: tuple[MontageData, ...] = ()
    folder: str = "report"
    weights: Mapping[str, FinalWeights] = field(default_factory=dict)
    companions: tuple[RunResult, ...] = ()


@dataclass(frozen=True)
class ReportFigure:
    """One figure of a section, drawn, to be written as ``name`` (a PNG path relative to the
    report folder) by ``write(path)``: see :func:`saved_figure` and :func:`drawn_figure`."""

    name: str
    write: Callable[[Path], Any]


@dataclass(frozen=True)
class SectionOutput:
    """What a section gives the report: markdown ``lines`` (empty: the section is left out),
    CSV ``tables`` (file name relative to the report folder -> table, written without the
    index) and ``figures``."""

    lines: Sequence[str] = ()
    tables: Mapping[str, pd.DataFrame] = field(default_factory=dict)
    figures: Sequence[ReportFigure] = ()


class Section(Protocol):
    """A report section: a pure function of the report data (no file is written; the figures
    are returned drawn, the writer saves them)."""

    #: A short name (tests and the section list refer to it).
    name: str

    def render(self, data: ReportData) -> SectionOutput:
        """This section's markdown, tables and figures for ``data``."""


@dataclass(frozen=True)
class FunctionSection:
    """A :class:`Section` made of a function ``render(data) -> SectionOutput``."""

    name: str
    render: Callable[[ReportData], SectionOutput]


#: Report section name -> the section, in registration order (:func:`section` registers).
SECTIONS: Registry[str, Section] = Registry("report sections", key="report section")


def section(name: str) -> Callable[[Callable[[ReportData], SectionOutput]], FunctionSection]:
    """Decorator: the function becomes the :class:`Section` called ``name``, registered in
    :data:`SECTIONS` (``SECTIONS.register(name)(FunctionSection(name, render))``)."""

    def wrap(render: Callable[[ReportData], SectionOutput]) -> FunctionSection:
        return SECTIONS.register(name)(FunctionSection(name, render))

    return wrap


def saved_figure(name: str, fig: Figure, *, dpi: int = 110, digest: bool = True,
                 close: Callable[[Figure], None] | None = None,
                 save_kwargs: Mapping[str, Any] | None = None) -> ReportFigure:
    """A drawn matplotlib figure written to ``name`` as a PNG at ``dpi`` (atomically), with
    the digest of its plotted data recorded for the report's records (``digest``;
    :mod:`compare.figdigest`); ``close`` releases it afterwards (pyplot figures)."""
    from compare.figdigest import note_figure
    from dpcore.io import atomic_path

    def write(path: Path) -> None:
        try:
            with atomic_path(path) as tmp:
                fig.savefig(tmp, format="png", dpi=dpi, **(save_kwargs or {}))
            if digest:
                note_figure(fig, path)
        finally:
            if close is not None:
                close(fig)

    return ReportFigure(name, write)


def add(figures: list[ReportFigure], name: str, fig: Figure | None) -> bool:
    """Append ``fig`` (if drawn) to ``figures`` as :func:`saved_figure` ``name``; whether it
    was (a section says "see the figure" only then)."""
    if fig is None:
        return False
    figures.append(saved_figure(name, fig))
    return True


def drawn_figure(name: str, draw: Callable[[Path], Any]) -> ReportFigure:
    """A figure whose drawing function writes the PNG itself (``draw(path)``; e.g. a saliency
    montage, :func:`compare.reporting.montage.draw_montage`), called by the writer."""
    return ReportFigure(name, draw)


__all__ = ["SECTIONS", "FunctionSection", "ReportData", "ReportFigure", "Section",
           "SectionOutput", "add", "drawn_figure", "saved_figure", "section"]
