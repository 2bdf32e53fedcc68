"""``dpcompare bench`` from the compare layer (:func:`bench`): the benchmarks are loaded by name
(:func:`load_benchmarks`), the one way the compare layer reaches them. They import both
backends to time their parts; the compare layer imports no backend, so it imports no benchmark
module either."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from compare.grid import Grid, expand_grid, load_preset
from compare.reporting.styles import label_of

#: The benchmarks' entry module (:mod:`benchmarks.command`).
BENCHMARK_MODULE = "benchmarks.command"
#: The benchmarks' estimate of a grid's training time from the bench's step times
#: (:mod:`benchmarks.grid_cost`; framework-free, read by the dry run of a grid).
GRID_COST_MODULE = "benchmarks.grid_cost"


def load_benchmarks() -> ModuleType:
    """The benchmarks' entry module, imported now (it imports both frameworks' backends)."""
    return importlib.import_module(BENCHMARK_MODULE)


def load_grid_cost() -> ModuleType:
    """The benchmarks' grid-cost module (:mod:`benchmarks.grid_cost`), imported now: the
    compare layer reaches the benchmarks only by name, here."""
    return importlib.import_module(GRID_COST_MODULE)


def expand_preset(name: str) -> Grid:
    """The bundled preset ``name`` expanded as ``dpcompare compare`` expands it."""
    return expand_grid(load_preset(name))


def bench(out: str | Path, *, quick: bool = False, cases: Sequence[str] | None = None,
          sweep: bool = True, data_dir: str | Path | None = None,
          log: Callable[[str], None] | None = None, command: str = "compare.api.bench",
          compile_steps: bool | None = None) -> tuple[dict[str, Any], Path]:
    """Time DP and non-private training in both frameworks (``dpcompare bench``): steady-state
    speed and peak memory of every DP tier of TF Privacy and Opacus, their ratios against the
    targets, and a batch-size sweep of the fast engines (:mod:`benchmarks.bench`); writes
    ``out/report.md``, ``out/results.json`` and ``out/sweep.png``, with the estimated cost of
    the medical presets' grids here (:mod:`benchmarks.grid_cost`).

    Args:
        quick: few steps, cnn4 at batch 256, a 2-point sweep.
        cases: run only these cases (default: all of the mode's); an unknown name fails
            before anything runs.
        sweep: run the batch-size sweep.
        data_dir: the data root (default ``$DPCOMPARE_DATA_DIR``, else ``~/.dpcompare/data``).
        log: called with each progress line.
        command: the command the report's header names.
        compile_steps: also try the "at its best" tiers compiled (TF XLA, torch.compile;
            kept where faster; minutes of compiling). None: unless ``quick``.

    Returns:
        (every figure as one JSON-ready dict, the path of ``report.md``).

    Raises:
        ConfigError: an unknown case name (nothing run or written).
    """
    return load_benchmarks().run(
        out, expand_preset=expand_preset, label=label_of, quick=quick, cases=cases, sweep=sweep,
        data_dir=None if data_dir is None else str(data_dir),
        log=log or (lambda _msg: None), command=command, compile_steps=compile_steps)


def text_summary(figures: dict[str, Any]) -> str:
    """The plain-text summary ``dpcompare bench`` prints of :func:`bench`'s figures."""
    return load_benchmarks().text_summary(figures)


__all__ = ["BENCHMARK_MODULE", "GRID_COST_MODULE", "bench", "expand_preset", "load_benchmarks",
           "load_grid_cost", "text_summary"]
