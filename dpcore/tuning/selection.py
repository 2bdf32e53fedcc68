"""The facts of how a preset's hyper-parameters were selected (its ``selection:`` block).

Two kinds, checked by :func:`parse_selection`:

* not accounted: chosen on exact validation scores of the private training data::

      selection:
        accounted: false
        candidates: 11
        scored_on: "exact validation AUC of 20 % of the private training split"
        table: reports/tuning/pneumoniamnist.md

  (``scored_on`` may also name a selection made by others, e.g. a paper's authors' on the same
  data; ``table`` is optional, and so is ``candidates`` when the number is not known.)

* accounted under Papernot & Steinke 2022 (what ``benchmarks/tuning_sweep.py --protocol``
  writes)::

      selection:
        accounted: true
        candidates: 11
        law: {kind: truncated-negative-binomial, eta: 1, gamma: 0.1}
        score: {metric: accuracy, noise_std: 0.01, sensitivity: 0.0010616}
        repetitions: [{sampling_rate: 0.068, steps: 148, noise_multiplier: 1.9}, ...]
        delta: 1.0e-5
        epsilon: 1.0
        table: reports/tuning/pneumoniamnist-protocol.md

  ``repetitions`` lists each distinct candidate's DP-SGD event (Gaussian); ``epsilon`` is the
  selection's, recomputed from the rest and checked to 1e-3 relative.

The block describes how the grid's settings were found; it is read by the grid and carried
into the report's context, never into a run's config (so no config hash moves).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from dp_accounting import dp_event as dpe

from dpcore.accounting import dpsgd_event
from dpcore.errors import ConfigError
from dpcore.tuning.bound import (
    CandidateSteps,
    ScoreMechanism,
    candidate_events,
    epsilon_of_curve,
    repetition_curve,
    selection_curve,
    with_final_run,
)
from dpcore.tuning.laws import RepetitionLaw

PROTOCOL_CITATION = "Papernot & Steinke 2022"
_COMMON_KEYS = {"accounted", "candidates", "table", "scored_on", "settings"}
_ACCOUNTED_KEYS = _COMMON_KEYS | {"law", "score", "repetitions", "delta", "epsilon"}


@dataclass(frozen=True)
class Selection:
    """A parsed ``selection:`` block (see the module docstring).

    Attributes:
        accounted: whether the selection ran under the protocol with a proved cost.
        candidates: the number of candidates (None: not known, an unaccounted selection made
            by others, e.g. a paper's authors).
        scored_on: what the candidates were scored on (shown in the report).
        settings: the grid's settings (labels joined as in the report, e.g. ``"eps=1"``)
            whose hyper-parameters this selection chose; empty: every setting.
        table: the committed table of the selection, relative to the repository.
        law, score, repetitions, delta, epsilon: the protocol's facts (accounted only).
    """

    accounted: bool
    candidates: int | None
    scored_on: str = ""
    table: str = ""
    settings: tuple[str, ...] = ()
    law: RepetitionLaw | None = None
    score: ScoreMechanism | None = None
    repetitions: tuple[tuple[CandidateSteps, float], ...] = ()
    delta: float | None = None
    epsilon: float | None = None

    def curve(self) -> np.ndarray:
        """The selection's RDP curve (accounted only)."""
        assert self.accounted and self.law is not None and self.score is not None
        events = candidate_events([c for c, _ in self.repetitions],
                                  [nm for _, nm in self.repetitions], self.score)
        return selection_curve(repetition_curve(events), self.law)

    def total_with(self, final_event: dpe.DpEvent, delta: float) -> float:
        """Epsilon at ``delta`` of this selection followed by a final run of ``final_event``
        (accounted only)."""
        return with_final_run(self.curve(), final_event, delta)

    def to_dict(self) -> dict[str, Any]:
        raw: dict[str, Any] = {"accounted": self.accounted}
        if self.candidates is not None:
            raw["candidates"] = self.candidates
        if self.scored_on:
            raw["scored_on"] = self.scored_on
        if self.table:
            raw["table"] = self.table
        if self.settings:
            raw["settings"] = list(self.settings)
        if self.accounted:
            assert self.law is not None and self.score is not None
            raw.update({
                "law": self.law.to_dict(), "score": self.score.to_dict(),
                "repetitions": [{"sampling_rate": c.sampling_rate, "steps": c.steps,
                                 "noise_multiplier": nm} for c, nm in self.repetitions],
                "delta": self.delta, "epsilon": self.epsilon})
        return raw


def _number(raw: Mapping[str, Any], key: str, where: str) -> float:
    try:
        value = float(raw[key])
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: '{key}' must be a number, got {raw.get(key)!r}") from exc
    if not math.isfinite(value):
        raise ConfigError(f"{where}: '{key}' must be finite, got {value!r}")
    return value


def parse_selection(raw: Any, where: str = "selection") -> Selection:
    """Check a ``selection:`` block and return it parsed.

    Raises:
        ConfigError: one line naming the bad key or value and what is valid (an unknown key,
            a missing one, a law or score that is not valid, or a recorded ``epsilon`` that
            its facts do not give).
    """
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where} must be a mapping, got {raw!r}")
    accounted = raw.get("accounted")
    if not isinstance(accounted, bool):
        raise ConfigError(f"{where}: 'accounted' must be true or false, got {accounted!r}")
    allowed = _ACCOUNTED_KEYS if accounted else _COMMON_KEYS
    unknown = set(raw) - allowed
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(map(str, unknown))}; valid: "
                          f"{', '.join(sorted(allowed))}")
    candidates = raw.get("candidates")
    if not (candidates is None and not accounted) and (
            not isinstance(candidates, int) or isinstance(candidates, bool) or candidates < 1):
        raise ConfigError(f"{where}: 'candidates' must be an integer >= 1"
                          f"{'' if accounted else ' (or left out when not known)'}, got "
                          f"{candidates!r}")
    settings = raw.get("settings", [])
    if not isinstance(settings, list) or not all(isinstance(x, str) and x for x in settings):
        raise ConfigError(f"{where}: 'settings' must be a list of setting labels (e.g. "
                          f"[\"eps=1\"]), got {settings!r}")
    common = {"candidates": candidates, "scored_on": str(raw.get("scored_on") or ""),
              "table": str(raw.get("table") or ""), "settings": tuple(settings)}
    if not accounted:
        if not common["scored_on"]:
            raise ConfigError(f"{where}: an unaccounted selection needs 'scored_on' (what the "
                              "candidates were scored on)")
        return Selection(accounted=False, **common)
    missing = sorted(_ACCOUNTED_KEYS - _COMMON_KEYS - set(raw))
    if missing:
        raise ConfigError(f"{where}: an accounted selection needs {', '.join(missing)}")
    law = RepetitionLaw.from_dict(raw["law"])
    score_raw = raw["score"]
    if not isinstance(score_raw, Mapping) or set(score_raw) != {"metric", "noise_std",
                                                                "sensitivity"}:
        raise ConfigError(f"{where}: 'score' must map metric, noise_std and sensitivity, got "
                          f"{score_raw!r}")
    score = ScoreMechanism(str(score_raw["metric"]),
                           _number(score_raw, "noise_std", f"{where}.score"),
                           _number(score_raw, "sensitivity", f"{where}.score"))
    reps_raw = raw["repetitions"]
    if not isinstance(reps_raw, list) or not reps_raw:
        raise ConfigError(f"{where}: 'repetitions' must be a non-empty list of {{sampling_rate, "
                          "steps, noise_multiplier}}")
    repetitions = []
    for i, rep in enumerate(reps_raw):
        at = f"{where}.repetitions[{i}]"
        if not isinstance(rep, Mapping) or set(rep) != {"sampling_rate", "steps",
                                                        "noise_multiplier"}:
            raise ConfigError(f"{at} must map sampling_rate, steps and noise_multiplier, got "
                              f"{rep!r}")
        steps = rep["steps"]
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
            raise ConfigError(f"{at}: 'steps' must be an integer >= 1, got {steps!r}")
        q, nm = _number(rep, "sampling_rate", at), _number(rep, "noise_multiplier", at)
        dpsgd_event("dpsgd-gaussian", nm, q, steps)  # checks q and the multiplier
        if nm <= 0:
            raise ConfigError(f"{at}: 'noise_multiplier' must be > 0, got {nm!r}")
        repetitions.append((CandidateSteps(q, steps), nm))
    delta = _number(raw, "delta", where)
    if not 0 < delta < 1:
        raise ConfigError(f"{where}: 'delta' must be in (0, 1), got {delta!r}")
    selection = Selection(accounted=True, law=law, score=score, repetitions=tuple(repetitions),
                          delta=delta, epsilon=_number(raw, "epsilon", where), **common)
    computed = epsilon_of_curve(selection.curve(), delta)
    assert selection.epsilon is not None
    if not math.isclose(computed, selection.epsilon, rel_tol=1e-3):
        raise ConfigError(f"{where}: 'epsilon' {selection.epsilon:g} is not what its facts "
                          f"give ({computed:.6g} by {PROTOCOL_CITATION}); valid: {computed:.6g}")
    return selection


def parse_selections(raw: Any, settings: Sequence[str] | None = None,
                     where: str = "selection") -> tuple[Selection, ...]:
    """A ``selection:`` value: one block, or a list of blocks each naming the ``settings`` it
    chose for. ``settings``: the grid's setting labels, when known: every named one must be
    among them, and no setting may be claimed by two blocks.

    Raises:
        ConfigError: a bad block (:func:`parse_selection`), an unknown or twice-claimed
            setting, or a list of several blocks one of which names no setting.
    """
    blocks = raw if isinstance(raw, list) else [raw]
    if not blocks:
        raise ConfigError(f"{where} must be a block or a non-empty list of blocks")
    parsed = tuple(parse_selection(b, f"{where}[{i}]" if isinstance(raw, list) else where)
                   for i, b in enumerate(blocks))
    if len(parsed) > 1 and any(not p.settings for p in parsed):
        raise ConfigError(f"{where}: with several blocks, each must name its 'settings'")
    claimed = [name for p in parsed for name in p.settings]
    twice = sorted({name for name in claimed if claimed.count(name) > 1})
    if twice:
        raise ConfigError(f"{where}: settings {twice} are named by more than one block")
    if settings is not None:
        unknown = sorted(set(claimed) - set(settings))
        if unknown:
            raise ConfigError(f"{where}: settings {unknown} are not in the grid; valid: "
                              f"{', '.join(dict.fromkeys(settings))}")
    return parsed


def selection_for(selections: Sequence[Selection], setting: str) -> Selection | None:
    """The block that chose ``setting``'s hyper-parameters: the one naming it, else one that
    names no setting; None when none does."""
    for selection in selections:
        if setting in selection.settings:
            return selection
    return next((s for s in selections if not s.settings), None)


__all__ = ["PROTOCOL_CITATION", "Selection", "parse_selection", "parse_selections",
           "selection_for"]
