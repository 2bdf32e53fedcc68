"""The privacy figures of the steps a run actually took (one rule for every reader).

A ``recipe: library`` run's own loader decides its steps and sampling rate, so its
RunResult records them, with their epsilons, under ``privacy.as_run``; a harmonised run takes
exactly the planned steps (``privacy.steps``) unless it stopped early
(``privacy.steps_completed``). Reports, tidy tables and the proved-epsilon check all read a
run's steps through :func:`as_run_privacy`, so they never disagree on what ran.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The figures :func:`as_run_privacy` returns.
AS_RUN_KEYS = ("steps", "sampling_rate", "steps_per_epoch", "epsilon_rdp", "epsilon_pld")


def as_run_privacy(privacy: Mapping[str, Any]) -> dict[str, Any]:
    """A run's privacy figures for the steps that ran, from its RunResult ``privacy`` entry.

    Each of :data:`AS_RUN_KEYS` is ``privacy.as_run``'s value where the run recorded one (a
    library recipe), else the planned one (``privacy[key]``); ``steps`` falls back to
    ``steps_completed`` (a run that stopped early) before the planned steps. ``None`` where
    the record has no figure (``steps_per_epoch`` is recorded under ``as_run`` only).
    """
    as_run = privacy.get("as_run") or {}
    out = {key: as_run.get(key) if as_run.get(key) is not None else privacy.get(key)
           for key in AS_RUN_KEYS}
    if as_run.get("steps") is None and privacy.get("steps_completed") is not None:
        out["steps"] = privacy["steps_completed"]
    out["steps_per_epoch"] = as_run.get("steps_per_epoch")
    return out


__all__ = ["AS_RUN_KEYS", "as_run_privacy"]
