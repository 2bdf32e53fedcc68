"""Every figure a run record holds, taken generically, and how two records' figures compare.

A record's figures are the numbers under its ``metrics``, ``privacy``, ``faithfulness`` and
``audit`` entries (:data:`FIGURE_SECTIONS`): accuracy, AUC, loss, per-class figures, every
epsilon, the faithfulness figures and curves, the audit's figures, and whatever a later
version records there (per-example logits, how a metric was scored...), with no list of names
to keep up to date. :func:`recorded_figures` flattens them to dotted names
(``metrics.per_class[3].auc``); a list of numbers (a curve, per-example logits) is one figure,
compared element by element. Text (notes, method descriptions) is not a figure; a boolean
is (``audit.suspected_privacy_bug``); a null is NaN (an epsilon that is infinite or not
computed; a record stores NaN and infinities as null, so an in-memory infinity is NaN here
too), equal to NaN on the other side.

Timing, memory and the performance record are not figures: they measure the machine's load,
not the result.

**Tolerance.** :func:`compare_figures` calls two values *identical* when they are equal bit
for bit (NaN on both sides included), and *within tolerance* when
``|fresh - committed| <= ATOL + RTOL * max(|fresh|, |committed|)``. RTOL (1e-6) and ATOL
(1e-9) allow the rounding of float32 arithmetic (7 significant digits) in an evaluation of
the same weights, no more. A DP-SGD run amplifies any float-level difference in its steps
into another model (a noise draw scaled by a slightly different clip factor moves the
weights, and the next batches' gradients with them). Measured on this project's 2-core
machine (``reports/reproduce-demo``, 4 demo runs): the same code, versions and threads in
another process give bit-identical records (every figure of the 4 runs), while one intra-op
thread against two gives another model for each of the 4 runs (its test loss moves by 0.03 %
to 0.4 %), and today's code against the committed demo records moved 3 of the 4 (test accuracy
by up to 0.2 points). Nothing falls between bit-identical and another model, so a difference
beyond the tolerance means another trained model, not rounding, and the run *differs*.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dpcore.results import RunResult

__all__ = [
    "ATOL", "FIGURE_SECTIONS", "HEADLINE_FIGURES", "RTOL", "FigureDifference",
    "compare_figures", "figure_text", "recorded_figures",
]

#: The entries of a RunResult whose numbers are figures of the run.
FIGURE_SECTIONS: tuple[str, ...] = ("metrics", "privacy", "faithfulness", "audit")
#: Relative tolerance of "within tolerance" (float32 rounding of one evaluation).
RTOL = 1e-6
#: Absolute tolerance of "within tolerance" (for figures at or near 0).
ATOL = 1e-9
#: Figures a reproduction table shows for every run (when recorded), in this order.
HEADLINE_FIGURES: tuple[str, ...] = ("metrics.accuracy", "metrics.auc", "metrics.loss",
                                     "privacy.epsilon_rdp")

#: A figure's value: a number (NaN for null) or a tuple of numbers (a numeric list).
Value = float | tuple[float, ...]


def _number(value: Any) -> float | None:
    """``value`` as a float (bool as 0/1; None, NaN and infinities as NaN, as a record stores
    them: null), or None when it is no number."""
    if value is None:
        return math.nan
    if isinstance(value, bool | int | float):
        return float(value) if math.isfinite(value) else math.nan
    return None


def _numbers(values: Sequence[Any]) -> tuple[float, ...] | None:
    """A (nested) list of numbers flattened to a tuple, or None when it holds anything else."""
    out: list[float] = []
    for value in values:
        if isinstance(value, list | tuple):
            inner = _numbers(value)
            if inner is None:
                return None
            out.extend(inner)
        else:
            number = _number(value)
            if number is None:
                return None
            out.append(number)
    return tuple(out)


def _flatten(value: Any, name: str, out: dict[str, Value]) -> None:
    if isinstance(value, Mapping):
        for key, inner in value.items():
            _flatten(inner, f"{name}.{key}", out)
    elif isinstance(value, list | tuple):
        numbers = _numbers(value)
        if numbers is not None:
            if numbers:
                out[name] = numbers
            return
        for index, inner in enumerate(value):
            _flatten(inner, f"{name}[{index}]", out)
    else:
        number = _number(value)
        if number is not None:
            out[name] = number


def recorded_figures(result: RunResult) -> dict[str, Value]:
    """Dotted name -> value of every figure of ``result`` (see the module docstring)."""
    out: dict[str, Value] = {}
    for section in FIGURE_SECTIONS:
        _flatten(getattr(result, section, None) or {}, section, out)
    return out


@dataclass(frozen=True)
class FigureDifference:
    """One figure of two records.

    Attributes:
        name: the dotted figure name.
        committed, fresh: the values (None: not recorded on that side).
        difference: the largest absolute difference (element-wise for a list; ``inf`` where a
            value is NaN on one side only or the lists differ in length; None when the
            figure is on one side only).
        status: ``identical``, ``within tolerance``, ``differs``, ``only committed`` or
            ``only fresh``.
    """

    name: str
    committed: Value | None
    fresh: Value | None
    difference: float | None
    status: str

    @property
    def relative(self) -> float | None:
        """``difference`` over the larger magnitude of the two values (the largest over a
        list's elements): comparable across figures of different units (a fraction, a
        percentage, an epsilon); None when the figure is on one side only."""
        if self.difference is None or self.committed is None or self.fresh is None:
            return None
        if not math.isfinite(self.difference) or self.difference == 0:
            return self.difference
        values = [abs(v) for side in (self.committed, self.fresh)
                  for v in (side if isinstance(side, tuple) else (side,)) if math.isfinite(v)]
        scale = max(values, default=0.0)
        return self.difference / scale if scale > 0 else math.inf

    def change_text(self) -> str:
        """``name: committed → fresh`` (a list: its largest element-wise difference)."""
        if isinstance(self.committed, tuple) or isinstance(self.fresh, tuple):
            return f"{self.name}: max |difference| {figure_text(self.difference)}"
        return f"{self.name}: {figure_text(self.committed)} → {figure_text(self.fresh)}"


def _pair_difference(a: float, b: float) -> tuple[float, bool, bool]:
    """(absolute difference, identical, within tolerance) of two numbers."""
    if math.isnan(a) or math.isnan(b):
        same = math.isnan(a) and math.isnan(b)
        return (0.0 if same else math.inf), same, same
    if a == b:
        return 0.0, True, True
    gap = abs(a - b)
    return gap, False, gap <= ATOL + RTOL * max(abs(a), abs(b))


def _difference(committed: Value, fresh: Value) -> tuple[float, str]:
    if isinstance(committed, tuple) != isinstance(fresh, tuple) or (
            isinstance(committed, tuple) and len(committed) != len(fresh)):  # type: ignore[arg-type]
        return math.inf, "differs"
    pairs = (zip(committed, fresh, strict=True) if isinstance(committed, tuple)
             else [(committed, fresh)])
    largest, identical, within = 0.0, True, True
    for a, b in pairs:
        gap, same, close = _pair_difference(float(a), float(b))
        largest, identical, within = max(largest, gap), identical and same, within and close
    return largest, "identical" if identical else "within tolerance" if within else "differs"


def compare_figures(committed: Mapping[str, Value], fresh: Mapping[str, Value]
                    ) -> list[FigureDifference]:
    """Every figure of either side, in the committed record's order then the fresh one's."""
    out = []
    for name in dict.fromkeys([*committed, *fresh]):
        if name not in fresh:
            out.append(FigureDifference(name, committed[name], None, None, "only committed"))
        elif name not in committed:
            out.append(FigureDifference(name, None, fresh[name], None, "only fresh"))
        else:
            gap, status = _difference(committed[name], fresh[name])
            out.append(FigureDifference(name, committed[name], fresh[name], gap, status))
    return out


def figure_text(value: Value | None, digits: int = 4) -> str:
    """A value for a table: ``-`` for none, ``nan`` for null, a list as ``[N values]``."""
    if value is None:
        return "-"
    if isinstance(value, tuple):
        return f"[{len(value)} values]"
    if math.isnan(value):
        return "null"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.{digits}g}" if value != int(value) or abs(value) >= 1e6 else f"{value:g}"
