"""What a report says besides its runs (:class:`ReportContext`): kept apart from
:mod:`compare.report` so that :mod:`compare.records` stores and reads it without importing
the report writer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["ReportContext"]


@dataclass(frozen=True)
class ReportContext:
    """What the header says: the command that made the report and the wall time it took."""

    command: str
    wall_seconds: float | None = None
    title: str = "dpcompare report"
    description: str = ""
    notes: str = ""
    published: tuple[dict[str, Any], ...] = ()
    #: When set, only these run ids are reported (``compare`` passes its grid's runs, so that
    #: stale runs of an earlier version of the grid in the same folder are left out).
    run_ids: frozenset[str] | None = None
    #: The grid's axes in the preset's order (see :func:`compare.grid.in_axis_order`); empty:
    #: the bundled preset's order when the runs name one, else as stored.
    axis_order: tuple[str, ...] = ()
    #: Run id -> the reported grid's labels of that run (see
    #: :func:`compare.grid.with_grid_labels`); None: the labels as stored.
    labels: Mapping[str, Mapping[str, str]] | None = None
    #: The grid whose montages the report shows (its folder,
    #: :func:`compare.montage_data.grid_montage_folder`); None: the grid that wrote the runs when
    #: they all come from one, else every grid's montages in the store.
    montage_grid: str | None = None
    #: Audit companion run id -> the run id of the grid's run it audits
    #: (:func:`compare.companions.companion_runs`); None: the grid has no companions.
    audit_companions: Mapping[str, str] | None = None
    #: Whether the grid asks for Grad-CAM faithfulness (``evaluation.faithfulness``). False:
    #: the faithfulness figures are left out, also those a record shared with another grid
    #: holds (that grid's evaluation, for some of the runs only).
    faithfulness: bool = True
    #: How the grid's hyper-parameters were selected: the preset's ``selection:`` block or
    #: list of blocks (:mod:`dpcore.tuning.selection`, checked by the grid); None: the grid
    #: says nothing.
    selection: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None
