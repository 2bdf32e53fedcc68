"""The report's header: what wrote it, with which versions and data, and how many runs."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from compare.report_context import ReportContext
from compare.reporting.section import FunctionSection, ReportData, SectionOutput
from dpcore.mechanisms import noises_gradients
from dpcore.results import RunResult, utc_now


def engines_used(results: Sequence[RunResult]) -> str:
    """How each backend's DP runs computed per-example gradients, from their RunResults:
    e.g. ``tf: fast engine (2 runs); torch: reference engine (Opacus grad-sample mode hooks)
    (2 runs)``.

    Performance-only (the engines compute the same update); stated so that the times in a
    report can be read. Non-private runs are not counted.
    """
    counts: dict[str, dict[str, int]] = {}
    for r in results:
        if not noises_gradients(r.config["privacy"]["mechanism"]):
            continue
        perf = r.perf or {}
        engine = perf.get("engine_used", perf.get("engine"))
        if engine == "library":
            how = f"library recipe: {perf.get('trainer', '?')}"
        elif engine is None and perf.get("grad_sample_mode"):  # a record without perf.engine(_used)
            how = f"Opacus grad-sample mode {perf['grad_sample_mode']}"
        else:
            how = f"{engine or '?'} engine"
            if r.backend == "torch" and perf.get("grad_sample_mode"):
                how += f" (Opacus grad-sample mode {perf['grad_sample_mode']})"
        if perf.get("fast_engine_fallback"):
            how += f" (fast engine not used: {perf['fast_engine_fallback']})"
        per_backend = counts.setdefault(r.backend, {})
        per_backend[how] = per_backend.get(how, 0) + 1
    if not counts:
        return "no DP-SGD runs"
    return "; ".join(
        f"{backend}: " + ", ".join(f"{how} ({n} run{'s' if n > 1 else ''})"
                                   for how, n in hows.items())
        for backend, hows in sorted(counts.items()))


def header_lines(context: ReportContext, results: Sequence[RunResult], frame: pd.DataFrame
                 ) -> list[str]:
    """The report's title and header: the command, the written time (the one impure line of
    a report), wall and training times, versions, engines, data, runs and seeds, and the
    description."""
    lines = [f"# {context.title}", "", f"- command: `{context.command}`",
             f"- written: {utc_now()}"]
    if context.wall_seconds is not None:
        lines.append(f"- wall time of the command that wrote this report, before the report "
                     f"(the runs it trained, not those already stored, and the montages): "
                     f"{context.wall_seconds:.0f} s")
    if results:
        run_seconds = sum(float(r.timing.get("total_seconds") or 0.0) for r in results)
        lines.append(f"- training time summed over the {len(results)} stored runs: "
                     f"{run_seconds:.0f} s")
        evaluated = [float(r.timing["evaluation_seconds"]) for r in results
                     if r.timing.get("evaluation_seconds") is not None]
        if evaluated:  # records written before runs timed their evaluation have none
            lines.append(f"- evaluation time after training (faithfulness, audits) summed over "
                         f"the {len(evaluated)} stored runs that record it: "
                         f"{sum(evaluated):.0f} s")
        versions = results[0].versions
        shown = ", ".join(f"{k} {v}" for k, v in versions.items() if k != "platform")
        lines += [f"- versions: {shown}", f"- machine: {versions.get('platform', '?')}",
                  f"- per-example gradients: {engines_used(results)}"]
    if not frame.empty:
        data_used = frame.groupby("dataset").agg(
            n_train=("n_train", "first"), n_test=("n_test", "first"),
            fingerprint=("data_fingerprint", "first"))
        sources = data_sources(results)
        for name, row in data_used.iterrows():
            lines.append(f"- data: `{name}`: {int(row.n_train)} train / {int(row.n_test)} test "
                         f"examples (fingerprint {row.fingerprint})" + sources.get(str(name), ""))
        counts = frame["status"].value_counts().to_dict()
        missing = (len(context.run_ids) - len({r.run_id for r in results})
                   if context.run_ids is not None else 0)
        lines.append("- runs: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
                     + (f"; **{missing} of the grid's {len(context.run_ids or ())} runs are "
                        "not stored yet: an interim report**" if missing > 0 else ""))
        seeds = sorted(set(int(s) for s in frame["seed"].dropna()))
        lines.append(f"- seeds: {', '.join(map(str, seeds))}")
    if context.description:
        lines += ["", " ".join(context.description.split())]
    return lines + [""]


def data_sources(results: Sequence[RunResult]) -> dict[str, str]:
    """Data set name -> ", from `LOCATION`; provenance: ..." for the header: where the runs
    read it (relative to the data root, never a folder of this machine), what loading
    converted, resized or skipped (:func:`dpcore.data.survey.data_notes`) and where the file
    comes from (the registry's provenance), from the first run of each data set."""
    from dpcore.data import data_provenance, portable_location
    from dpcore.data.survey import data_notes

    out: dict[str, str] = {}
    for r in results:
        name = str(r.config["data"]["name"])
        if name in out:
            continue
        text = ""
        source = r.dataset.get("source")
        if source:
            text += f", read from `{portable_location(name, str(source))}`"
        extra = r.dataset.get("extra") or {}
        note = extra.get("note")
        if note:
            text += f" ({note})"
        for changed in data_notes(extra):  # what loading converted, resized or skipped
            text += f"; {changed}"
        provenance = data_provenance(name)
        if provenance:
            text += f"; provenance: {provenance}"
        out[name] = text
    return out


def _header(data: ReportData) -> SectionOutput:
    """The title and header lines (:func:`header_lines`)."""
    return SectionOutput(header_lines(data.context, data.results, data.frame))


#: The report's header: not a registered section (every report starts with it, runs or not).
header = FunctionSection("header", _header)


__all__ = ["data_sources", "engines_used", "header", "header_lines"]
