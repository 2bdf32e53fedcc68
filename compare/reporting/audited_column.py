"""The audited column of a grid with audit companion runs (:mod:`compare.companions`).

A companion is an extra run of a configuration with canaries; its one-run audit is the
configuration's *audited* epsilon. Before a report is written, :func:`companion_view` takes
the companions out of the runs reported (so no accuracy, time or attribution figure pools
them with the runs they audit) and hands each audited run's ``audit["one_run"]`` over to the
main run it audits (a copy: the records keep every run as it was stored), with

* ``companion``: the companion's run id, ``companion_seed`` its seed;
* ``companion_claimed`` / ``companion_proved``: the companion's own claimed and proved epsilon,
  which the violation test uses (its canaries can change what ran, e.g. input canaries add
  training images and so steps), or ``companion_status`` ("not yet run", or the status of a
  companion that did not finish) and no bound.

:mod:`compare.reporting.privacy_section` then shows claimed | proved | audited per
configuration and flags a violation (audited above proved, or above claimed where nothing is
proved) in every table, figure and the headline, as for a run that audits itself.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from compare.report_context import ReportContext
from dpcore.proved import figures_of_result
from dpcore.results import RunResult

#: ``companion_status`` of a configuration whose companion has no record yet (interim report).
NOT_YET_RUN = "not yet run"


@dataclass(frozen=True)
class CompanionView:
    """What a report shows: the main runs (with their companions' audits), the context with
    the companions' run ids taken out of the grid's runs, and the companions themselves."""

    results: list[RunResult]
    context: ReportContext
    companions: list[RunResult]


def companion_view(results: Sequence[RunResult], context: ReportContext) -> CompanionView:
    """Split ``results`` into main runs and audit companions (``context.audit_companions``)
    and give each main run its companion's audit (see the module docstring). Without
    companions in the context, ``results`` and ``context`` are returned unchanged."""
    mapping = dict(context.audit_companions or {})
    if not mapping:
        return CompanionView(list(results), context, [])
    by_id = {r.run_id: r for r in results}
    audits = {main: companion_audit(cid, by_id.get(cid)) for cid, main in mapping.items()}
    main = [r if r.run_id not in audits else
            dataclasses.replace(r, audit={**(r.audit or {}), "one_run": audits[r.run_id]})
            for r in results if r.run_id not in mapping]
    run_ids = None if context.run_ids is None else frozenset(context.run_ids - set(mapping))
    return CompanionView(main, dataclasses.replace(context, run_ids=run_ids),
                         [r for r in results if r.run_id in mapping])


def companion_audit(companion_id: str, companion: RunResult | None) -> dict[str, Any]:
    """The ``one_run`` entry a main run gets from its companion ``companion`` (None: no
    record): the companion's audit with its run id, seed and own claimed / proved epsilon,
    or its status when it has no audit."""
    one_run = (companion.audit or {}).get("one_run") if companion is not None else None
    if companion is None or companion.status != "finished" or not one_run:
        return {"companion": companion_id,
                "companion_status": NOT_YET_RUN if companion is None else companion.status}
    figures = figures_of_result(companion)
    return {**one_run, "companion": companion_id, "companion_seed": companion.seed,
            "companion_claimed": figures.get("epsilon_claimed"),
            "companion_proved": figures.get("epsilon_proved")}


def reference_figures(one_run: Mapping[str, Any], claimed: float | None,
                      proved: float | None) -> tuple[float | None, float | None]:
    """The (claimed, proved) epsilon an audit is tested against: a companion's own, else the
    run's (``claimed``, ``proved``)."""
    if "companion" in one_run:
        return one_run.get("companion_claimed"), one_run.get("companion_proved")
    return claimed, proved


#: Text run-row columns :func:`companion_column` adds (``audit_companion_seed`` is numeric).
COMPANION_COLUMNS = ("audit_companion", "audit_companion_status")


def companion_column(one_run: Mapping[str, Any]) -> dict[str, Any]:
    """The run-row columns of a run audited by a companion: ``audit_companion`` (its run id),
    ``audit_companion_seed`` and ``audit_companion_status`` ("" when it audited, else "not
    yet run" or the status of a companion that did not finish); empty for other runs, so
    that the reports of grids without companions keep their columns."""
    if "companion" not in one_run:
        return {}
    return {"audit_companion": str(one_run["companion"]),
            "audit_companion_status": str(one_run.get("companion_status") or ""),
            "audit_companion_seed": one_run.get("companion_seed")}


def audited_cell(group: pd.DataFrame) -> Any:
    """The ``audited (max over seeds)`` cell of one (setting, backend): the largest audited
    bound over its seeds, else "not yet run" when its companion has no record (the
    companion's status when it did not finish), else NaN."""
    audited = group["epsilon_audited"].astype(float)
    if audited.notna().any():
        return audited.max()
    if "audit_companion_status" in group:
        status = group["audit_companion_status"].dropna().astype(str)
        status = status[status != ""]
        if not status.empty:
            return status.iloc[0]
    return math.nan


def companion_note(row: pd.Series) -> str:
    """" (companion run, seed S)" after the audit of a row audited by a companion, else ""."""
    companion = row.get("audit_companion")
    if not isinstance(companion, str) or not companion:
        return ""
    seed = row.get("audit_companion_seed")
    return " (companion run" + ("" if pd.isna(seed) else f", seed {int(seed)}") + ")"


def companions_sentence(view: CompanionView) -> list[str]:
    """The privacy section's lines on the companions: how many the grid has, how many are
    stored, and what they are; empty without companions."""
    mapping = view.context.audit_companions or {}
    if not mapping:
        return []
    stored = [r for r in view.companions if r.status == "finished"]
    kinds = sorted({str(((r.audit or {}).get("one_run") or {}).get("kind", "?"))
                    for r in stored})
    seeds = sorted({int(r.seed) for r in view.companions})
    return ["Audited figures come from **audit companion runs**: one extra run per "
            "configuration" + (f" (seed {', '.join(map(str, seeds))})" if seeds else "")
            + ", the same config with "
            "canaries (gradient canaries in the shared harmonised step, mislabelled input "
            "images for the library recipes), kept apart from the runs above so that they "
            "change no other figure; a violation is tested against the companion's own "
            "claimed and proved epsilon; a configuration none of whose runs is stored has no "
            f"row yet. {len(stored)} of the grid's {len(mapping)} companion runs are stored"
            + (f" ({', '.join(kinds)} canaries)" if stored else "")
            + (f"; the others read '{NOT_YET_RUN}'." if len(stored) < len(mapping) else "."),
            ""]


__all__ = ["COMPANION_COLUMNS", "NOT_YET_RUN", "CompanionView", "audited_cell",
           "companion_audit", "companion_column", "companion_note", "companion_view",
           "companions_sentence", "reference_figures"]
