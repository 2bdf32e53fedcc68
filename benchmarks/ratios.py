"""The benchmark's ratios and its speed and memory targets, marked met / missed / not measured.

Time ratios are of seconds per logical step (wall clock; the same ratios of process CPU time
are stored beside them, since a shared machine's load inflates wall time unevenly). Each DP
tier is divided by its own framework's plain step; ``tf_dp_fast/torch_dp_fast`` compares the
same algorithm on both frameworks; ``tf_privacy_stock/opacus_stock`` what users get out of
the box. Memory ratios (fast engine over plain step, peak RSS) come from the batch-size
sweep, where every point runs in a fresh process (:mod:`benchmarks.sweep`).

Two views (:data:`VIEWS`) group the ratios: "as users run it" (each library's stock DP path
and plain step, PyTorch in its default NCHW memory format) and "at its best" (the fast
engines, PyTorch in channels-last memory format; Keras is NHWC already). The targets are
those of the "at its best" view.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: ``numerator/denominator`` time ratios of every tier case, in report order.
TIME_RATIOS: tuple[tuple[str, str], ...] = (
    ("tf_dp_reference", "tf_plain"),
    ("tf_dp_fast", "tf_plain"),
    ("tf_privacy_stock", "tf_plain"),
    ("torch_dp_reference", "torch_plain"),
    ("torch_dp_fast", "torch_plain"),
    ("opacus_stock", "torch_plain"),
    ("tf_dp_fast", "torch_dp_fast"),
    ("tf_privacy_stock", "opacus_stock"),
    ("tf_plain", "torch_plain"),
    ("torch_dp_fast_cl", "torch_plain_cl"),
    ("tf_dp_fast", "torch_dp_fast_cl"),
    ("tf_plain", "torch_plain_cl"),
    ("torch_plain", "torch_plain_cl"),
)

#: The two views of the tiers and the ratios that show each (``numerator/denominator``).
VIEWS: dict[str, tuple[str, ...]] = {
    "as users run it": ("tf_privacy_stock/tf_plain", "opacus_stock/torch_plain",
                        "tf_privacy_stock/opacus_stock", "tf_plain/torch_plain"),
    "at its best": ("tf_dp_fast/tf_plain", "torch_dp_fast_cl/torch_plain_cl",
                    "tf_dp_fast/torch_dp_fast_cl", "tf_plain/torch_plain_cl"),
}


def view_of(key: str) -> str:
    """The view a ratio belongs to (empty: none, e.g. the reference engines')."""
    return next((view for view, keys in VIEWS.items() if key in keys), "")


def ratio_key(numerator: str, denominator: str) -> str:
    """The name of a ratio, ``numerator/denominator``."""
    return f"{numerator}/{denominator}"


def ratio_spreads(figures: Mapping[str, Mapping[str, Any]]) -> dict[str, float | None]:
    """Every :data:`TIME_RATIOS` entry's round spread: the wall-clock ratio of each timed
    round (its tiers ran back to back in it), ``(max - min) / mean`` over the rounds (None
    where either side did not run or ran one round)."""
    out: dict[str, float | None] = {}
    for a, b in TIME_RATIOS:
        top = figures.get(a, {}).get("round_seconds_per_step")
        bottom = figures.get(b, {}).get("round_seconds_per_step")
        if not top or not bottom or len(top) != len(bottom) or len(top) < 2:
            out[ratio_key(a, b)] = None
            continue
        per_round = [x / y for x, y in zip(top, bottom, strict=True)]
        mean = sum(per_round) / len(per_round)
        out[ratio_key(a, b)] = (max(per_round) - min(per_round)) / mean
    return out


def ratios(figures: Mapping[str, Mapping[str, Any]], measure: str = "seconds_per_step"
           ) -> dict[str, float | None]:
    """Every :data:`TIME_RATIOS` entry of one case's variant figures (None where either side
    did not run)."""
    out: dict[str, float | None] = {}
    for a, b in TIME_RATIOS:
        top, bottom = figures.get(a, {}).get(measure), figures.get(b, {}).get(measure)
        out[ratio_key(a, b)] = (top / bottom if top is not None and bottom else None)
    return out


@dataclass(frozen=True)
class Target:
    """One target of the issue: ``low <= value <= high`` of a ratio in one case.

    Attributes:
        case: the tier case (``cnn4_b1024``), or the sweep point (``sweep_b1024``).
        key: the ratio's name.
        low: least value that meets it (0: none).
        high: largest value that meets it.
        kind: ``time`` (tier case ratios of wall-clock time), ``cpu`` (the same ratio of
            process CPU time) or ``memory`` (peak RSS, sweep).
    """

    case: str
    key: str
    low: float
    high: float
    kind: str = "time"

    def describe(self) -> str:
        """The target as text, e.g. ``torch_dp_fast/torch_plain <= 1.5``."""
        bound = (f"between {self.low:g} and {self.high:g}" if self.low > 0
                 else f"<= {self.high:g}")
        what = {"memory": "peak memory", "cpu": "CPU time"}.get(self.kind, "time")
        return f"{self.key} ({what}) {bound}"


#: The DP / plain targets "at its best": the largest DP / plain step-time ratio that meets
#: each case's target (wall clock and process CPU time alike).
DP_OVER_PLAIN = {"cnn4_b256": 1.25, "cnn4_b1024": 1.25, "resnet18_b64": 1.35}

#: The targets, "at its best" (Keras NHWC, PyTorch channels-last, the fast engines, each step
#: compiled where that is faster): the DP step within :data:`DP_OVER_PLAIN` of its own
#: framework's plain step in wall-clock and in CPU time, the two frameworks' DP steps within
#: 1.5x of each other, peak memory within 1.5x plain (the sweep: PyTorch's default format).
TARGETS: tuple[Target, ...] = (
    *(Target(case, key, 0.0, high, kind)
      for case, high in DP_OVER_PLAIN.items()
      for kind in ("time", "cpu")
      for key in ("tf_dp_fast/tf_plain", "torch_dp_fast_cl/torch_plain_cl")),
    *(Target(case, "tf_dp_fast/torch_dp_fast_cl", 0.67, 1.5)
      for case in ("cnn4_b256", "cnn4_b1024", "resnet18_b64", "resnet18_b256",
                   "textcnn_imdb_b256")),
    Target("sweep_b1024", "torch_dp_fast/torch_plain", 0.0, 1.5, "memory"),
    Target("sweep_b1024", "tf_dp_fast/tf_plain", 0.0, 1.5, "memory"),
)


def verdict(target: Target, value: float | None) -> str:
    """``met``, ``missed`` or ``not measured``."""
    if value is None:
        return "not measured"
    return "met" if target.low <= value <= target.high else "missed"


SWEEP_PREFIX = "sweep_b"
#: Why a target of a case that ran has no value.
TIER_NOT_RUN = "a tier of the ratio did not run (see the case's table)"


def why_not_measured(case: str, results: Mapping[str, Any]) -> str:
    """Why a target of ``case`` has no value in ``results``: its case (or sweep point) did
    not run, or a tier of its ratio did not run."""
    if case.startswith(SWEEP_PREFIX):
        batch = case.removeprefix(SWEEP_PREFIX)
        sweep = results.get("sweep")
        if not sweep:
            return "no batch-size sweep ran"
        if int(batch) not in sweep.get("batches", []):
            return f"the sweep did not reach batch {batch}"
        return f"a sweep point at batch {batch} did not run (see the sweep table)"
    if case not in results.get("cases", {}):
        return "its case did not run"
    return TIER_NOT_RUN


def target_rows(results: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every target with its value and verdict, from :func:`benchmarks.bench.run_benchmark`'s
    results (time: the case's wall-clock ratios; memory: the sweep's peak-RSS ratios); a
    target not measured says why (``why``)."""
    rows = []
    for target in TARGETS:
        if target.kind == "memory":
            value = results.get("sweep", {}).get("memory_ratios", {}).get(
                target.case.removeprefix("sweep_b"), {}).get(target.key)
        else:
            value = results.get("cases", {}).get(target.case, {}).get(
                "cpu_ratios" if target.kind == "cpu" else "ratios", {}).get(target.key)
        row = {"case": target.case, "target": target.describe(), "value": value,
               "verdict": verdict(target, value)}
        if value is None:
            row["why"] = why_not_measured(target.case, results)
        rows.append(row)
    return rows
