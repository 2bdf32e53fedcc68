"""Labels that name what ran: the bench's harmonised step on a framework, or a library's own
recipe.

A ``recipe: harmonised`` run is the bench's one DP-SGD step (its sampler, per-example
clipping, divisor and accountant) computed on TensorFlow or on PyTorch: it is neither TF
Privacy's nor Opacus's recipe, so a table that set "(TF Privacy)" beside it would claim more
than what ran. A ``recipe: library`` run is the library as its tutorials run it (TF Privacy's
optimizer through ``model.fit``, Opacus's ``make_private``). Every report label of a run's
framework goes through :func:`what_ran`.
"""

from __future__ import annotations

from collections.abc import Iterable

#: RunResult backend -> the library name the papers print (the paper's rows, not our runs).
LIBRARY_OF = {"tf": "TF Privacy", "torch": "Opacus"}
#: RunResult backend -> the framework it computes on, as the harmonised labels name it.
FRAMEWORK_OF = {"tf": "TF", "torch": "torch"}
#: ``recipe`` of a library's own recipe (``compare.reporting.frames`` column ``recipe``).
LIBRARY_RECIPE = "library"


def what_ran(backend: str, recipe: str = "harmonised") -> str:
    """``"harmonised step, TF backend"`` / ``"harmonised step, torch backend"`` for the bench's
    step, ``"TF Privacy's own recipe"`` / ``"Opacus's own recipe"`` for ``recipe: library``."""
    if recipe == LIBRARY_RECIPE:
        return f"{LIBRARY_OF.get(backend, backend)}'s own recipe"
    return f"harmonised step, {FRAMEWORK_OF.get(backend, backend)} backend"


def difference_label(recipes: Iterable[str]) -> str:
    """What "second backend minus first" compares, given the recipes of the compared runs:
    ``"torch minus TF backend (the bench's harmonised step on each framework)"`` when every
    run is harmonised, ``"Opacus's own recipe minus TF Privacy's"`` when every run is a
    library recipe, and both named per setting otherwise."""
    kinds = {LIBRARY_RECIPE if r == LIBRARY_RECIPE else "harmonised" for r in recipes}
    if kinds == {LIBRARY_RECIPE}:
        return "Opacus's own recipe minus TF Privacy's own recipe"
    if kinds == {"harmonised"} or not kinds:
        return "torch minus TF backend (the bench's harmonised step on each framework)"
    return ("torch minus TF backend (per setting: the bench's harmonised step on each "
            "framework, or each library's own recipe where the setting says library)")


__all__ = ["FRAMEWORK_OF", "LIBRARY_OF", "LIBRARY_RECIPE", "difference_label", "what_ran"]
