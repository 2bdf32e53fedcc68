"""Committed records against fresh ones: one verdict per run, what produced each side, and
the one line a grid ends with.

Used by ``dpcompare reproduce`` (:mod:`compare.reproduce`: a committed report's runs
retrained in a scratch store) and by a default ``dpcompare compare`` whose runs are also
committed (:func:`committed_comparison`, through :mod:`compare.resume`: "30 of 30 runs
reproduce the committed records: identical").

Per run (:func:`compare_run`), every figure of the two records (:mod:`compare.recorded_figures`)
is compared; the verdict is

* ``identical``: every figure equal bit for bit;
* ``within tolerance``: every figure within :data:`compare.recorded_figures.RTOL` /
  :data:`~compare.recorded_figures.ATOL` (float32 rounding of one evaluation);
* ``differs``: some figure beyond it (another trained model), or the run ended otherwise
  (finished against diverged);
* ``not comparable run by run``: the two sides computed on different kinds of device. A torch
  run on a GPU draws its noise from a CUDA generator (``torchpipe/device.py``), another stream
  than the CPU's for the same seed, so its model is another draw of the same setting: such
  runs are compared over seeds instead (:func:`over_seeds`: the mean of each side and a 95 %
  Welch interval of their difference), or the comparison says it cannot (fewer than two seeds
  a side);
* ``not reproduced``: the fresh run failed (its error is given).

Each comparison also says whether the committed record was made by the training code of the
fresh run (``code``: the ``sources`` digest of :mod:`dpcore.provenance` is the same),
by code that has changed since (the digest differs; the changed parts are named), or does not
say (a record written without provenance).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compare.recorded_figures import (
    FigureDifference,
    compare_figures,
    figure_text,
    recorded_figures,
)
from dpcore.results import FINAL_STATUSES, RunResult

__all__ = [
    "CODE_CHANGED", "CODE_SAME", "CODE_UNKNOWN", "NOT_COMPARABLE", "RunComparison",
    "committed_comparison", "compare_run", "device_kind", "over_seeds", "read_committed",
    "side_lines", "summary_line",
]

NOT_COMPARABLE = "not comparable run by run"
NOT_REPRODUCED = "not reproduced"
CODE_SAME = "same code"
CODE_CHANGED = "code changed since"
CODE_UNKNOWN = "code not recorded"


@dataclass(frozen=True)
class RunComparison:
    """A committed record against a fresh record of the same config and backend.

    Attributes:
        committed, fresh: the two records (``fresh`` None when no fresh record exists).
        figures: every figure of either side (:func:`compare.recorded_figures.compare_figures`).
        verdict: ``identical``, ``within tolerance``, ``differs``, ``not comparable run by
            run`` or ``not reproduced`` (see the module docstring).
        why: what the verdict rests on besides the figures ("" when they say it all).
        code: :data:`CODE_SAME`, :data:`CODE_CHANGED` or :data:`CODE_UNKNOWN`.
        code_parts: the parts of the sources whose digest changed (``dpcore``, ``torchpipe``...).
    """

    committed: RunResult
    fresh: RunResult | None
    figures: tuple[FigureDifference, ...]
    verdict: str
    why: str = ""
    code: str = CODE_UNKNOWN
    code_parts: tuple[str, ...] = ()

    @property
    def run_id(self) -> str:
        return self.committed.run_id

    @property
    def reproduces(self) -> bool:
        """Whether the fresh run gives the committed figures (identical or within tolerance)."""
        return self.verdict in ("identical", "within tolerance")

    @property
    def largest(self) -> FigureDifference | None:
        """The figure of both sides with the largest relative difference
        (:attr:`~compare.recorded_figures.FigureDifference.relative`; None: none differs)."""
        compared = [f for f in self.figures if f.difference is not None and f.difference > 0]
        return max(compared, key=lambda f: f.relative or 0.0, default=None)

    @property
    def one_sided(self) -> list[FigureDifference]:
        """The figures recorded on one side only (a figure added or dropped since)."""
        return [f for f in self.figures if f.difference is None]


def device_of(result: RunResult) -> str | None:
    """Where a run computed, as recorded (provenance, else ``perf.device``), or None."""
    device = (result.provenance or {}).get("device") or (result.perf or {}).get("device")
    return None if device is None else str(device)


def device_kind(result: RunResult) -> str:
    """``gpu`` for a run recorded on a CUDA device or GPU, else ``cpu`` (a record that names
    no device was written by a CPU-only bench)."""
    device = (device_of(result) or "cpu").lower()
    return "gpu" if "cuda" in device or "gpu" in device else "cpu"


def _code(committed: RunResult, fresh: RunResult | None,
          current: Mapping[str, Any] | None) -> tuple[str, tuple[str, ...]]:
    """(code status, changed parts) of the committed record against the fresh run's sources
    (the fresh record's provenance, else ``current``)."""
    mine = (committed.provenance or {}).get("sources")
    theirs = ((fresh.provenance or {}).get("sources") if fresh is not None else None) or current
    if not mine or not theirs:
        return CODE_UNKNOWN, ()
    if mine.get("digest") == theirs.get("digest"):
        return CODE_SAME, ()
    a, b = mine.get("parts") or {}, theirs.get("parts") or {}
    return CODE_CHANGED, tuple(sorted(k for k in {*a, *b} if a.get(k) != b.get(k)))


def compare_run(committed: RunResult, fresh: RunResult | None,
                current_sources: Mapping[str, Any] | None = None) -> RunComparison:
    """The comparison of one run (see the module docstring); ``current_sources``: the
    ``sources`` digest of the running code, for a fresh record without provenance."""
    code, parts = _code(committed, fresh, current_sources)
    if fresh is None or fresh.status not in FINAL_STATUSES:
        why = ("no fresh record" if fresh is None
               else f"the fresh run is {fresh.status}: {' '.join((fresh.error or '').split())}")
        return RunComparison(committed, fresh, (), NOT_REPRODUCED, why, code, parts)
    figures = tuple(compare_figures(recorded_figures(committed), recorded_figures(fresh)))
    kinds = (device_kind(committed), device_kind(fresh))
    if kinds[0] != kinds[1]:
        why = (f"computed on {device_of(committed) or 'cpu'} (committed) and "
               f"{device_of(fresh) or 'cpu'} (fresh): a GPU run draws its noise from a CUDA "
               "generator, another stream than the CPU's; compared over seeds")
        return RunComparison(committed, fresh, figures, NOT_COMPARABLE, why, code, parts)
    statuses = {f.status for f in figures}
    if committed.status != fresh.status:
        verdict, why = "differs", f"{committed.status} (committed) against {fresh.status}"
    elif "differs" in statuses:
        verdict, why = "differs", ""
    elif "within tolerance" in statuses:
        verdict, why = "within tolerance", ""
    else:
        verdict, why = "identical", ""
    return RunComparison(committed, fresh, figures, verdict, why, code, parts)


def summary_line(comparisons: Sequence[RunComparison], what: str = "runs") -> str:
    """One line: how many of the runs reproduce their committed records, by verdict, the
    largest difference, and how many committed records were made by code that has changed
    since or do not say what made them. E.g. ``30 of 30 runs reproduce the committed records:
    identical``."""
    n = len(comparisons)
    if not n:
        return f"no {what} to compare with committed records"
    count = {v: sum(c.verdict == v for c in comparisons) for v in (
        "identical", "within tolerance", "differs", NOT_COMPARABLE, NOT_REPRODUCED)}
    same = count["identical"] + count["within tolerance"]
    shown = [f"{count[v]} {v}" for v in ("identical", "within tolerance") if count[v]]
    text = f"{same} of {n} {what} reproduce the committed records"
    if same == n and len(shown) == 1:
        text += f": {shown[0].split(' ', 1)[1]}"
    elif shown:
        text += f" ({', '.join(shown)})"
    differing = [c for c in comparisons if c.verdict == "differs"]
    if differing:
        worst = max(differing, key=lambda c: (c.largest.relative or 0.0) if c.largest else 0.0)
        text += f"; {len(differing)} differ"
        if worst.largest is not None:
            f = worst.largest
            text += (f" (largest relative difference: {f.name} of {worst.run_id}, "
                     f"{figure_text(f.committed)} committed, {figure_text(f.fresh)} here)")
    if count[NOT_COMPARABLE]:
        text += (f"; {count[NOT_COMPARABLE]} {NOT_COMPARABLE} (noise drawn on another kind "
                 "of device: comparable over seeds only, as reproduction.md does)")
    if count[NOT_REPRODUCED]:
        text += f"; {count[NOT_REPRODUCED]} {NOT_REPRODUCED} (the fresh run failed)"
    changed = sum(c.code == CODE_CHANGED for c in comparisons)
    unknown = sum(c.code == CODE_UNKNOWN for c in comparisons)
    if changed:
        text += (f"; {changed} of the committed records were made by training code that has "
                 "changed since")
    if unknown:
        text += (f"; {unknown} committed record(s) do not say which code made them (written "
                 "before records carried their provenance)")
    return text


def _setting_key(result: RunResult) -> str:
    """The run's config without its seed, and its backend: one setting over seeds."""
    config = {k: v for k, v in result.config.items() if k != "seed"}
    return json.dumps([config, result.backend], sort_keys=True)


def _mean_sd(values: Sequence[float]) -> tuple[float, float | None]:
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, None
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def over_seeds(comparisons: Iterable[RunComparison], figure: str = "metrics.accuracy"
               ) -> list[dict[str, Any]]:
    """Runs not comparable run by run, compared per setting and backend over their seeds:
    one row each with ``setting`` (labels), ``backend``, ``n`` (seeds), the ``committed`` and
    ``fresh`` means of ``figure``, their ``difference`` (fresh minus committed), a 95 % Welch
    interval of it (``low``, ``high``; None with ``why`` when a side has fewer than two seeds
    or no spread) and ``verdict`` (``consistent``: the interval holds 0; ``differs``; or
    ``cannot say``)."""
    from scipy import stats

    groups: dict[str, list[RunComparison]] = {}
    for c in comparisons:
        if c.verdict == NOT_COMPARABLE and c.fresh is not None:
            groups.setdefault(_setting_key(c.committed), []).append(c)
    rows = []
    for members in groups.values():
        first = members[0].committed
        a = [float(v) for c in members
             if isinstance(v := recorded_figures(c.committed).get(figure), float)]
        b = [float(v) for c in members
             if c.fresh is not None
             and isinstance(v := recorded_figures(c.fresh).get(figure), float)]
        row: dict[str, Any] = {"setting": " · ".join(first.labels.values()) or first.config_hash,
                               "backend": first.backend, "n": len(members), "figure": figure,
                               "committed": None, "fresh": None, "difference": None,
                               "low": None, "high": None, "verdict": "cannot say", "why": ""}
        if not a or not b:
            rows.append({**row, "why": f"{figure} not recorded"})
            continue
        (ma, sa), (mb, sb) = _mean_sd(a), _mean_sd(b)
        row.update(committed=ma, fresh=mb, difference=mb - ma)
        if sa is None or sb is None:
            row["why"] = "fewer than two seeds a side: no interval"
        elif sa == 0 and sb == 0:
            row["why"] = "no spread over seeds on either side"
        else:
            va, vb = sa ** 2 / len(a), sb ** 2 / len(b)
            df = (va + vb) ** 2 / ((va ** 2 / (len(a) - 1)) + (vb ** 2 / (len(b) - 1)))
            half = float(stats.t.ppf(0.975, df)) * math.sqrt(va + vb)
            row.update(low=mb - ma - half, high=mb - ma + half)
            row["verdict"] = "consistent" if row["low"] <= 0 <= row["high"] else "differs"
        rows.append(row)
    return rows


def _threads_text(result: RunResult) -> str:
    threads = ((result.provenance or {}).get("threads") or {}).get("in_effect")
    if threads is None:
        threads = (result.perf or {}).get("threads_in_effect")
    if threads is None:
        return "not recorded"
    if isinstance(threads, Mapping):
        return ", ".join(f"{k} {v}" for k, v in threads.items())
    return str(threads)


def _side(result: RunResult) -> dict[str, str]:
    """What produced one record, as text per aspect."""
    prov = result.provenance or {}
    cpu = prov.get("cpu") or {}
    isa = cpu.get("isa")
    versions = prov.get("packages") or {k: v for k, v in (result.versions or {}).items()
                                         if k not in ("python", "platform")}
    git = prov.get("git") or {}
    sources = prov.get("sources") or {}
    code = "not recorded"
    if sources:
        code = f"sources {str(sources.get('digest', ''))[:12]}"
        if git.get("commit"):
            code += f", commit {str(git['commit'])[:12]}"
        elif git.get("head"):
            code += (f", uncommitted changes to {len(git.get('modified') or [])} file(s) at "
                     f"commit {str(git['head'])[:12]}")
        else:
            code += f" ({git.get('note', 'no git')})"
    return {
        "machine": str(prov.get("platform") or (result.versions or {}).get("platform", "?")),
        "cpu": ("not recorded" if not cpu else f"{cpu.get('model', '?')}"
                + (f" ({', '.join(isa)})" if isa else " (instruction-set flags not known)")
                + f", {cpu.get('usable_cpus', '?')} usable CPU(s)"),
        "versions": ", ".join(f"{k} {v}" for k, v in sorted(versions.items())) or "-",
        "threads": _threads_text(result),
        "device": device_of(result) or "not recorded (CPU)",
        "code": code,
    }


def side_lines(label: str, results: Sequence[RunResult]) -> list[str]:
    """Markdown lines: what produced ``results`` (one side of a comparison), each aspect with
    its distinct values and how many records have each."""
    lines = [f"**{label}** ({len(results)} records):", ""]
    sides = [_side(r) for r in results]
    for aspect in ("machine", "cpu", "versions", "threads", "device", "code"):
        counts: dict[str, int] = {}
        for side in sides:
            counts[side[aspect]] = counts.get(side[aspect], 0) + 1
        shown = "; ".join(value if len(counts) == 1 else f"{value} ({n})"
                          for value, n in counts.items())
        lines.append(f"- {aspect}: {shown}")
    return [*lines, ""]


def committed_comparison(fresh: Iterable[RunResult], committed: Mapping[str, RunResult],
                         current_sources: Mapping[str, Any] | None = None
                         ) -> list[RunComparison]:
    """The comparisons of the fresh final records ``fresh`` that have a committed record
    (run id -> record, :func:`compare.records.committed_records`), in run-id order."""
    out = []
    for result in sorted(fresh, key=lambda r: r.run_id):
        if result.status in FINAL_STATUSES and result.run_id in committed:
            out.append(compare_run(committed[result.run_id], result, current_sources))
    return out


def read_committed(folders: Iterable[str | Path]) -> tuple[dict[str, RunResult], list[str]]:
    """Run id -> committed final record of the report folders ``folders`` (first folder wins,
    as :func:`compare.records.committed_records`), and one warning per folder whose records
    do not read (skipped: a comparison never stops a grid)."""
    from compare.records import evaluations_held
    from dpcore.errors import DpCompareError

    known: dict[str, RunResult] = {}
    warnings = []
    for folder in folders:
        try:
            for rid, record in _committed_of(Path(folder)).items():
                if rid not in known or evaluations_held(record) > evaluations_held(known[rid]):
                    known[rid] = record
        except DpCompareError as exc:
            warnings.append(f"{folder}: records not read, not compared ({exc})")
    return known, warnings


#: (records file, its modification time and size) -> its final records: a process that runs
#: several grids reads each committed records file once.
_READ_CACHE: dict[tuple[str, int, int], dict[str, RunResult]] = {}


def _committed_of(folder: Path) -> dict[str, RunResult]:
    from compare.records import RECORDS_FILE, RECORDS_FOLDER, committed_records

    path = folder / RECORDS_FOLDER / RECORDS_FILE
    try:
        stat = path.stat()
    except OSError:
        return {}
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    if key not in _READ_CACHE:
        _READ_CACHE[key] = committed_records([folder])
    return _READ_CACHE[key]
