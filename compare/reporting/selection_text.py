"""What a report says of how its grid's hyper-parameters were selected (the preset's
``selection:`` block, :mod:`dpcore.tuning.selection`, carried in the report's context).

* Accounted (Papernot & Steinke 2022): per DP-SGD setting, the final run's epsilon and the
  epsilon including the selection (the selection's RDP curve composed with the final run's,
  converted at the run's delta), e.g. "eps=1: epsilon 1 for the final run; 2.31 including the
  selection of its hyper-parameters (Papernot & Steinke 2022, truncated negative binomial,
  eta=1, E[K]=10)".
* Not accounted: the epsilon including the selection is unbounded (a choice made on the
  private data without a DP mechanism, e.g. the best exact validation score, has no finite
  epsilon: one example can flip it), the final runs' epsilons leave the selection out, and the
  report says on what the candidates were scored and among how many.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from compare.grid import setting_label
from dpcore.accounting import dpsgd_event
from dpcore.errors import ConfigError
from dpcore.mechanisms import noises_gradients
from dpcore.results import RunResult
from dpcore.tuning import PROTOCOL_CITATION, Selection, parse_selections, selection_for


def _law_text(selection: Selection) -> str:
    law = selection.law
    assert law is not None
    if law.kind == "poisson":
        return f"{PROTOCOL_CITATION}, Poisson, E[K]={law.mean:.3g}"
    return f"{PROTOCOL_CITATION}, truncated negative binomial, eta={law.eta:g}, E[K]={law.mean:.3g}"


def final_run_totals(selections: Sequence[Selection], results: Sequence[RunResult]
                     ) -> list[tuple[str, Selection, float | None, float | None]]:
    """Per DP-SGD setting (in report order) whose selection is accounted: (setting, its
    selection, the final run's RDP epsilon, the epsilon including the selection); None where
    the run's event has no RDP bound."""
    rows: dict[str, tuple[str, Selection, float | None, float | None]] = {}
    for result in results:
        privacy = result.privacy or {}
        mechanism = str(privacy.get("mechanism", ""))
        if result.status != "finished" or not noises_gradients(mechanism):
            continue
        setting = setting_label(result.labels) if result.labels else result.config_hash
        selection = selection_for(selections, setting)
        if setting in rows or selection is None or not selection.accounted:
            continue
        own = privacy.get("epsilon_rdp")
        total: float | None = None
        try:
            event = dpsgd_event(mechanism, float(privacy["noise_multiplier"]),
                                float(privacy["sampling_rate"]), int(privacy["steps"]))
            total = selection.total_with(event, float(privacy["delta"]))
        except (KeyError, TypeError, ValueError, ConfigError):
            total = None  # an event RDP cannot bound (Laplace) or an incomplete record
        rows[setting] = (setting, selection, None if own is None else float(own), total)
    return list(rows.values())


def _unaccounted(selection: Selection) -> str:
    table = f" ({selection.table})" if selection.table else ""
    among = "" if selection.candidates is None else f" among {selection.candidates} candidates"
    which = (f"of {', '.join(repr(x) for x in selection.settings)}"
             if selection.settings else "of these hyper-parameters")
    return (f"Epsilon including the selection {which}: unbounded. The selection is not "
            f"accounted: chosen on {selection.scored_on}{among}{table}, and a choice made on "
            f"the private data without a DP mechanism has no finite epsilon (one example can "
            f"change it); every epsilon in this report is the final run's alone.")


def _accounted(selection: Selection,
               rows: Sequence[tuple[str, Selection, float | None, float | None]]) -> str:
    parts = []
    for setting, _, own, total in rows:
        own_text = "–" if own is None else f"{own:.3g}"
        total_text = ("not bounded (no RDP bound for this mechanism)" if total is None
                      else f"{total:.3g}")
        parts.append(f"{setting}: epsilon {own_text} for the final run; {total_text} "
                     "including the selection of its hyper-parameters")
    assert selection.epsilon is not None
    table = f"; {selection.table}" if selection.table else ""
    head = "; ".join(parts) if parts else "No DP-SGD run to set beside the selection"
    return (f"{head} ({_law_text(selection)}: {selection.candidates} candidates scored on "
            f"{selection.scored_on}; the selection alone costs epsilon "
            f"{selection.epsilon:.3g} at delta {selection.delta:g}{table}).")


def selection_sentence(raw: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None,
                       results: Sequence[RunResult]) -> str | None:
    """The headline's sentences on the selection of the hyper-parameters (one per block);
    None when the report has no ``selection`` in its context."""
    if raw is None:
        return None
    selections = parse_selections(raw)
    totals = final_run_totals(selections, results)
    texts = [_accounted(s, [row for row in totals if row[1] is s]) if s.accounted
             else _unaccounted(s) for s in selections]
    return " ".join(texts)


def selection_summary(raw: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None,
                      results: Sequence[RunResult]) -> str | None:
    """A short phrase for the README's list of reports: per accounted DP-SGD setting, the
    epsilon including the selection, and which selections are not accounted; None without a
    ``selection``."""
    if raw is None:
        return None
    selections = parse_selections(raw)
    totals = final_run_totals(selections, results)
    ordered = sorted(totals, key=lambda row: (row[3] is None, row[3] or 0.0))  # small first
    parts = [f"{setting} {'not bounded' if total is None else f'{total:.3g}'}"
             for setting, _, _, total in ordered]
    phrases = []
    if parts:
        phrases.append(f"epsilon including the hyper-parameter selection ({PROTOCOL_CITATION}): "
                       + ", ".join(parts))
    unaccounted = [s for s in selections if not s.accounted]
    if unaccounted:
        named = [repr(x) for s in unaccounted for x in s.settings]
        which = f" for {', '.join(named)}" if named and len(unaccounted) < len(selections) else ""
        phrases.append(f"epsilon including the hyper-parameter selection unbounded{which} (not "
                       "accounted; the epsilons are the final runs' alone)")
    return "; ".join(phrases) or None


def selection_lines(raw: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None,
                    results: Sequence[RunResult]) -> list[str]:
    """The privacy section's paragraph on the selection (nothing without one)."""
    sentence = selection_sentence(raw, results)
    if sentence is None:
        return []
    return ["### Selection of the hyper-parameters", "", sentence, ""]


__all__ = ["final_run_totals", "selection_lines", "selection_sentence", "selection_summary"]
