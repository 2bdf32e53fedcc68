"""The report's privacy figures: claimed | proved | audited epsilon, side by side, per run.

*Claimed* and *proved* come from :func:`dpcore.proved.figures_of_result` (stored in records
written since issue 30, recomputed from the config and privacy plan of older ones, so a report
rebuilt from old records shows them too). *Audited* is the one-run audit's 95 % lower bound
(``audit.one_run``), where the run audited. An audited bound above the proved epsilon (above
the claim where nothing is proved) is a **privacy violation**; a run with ``factors.fault`` is
**deliberately broken**. Both are flagged in every table and figure through the setting's
label (:func:`flag_settings`: every run of the setting, so backends stay paired), in the
headline (:func:`privacy_sentence`) and in this section's table.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from compare.reporting.tables import fmt, markdown_table
from dpcore.proved import figures_of_result, is_violation
from dpcore.results import RunResult

VIOLATION_FLAG = "PRIVACY VIOLATION"
BROKEN_FLAG = "deliberately broken"

#: Columns of :func:`privacy_columns` that hold text.
PRIVACY_TEXT_COLUMNS = ("epsilon_proved_reason", "epsilon_proved_relation", "fault",
                        "audit_kind", "privacy_violation")


def privacy_columns(result: RunResult) -> dict[str, Any]:
    """The run-row columns of one RunResult: ``epsilon_claimed``, ``epsilon_proved`` (NaN when
    none is proved), its reason and relation, ``epsilon_audited`` (NaN without an audit),
    ``audit_kind``/``audit_m``/``audit_k``/``audit_correct``, ``fault`` ("" when honest) and
    ``privacy_violation`` ("yes"/"")."""
    figures = figures_of_result(result)
    one_run = (result.audit or {}).get("one_run") or {}
    audited = one_run.get("epsilon_lower_bound")
    fault = str((result.config.get("factors") or {}).get("fault", "none"))
    claimed, proved = figures.get("epsilon_claimed"), figures.get("epsilon_proved")
    return {
        "epsilon_claimed": math.nan if claimed is None else float(claimed),
        "epsilon_proved": math.nan if proved is None else float(proved),
        "epsilon_proved_reason": str(figures.get("epsilon_proved_reason") or ""),
        "epsilon_proved_relation": str(figures.get("epsilon_proved_relation") or ""),
        "epsilon_audited": math.nan if audited is None else float(audited),
        "audit_kind": str(one_run.get("kind", "")),
        "audit_m": one_run.get("m"),
        "audit_k": one_run.get("k"),
        "audit_correct": one_run.get("correct"),
        "fault": "" if fault == "none" else fault,
        "privacy_violation": "yes" if is_violation(audited, claimed, proved) else "",
    }


def flag_settings(frame: pd.DataFrame) -> pd.DataFrame:
    """Append ``[deliberately broken]`` / ``[PRIVACY VIOLATION]`` to the ``setting`` label of
    every run of a setting with a faulty run / an audited violation (all its backends and
    seeds, so tables and figures keep them together)."""
    if frame.empty or "setting" not in frame:
        return frame
    frame = frame.copy()
    broken = set(frame.loc[frame["fault"].astype(str) != "", "setting"])
    violated = set(frame.loc[frame["privacy_violation"] == "yes", "setting"])

    def label(setting: str) -> str:
        tags = ([BROKEN_FLAG] if setting in broken else []) + (
            [VIOLATION_FLAG] if setting in violated else [])
        return setting + "".join(f" [{t}]" for t in tags)

    frame["setting"] = frame["setting"].map(label)
    return frame


def privacy_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (setting, backend) of finished runs: claimed and proved epsilon (they do not depend
    on the seed), the largest audited bound over seeds with its audit, violations, fault."""
    done = frame[frame["status"] == "finished"]
    rows = []
    for (setting, backend), group in done.groupby(["setting", "backend"], sort=False):
        audited = group["epsilon_audited"].astype(float)
        best = group.loc[audited.idxmax()] if audited.notna().any() else None
        rows.append({
            "setting": setting, "backend": backend, "seeds": len(group),
            "claimed": group["epsilon_claimed"].iloc[0],
            "proved": group["epsilon_proved"].iloc[0],
            "audited (max)": audited.max() if best is not None else math.nan,
            "audit (kind, correct/k of m)": "" if best is None else (
                f"{best['audit_kind']}, {fmt(best['audit_correct'])}/{fmt(best['audit_k'])} of "
                f"{fmt(best['audit_m'])}"),
            "violation": (f"{VIOLATION_FLAG} ({int((group['privacy_violation'] == 'yes').sum())}"
                          f" of {len(group)} runs)"
                          if (group["privacy_violation"] == "yes").any() else ""),
            "fault": group["fault"].iloc[0],
            "proved: relation": group["epsilon_proved_relation"].iloc[0],
            "proved: basis or why none": group["epsilon_proved_reason"].iloc[0],
        })
    return pd.DataFrame(rows)


def privacy_section(frame: pd.DataFrame, out: Path) -> list[str]:
    """Markdown lines of the section (writes ``privacy.csv``); empty without private or
    audited runs (a non-private run shows here when it audited: its audit's ceiling)."""
    dp = frame[(frame["mechanism"].astype(str) != "none") | frame["epsilon_audited"].notna()]
    table = privacy_table(dp)
    if table.empty:
        return []
    table.to_csv(out / "privacy.csv", index=False)
    lines = ["## Privacy: claimed, proved, audited", "",
             "*Claimed*: the shared accountant's epsilon for the setting (local DP: the "
             "per-image epsilon). *Proved*: the tightest bound known for what actually ran "
             "(dpcore/proved.py; `–` where none is known, with the reason). *Audited*: the "
             "one-run audit's 95% lower bound (Steinke, Nasr, Jagielski 2023) from canaries "
             "in the same run (max over seeds), where the run audited. An audited bound above "
             "the proved epsilon (the claimed one where nothing is proved) is a privacy "
             "violation; `fault` marks a deliberately broken step (an audit check).", "",
             markdown_table(table, ["setting", "backend", "seeds", "claimed", "proved",
                                    "audited (max)", "audit (kind, correct/k of m)",
                                    "violation", "fault"]), ""]
    reasons = table[["setting", "backend", "proved: relation", "proved: basis or why none"]]
    lines += ["Basis of each proved epsilon (neighbouring relation; how it was bounded, or why "
              "no bound is known):", "", markdown_table(reasons), ""]
    return lines


def privacy_sentence(frame: pd.DataFrame) -> str | None:
    """The headline's privacy sentence: the proved epsilon range of the DP-SGD runs, how many
    have no proved bound, the audits and every violation; None without DP-SGD runs."""
    done = frame[(frame["status"] == "finished")
                 & frame["mechanism"].astype(str).str.startswith("dpsgd")]
    if done.empty:
        return None
    proved = done["epsilon_proved"].astype(float)
    parts = []
    if proved.notna().any():
        low, high = proved.min(), proved.max()
        parts.append(f"Proved epsilon of the DP-SGD runs: {fmt(low, 3)}" +
                     (f" to {fmt(high, 3)}" if high != low else ""))
    else:
        parts.append("No DP-SGD run has a proved epsilon")
    unproved = sorted(set(done.loc[proved.isna(), "setting"]))
    if unproved:
        parts.append(f"{len(unproved)} setting{'s' if len(unproved) != 1 else ''} claim an "
                     "epsilon no bound proves")
    gap = done[(proved > done["epsilon_claimed"].astype(float) * 1.001)]
    if not gap.empty:
        parts.append(f"{gap['setting'].nunique()} setting(s) prove only more than they claim")
    audited = done[done["epsilon_audited"].notna()]
    if not audited.empty:
        bad = audited[audited["privacy_violation"] == "yes"]
        text = (f"{len(audited)} run{'s' if len(audited) != 1 else ''} audited (one run): "
                f"{len(bad)} {VIOLATION_FLAG}{'S' if len(bad) != 1 else ''}")
        if not bad.empty:
            text += (f" (audited above the proved or claimed epsilon, in "
                     f"{bad['setting'].nunique()} setting(s) on "
                     f"{', '.join(sorted(set(bad['backend'])))}; flagged in every table)")
        parts.append(text)
    broken = done[done["fault"].astype(str) != ""]
    if not broken.empty:
        faults = ", ".join(sorted(set(broken["fault"].astype(str))))
        caught = int((broken["privacy_violation"] == "yes").sum())
        parts.append(f"{len(broken)} of these runs are {BROKEN_FLAG} on purpose to test the "
                     f"audit ({faults}); it caught {caught} of them")
    return "; ".join(parts) + "."


__all__ = ["BROKEN_FLAG", "PRIVACY_TEXT_COLUMNS", "VIOLATION_FLAG", "flag_settings",
           "privacy_columns", "privacy_section", "privacy_sentence", "privacy_table"]
