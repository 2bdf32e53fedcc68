"""Did-you-mean suggestions for mistyped names (a leaf module: it imports nothing of dpcore,
so the config can use it without an import cycle)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(name: object, valid: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the closest of ``valid`` to ``name`` (case-insensitive,
    difflib's ratio >= 0.6), or ``""`` when none is close."""
    choices = list(valid)
    lowered = {choice.lower(): choice for choice in choices}
    text = str(name).lower()
    if text in lowered and lowered[text] != name:
        return f" (did you mean {lowered[text]!r}?)"
    close = difflib.get_close_matches(text, list(lowered), n=1, cutoff=0.6)
    return f" (did you mean {lowered[close[0]]!r}?)" if close else ""


__all__ = ["did_you_mean"]
