"""A report as a pipeline: the report data built once, then every registered section.

:func:`report_data` builds the one run table (:func:`compare.reporting.frames.results_frame`)
and what is aggregated from it (summary, backends paired by seed) once from the run records;
:func:`render_sections` applies the header and the sections (:func:`report_sections`: those
of :data:`~compare.reporting.section.SECTIONS` in :data:`READING_ORDER`) to it. Each section
is a :class:`~compare.reporting.section.Section` (a pure function of the data returning
markdown, tables and figures); :func:`compare.reporting.writer.write_report_files` writes
them. To add a section, write it in its own module (``@section(name)``) and give it its place
in :data:`READING_ORDER`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import pandas as pd

from compare.final_weights import FinalWeights
from compare.montage_data import MontageData
from compare.report_context import ReportContext
from compare.reporting.accuracy_section import accuracy
from compare.reporting.attribution_section import attribution
from compare.reporting.backends_section import backends
from compare.reporting.closing_section import all_runs, notes, unfinished_runs
from compare.reporting.curves_section import learning_curves
from compare.reporting.epsilon_section import epsilon
from compare.reporting.equivalence_section import framework_equivalence, without_own_noise
from compare.reporting.faithfulness_section import faithfulness
from compare.reporting.findings_section import findings
from compare.reporting.frames import results_frame
from compare.reporting.header_section import header
from compare.reporting.headline import headline_section
from compare.reporting.ldp_audit_section import local_dp_and_audit
from compare.reporting.per_class_section import per_class
from compare.reporting.privacy_section import privacy
from compare.reporting.published_section import published
from compare.reporting.section import SECTIONS, ReportData, Section, SectionOutput
from compare.reporting.stats import paired_backend_table, summary_table
from compare.reporting.tables import markdown_table
from compare.reporting.time_section import time_and_memory
from dpcore.results import RunResult

#: The registered sections of a report with finished runs, in reading order (the header
#: leads them; a registered section not listed here follows them, in registration order).
READING_ORDER: tuple[Section, ...] = (
    headline_section, published, findings, privacy, attribution, accuracy, backends,
    framework_equivalence, learning_curves, epsilon, faithfulness, time_and_memory, per_class,
    local_dp_and_audit, notes, unfinished_runs, all_runs,
)


def report_sections() -> tuple[Section, ...]:
    """The sections registered in :data:`~compare.reporting.section.SECTIONS` now, in
    reading order: those of :data:`READING_ORDER` (as registered now, so a replaced section
    takes its place), then the others in registration order."""
    ordered = [SECTIONS[s.name] for s in READING_ORDER if s.name in SECTIONS]
    listed = {s.name for s in READING_ORDER}
    return (*ordered, *(s for name, s in SECTIONS.items() if name not in listed))


def report_data(results: Sequence[RunResult], context: ReportContext,
                montages: Sequence[MontageData] = (), folder: str = "report",
                weights: Mapping[str, FinalWeights] | None = None,
                companions: Sequence[RunResult] = ()) -> ReportData:
    """The data every section reads, built once: ``results`` (as given: sorted and labelled by
    the caller, :func:`compare.report.resolve_context`), the run table, its summary (empty
    when no run finished), the backends paired by seed (empty then too; a setting whose runs
    share their noise, ``privacy.noise_source: shared``, counts as not noised) and the final
    weights of the shared-noise runs (``weights``); ``companions``: the audit companion runs
    taken out of ``results`` (:func:`compare.reporting.audited_column.companion_view`).

    A report whose grid does not ask for faithfulness (``context.faithfulness`` false) reads
    the runs without it: a record shared with a grid that asked holds figures for some runs
    only, which this report neither tables nor plots (its records keep them)."""
    if not context.faithfulness:
        results = [dataclasses.replace(r, faithfulness=None) for r in results]
    frame = results_frame(results)
    summary = summary_table(frame)
    paired = (without_own_noise(paired_backend_table(frame), frame, results)
              if not summary.empty else pd.DataFrame())
    return ReportData(results=tuple(results), context=context, frame=frame, summary=summary,
                      paired=paired, montages=tuple(montages), folder=folder or "report",
                      weights=dict(weights or {}), companions=tuple(companions))


def render_sections(data: ReportData, sections: Sequence[Section] | None = None
                    ) -> list[SectionOutput]:
    """The header and, by what the runs hold, "No runs found.", "No run finished." with the
    runs that did not, or ``runs.csv``, ``summary.csv`` and every one of ``sections``
    (default: :func:`report_sections` when called)."""
    sections = report_sections() if sections is None else sections
    head = header.render(data)
    frame = data.frame
    if frame.empty:
        return [head, SectionOutput(["No runs found."])]
    tables = {"runs.csv": frame, "summary.csv": data.summary}
    if data.summary.empty:  # no run finished: nothing to aggregate
        return [head, SectionOutput(
            ["No run finished.", "", "## Runs that did not finish", "",
             markdown_table(frame, ["run_id", "setting", "backend", "seed", "status"])],
            tables)]
    return [head, SectionOutput((), tables), *(s.render(data) for s in sections)]


def section_named(name: str) -> Section:
    """The registered section called ``name``.

    Raises:
        ConfigError: none is (:meth:`dpcore.registry.Registry.missing`).
    """
    return SECTIONS[name]


__all__ = ["READING_ORDER", "render_sections", "report_data", "report_sections",
           "section_named"]
