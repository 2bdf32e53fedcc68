"""The report's "Privacy claims" section: settings whose epsilon is claimed, not proved.

A RunResult records, in ``recipe.privacy_claim``, whether the shared accountant's epsilon is a
proved bound for what ran (:func:`dpcore.recipes.privacy_claim`; a record without it is not
listed). A report lists each (setting, backend) whose claim is "claimed, not proved" with the
reasons, so that nothing is hidden; reports of the gap-attribution kind show the same in their table
(:mod:`compare.reporting.attribution_section`) instead.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from compare.grid import setting_label
from compare.reporting.tables import markdown_table
from dpcore.recipes import CLAIMED_NOT_PROVED
from dpcore.results import RunResult


def claims_frame(results: Sequence[RunResult]) -> pd.DataFrame:
    """One row per (setting, backend) of finished runs whose claim is not proved: setting,
    backend, recipe, trainer, reasons (joined by " / ")."""
    rows: dict[tuple[str, str], dict[str, str]] = {}
    for r in results:
        claim = (r.recipe or {}).get("privacy_claim") or {}
        if r.status != "finished" or claim.get("status") != CLAIMED_NOT_PROVED:
            continue
        setting = setting_label(r.labels) if r.labels else r.config_hash
        rows.setdefault((setting, r.backend), {
            "setting": setting, "backend": r.backend,
            "recipe": str((r.recipe or {}).get("name", "")),
            "trainer": str((r.recipe or {}).get("trainer", "")),
            "reasons": " / ".join(str(x) for x in claim.get("reasons") or ())})
    return pd.DataFrame(list(rows.values()),
                        columns=["setting", "backend", "recipe", "trainer", "reasons"])


def claims_section(results: Sequence[RunResult]) -> list[str]:
    """Markdown lines (empty when every DP-SGD setting's epsilon is proved)."""
    frame = claims_frame(results)
    if frame.empty:
        return []
    return ["## Privacy claims", "",
            f"These settings report the shared accountant's epsilon, but it is "
            f"**{CLAIMED_NOT_PROVED}** for what ran (the reasons say why); every other DP-SGD "
            "setting's epsilon is a proved bound.", "", markdown_table(frame), ""]


__all__ = ["claims_frame", "claims_section"]
