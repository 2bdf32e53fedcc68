"""What ``dpcompare bench`` runs (:func:`run`), the one module of the benchmarks that the
compare layer loads, by name (:func:`compare.bench.load_benchmarks`): the benchmarks time the
backends' own parts, so they import the backends, and the compare layer imports no backend.

The presets priced in the report are expanded by the caller (``expand_preset``): the
benchmarks do not import the compare layer either.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks import bench, render
from benchmarks.grid_cost import PRICED_PRESETS, ExpandedGrid, preset_cost

#: A bundled preset's name -> its expanded grid (``compare.grid.expand_grid`` of it).
ExpandPreset = Callable[[str], ExpandedGrid]


def run(out: str | Path, *, expand_preset: ExpandPreset,
        label: Callable[[str], str] = str, quick: bool = False,
        cases: Sequence[str] | None = None, sweep: bool = True, data_dir: str | None = None,
        log: Callable[[str], None] = lambda _msg: None, command: str = "dpcompare bench",
        compile_steps: bool | None = None) -> tuple[dict[str, Any], Path]:
    """Time DP and non-private training in both frameworks and write ``out/report.md``,
    ``out/results.json`` and ``out/sweep.png`` (see :func:`compare.api.bench`); an unknown
    case name fails (ConfigError) before anything runs. ``label`` names a mechanism in the
    presets' cost groups (the report layer's legend label). Returns (every figure as one
    JSON-ready dict, the path of ``report.md``). ``compile_steps``: try the "at its best"
    tiers compiled (None: unless ``quick``)."""
    names = list(cases) if cases else None
    bench.select_cases(quick, names)  # an unknown case name fails before anything runs
    figures = bench.run_benchmark(quick=quick, data_dir=data_dir, case_names=names,
                                  sweep=sweep, compile_steps=compile_steps, log=log)
    figures["preset_costs"] = preset_costs(figures, expand_preset, label)
    return figures, render.write_report(figures, out, command)


def preset_costs(figures: Mapping[str, Any], expand_preset: ExpandPreset,
                 label: Callable[[str], str] = str) -> list[dict[str, Any]]:
    """What the medical presets' whole grids (:data:`benchmarks.grid_cost.PRICED_PRESETS`)
    would take to train here, estimated from the bench's step times
    (:func:`benchmarks.grid_cost.preset_cost`), each preset expanded by ``expand_preset``,
    each mechanism named by ``label``."""
    return [preset_cost(figures, expand_preset(name), label) for name in PRICED_PRESETS]


def text_summary(figures: dict[str, Any]) -> str:
    """The plain-text summary ``dpcompare bench`` prints
    (:func:`benchmarks.render.text_summary`)."""
    return render.text_summary(figures)


__all__ = ["ExpandPreset", "preset_costs", "run", "text_summary"]
