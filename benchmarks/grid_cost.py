"""What a grid would take to train on the bench's machine, estimated from the bench's own step
times (no training): the bench report prices the medical presets (:data:`PRICED_PRESETS`),
and ``dpcompare compare --dry-run`` prices the runs it would train (:mod:`compare.grid_dry_run`).

For each run of an expanded grid (``compare.grid.expand_grid``: every cell on each of its
backends), the bench tier that times its training step is chosen by the run's mechanism
through :mod:`dpcore.mechanisms`: a mechanism that noises gradients takes the backend's DP tier
of the engine the grid asks for (:func:`dpcore.backend.choose_engine`: ``*_dp_fast`` or
``*_dp_reference``), any other (local DP, non-private) the plain step; a torch run in
``perf.memory_format: channels_last`` takes the channels-last tier (``*_cl``). The tier's
seconds per example at the bench case's batch (seconds per step / B) times the examples the
run trains on (``epochs x N``, N the documented training-set size, or ``steps x batch``) is the
run's estimate, in seconds of wall clock with the bench's threads, one run after another.
Given the run's data (``shape_of``: its training-set size and input shape, as the dry run
loads them), N is the real size and the time per example is scaled by the input's size
against the bench case's (images: height x width, the convolutions' cost; text: the sequence
length): an extrapolation, stated with the estimate.

Not included: evaluation, Grad-CAM / faithfulness, data loading and local-DP privatisation.
Per-example time is taken as independent of the batch size (the bench times ResNet-18 at
batch 64, the presets train at 256), and the bench cases are 1-channel 28x28 images
(RetinaMNIST's are 3-channel: its first convolution costs more than estimated). It is an
estimate from extrapolated step times, not a measurement.

This module is a pure function of the bench's results and an expanded grid: ``compare``
expands the presets (:data:`PRICED_PRESETS`) and stores the estimates in the results
(``preset_costs``); :mod:`benchmarks.render` prints them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from benchmarks.variants import CHANNELS_LAST, TIERS
from dpcore.backend import choose_engine
from dpcore.config import PerfSpec, RunConfig
from dpcore.datasets import get_info
from dpcore.errors import DpCompareError
from dpcore.mechanisms import get_mechanism

#: The bundled presets whose grids the bench report prices.
PRICED_PRESETS = ("medical-ldp-vs-dpsgd", "medical-ldp-vs-dpsgd-resnet18-short")

#: Model -> the bench case whose step times price its runs. ResNet-18: the case on
#: PneumoniaMNIST itself (28x28x1, batch 64). cnn4: batch 256 on 28x28x1 images (MNIST's shape,
#: PneumoniaMNIST's too), the batch the medical presets train cnn4 at.
#: textcnn: the IMDB case (token sequences of 256, batch 256).
CASE_OF_MODEL: dict[str, str] = {"resnet18": "resnet18_pneumonia_b64", "cnn4": "cnn4_b256",
                                 "textcnn": "textcnn_imdb_b256"}

#: A run's data as the estimate may use it: (training-set size N, input shape), or None.
ShapeOf = Callable[[RunConfig], "tuple[int, Sequence[int]] | None"]

#: (backend, step) -> the bench tier timing it; step is ``plain`` or the DP engine's name.
STEP_TIERS: dict[tuple[str, str], str] = {
    ("tf", "plain"): "tf_plain", ("tf", "fast"): "tf_dp_fast",
    ("tf", "reference"): "tf_dp_reference",
    ("torch", "plain"): "torch_plain", ("torch", "fast"): "torch_dp_fast",
    ("torch", "reference"): "torch_dp_reference",
}

#: Backends whose tiers have a channels-last variant (TF is NHWC always).
CHANNELS_LAST_BACKENDS = ("torch",)

#: The recipe the engine tiers time (a ``library`` run's step is the libraries' own).
TIMED_RECIPE = "harmonised"

SECONDS_PER_HOUR = 3600.0


class ExpandedGrid(Protocol):
    """What is read of an expanded grid (:class:`compare.grid.Grid`)."""

    name: str
    perf: PerfSpec

    def runs(self) -> Sequence[tuple[Any, str]]:
        """(cell with a ``config``, backend) of every run."""
        ...


@dataclass(frozen=True)
class RunCost:
    """One run's estimate.

    Attributes:
        model, data, backend: the run's model, data set and backend.
        mechanism: the mechanism as the report names it (the ``label`` of
            :func:`preset_cost`; by default its ``privacy.mechanism`` name).
        tier: the bench tier that times its step, None if none does.
        epochs: passes over the training set.
        n_train: training-set size N (examples).
        seconds: estimated training seconds, None when not measured (``why`` says why).
        seconds_per_epoch: the tier's seconds per example x N, None when not measured.
        scale: the factor the case's time per example was scaled by for this run's input
            size (1.0: the case's size, or the size not known).
    """

    model: str
    data: str
    mechanism: str
    backend: str
    tier: str | None
    epochs: float
    n_train: int
    seconds: float | None
    seconds_per_epoch: float | None
    why: str | None = None
    scale: float = 1.0


def tier_of(config: RunConfig, backend: str, perf: PerfSpec) -> tuple[str | None, str | None]:
    """The bench tier that times ``config``'s step on ``backend`` (tier, None), or (None, why):
    chosen by the mechanism registry (gradient noise: the engine's DP tier; otherwise the
    plain step) and the grid's memory format."""
    if get_mechanism(config.privacy.mechanism).noises_gradients:
        if config.recipe != TIMED_RECIPE:
            return None, f"recipe {config.recipe}: the bench times no tier of it"
        try:
            step = choose_engine(perf.engine, (), config.factors.microbatch_size).engine
        except DpCompareError as exc:  # an engine name the backends do not know
            return None, str(exc)
    else:
        step = "plain"
    tier = STEP_TIERS.get((backend, step))
    if tier is None:
        return None, f"no bench tier times the {step} step of backend {backend}"
    if perf.memory_format == "channels_last" and backend in CHANNELS_LAST_BACKENDS:
        if tier + CHANNELS_LAST not in TIERS:
            return None, f"the bench has no channels-last tier of {tier}"
        tier += CHANNELS_LAST
    return tier, None


def _case(results: Mapping[str, Any], model: str
          ) -> tuple[Mapping[str, Any] | None, str | None, str | None]:
    """(the bench case timing ``model``, its name, None) or (None, name or None, why not)."""
    case_name = CASE_OF_MODEL.get(model)
    if case_name is None:
        return None, None, f"no bench case times model {model}"
    case = results.get("cases", {}).get(case_name)
    if case is None:
        ran = ", ".join(results.get("cases", {})) or "no case"
        return None, case_name, (f"the bench case {case_name} did not run (this bench timed "
                                 f"{ran}; the full `dpcompare bench` times it)")
    return case, case_name, None


def _seconds_per_example(results: Mapping[str, Any], model: str, tier: str
                         ) -> tuple[float | None, str | None]:
    """The tier's measured seconds per example (its case's seconds per step / B), or why not."""
    case, case_name, why = _case(results, model)
    if case is None:
        return None, why
    figures = case.get("variants", {}).get(tier, {})
    if figures.get("seconds_per_step") is None:
        why = figures.get("skipped", "not run")
        return None, f"tier {tier} did not run in case {case_name} ({why})"
    return figures["seconds_per_step"] / case["batch_size"], None


def input_size(shape: Sequence[int]) -> int:
    """What a step's cost grows with: height x width of an image ``[H, W, C]``, the length of
    a token sequence ``[L]``, else the product of the dimensions."""
    dims = [int(d) for d in shape]
    if len(dims) == 3:
        return dims[0] * dims[1]
    return max(1, math.prod(dims))


def run_cost(results: Mapping[str, Any], config: RunConfig, backend: str, perf: PerfSpec,
             shape: tuple[int, Sequence[int]] | None = None, *,
             label: Callable[[str], str] = str) -> RunCost:
    """The estimate of one run (``config`` on ``backend`` with the grid's ``perf``);
    ``shape``: its (training-set size, input shape) when known (see the module docstring);
    its mechanism named by ``label`` (of the ``privacy.mechanism`` name)."""
    n_train = get_info(config.data.name).documented_sizes[0]
    if config.data.train_limit is not None:
        n_train = min(n_train, config.data.train_limit)
    if shape is not None:
        n_train = int(shape[0])
    train = config.train
    examples = (train.epochs * n_train if train.epochs is not None
                else train.steps * train.batch_size)
    tier, why = tier_of(config, backend, perf)
    per_example = None
    scale = 1.0
    if tier is not None:
        per_example, why = _seconds_per_example(results, config.model.name, tier)
        case = _case(results, config.model.name)[0]
        if per_example is not None and shape is not None and case and case.get("input_shape"):
            scale = input_size(shape[1]) / input_size(case["input_shape"])
            per_example *= scale
    if n_train < 1:
        per_example, why = None, f"the training-set size of {config.data.name} is not known"
    return RunCost(
        model=config.model.name, data=config.data.name,
        mechanism=label(config.privacy.mechanism), backend=backend, tier=tier,
        epochs=examples / n_train if n_train else 0.0, n_train=n_train,
        seconds=None if per_example is None else per_example * examples,
        seconds_per_epoch=None if per_example is None else per_example * n_train, why=why,
        scale=scale)


def _hours(costs: Sequence[RunCost]) -> float | None:
    """Summed hours of ``costs``, None if there are none or any is not measured."""
    if not costs or any(c.seconds is None for c in costs):
        return None
    return sum(c.seconds for c in costs if c.seconds is not None) / SECONDS_PER_HOUR


def preset_cost(results: Mapping[str, Any], grid: ExpandedGrid,
                label: Callable[[str], str] = str, *,
                shape_of: ShapeOf | None = None) -> dict[str, Any]:
    """The estimate of a whole expanded grid, JSON-ready: ``preset``, ``runs``, the grid's
    ``engine`` and ``memory_format``, ``groups`` (one per model x mechanism x backend x tier,
    in grid order: runs, epochs, seconds per epoch by data set, hours or None and why),
    ``hours_by_backend`` and ``hours`` (of the estimated runs), ``estimated_runs``, and
    ``torch_channels_last_hours`` (the torch runs in channels-last memory format, when the
    grid runs them in the default one and the bench measured it; else None). ``label``
    names a mechanism in the groups (the report layer's legend label; by default the
    ``privacy.mechanism`` name); ``shape_of``: each run's data (see the module docstring);
    None prices the documented sizes."""
    runs = [(cell.config, backend) for cell, backend in grid.runs()]
    shapes = {config.config_hash: shape_of(config) if shape_of is not None else None
              for config, _backend in runs}
    costs = [run_cost(results, config, backend, grid.perf, shapes[config.config_hash],
                      label=label)
             for config, backend in runs]
    groups: dict[tuple[Any, ...], list[RunCost]] = {}
    for cost in costs:
        groups.setdefault((cost.model, cost.mechanism, cost.backend, cost.tier), []).append(cost)
    backends = list(dict.fromkeys(c.backend for c in costs))
    measured = [c for c in costs if c.seconds is not None]
    out: dict[str, Any] = {
        "preset": grid.name, "runs": len(costs), "engine": grid.perf.engine or "fast",
        "memory_format": grid.perf.memory_format, "estimated_runs": len(measured),
        "groups": [_group(members) for members in groups.values()],
        "hours_by_backend": {b: _hours([c for c in measured if c.backend == b])
                             for b in backends},
        "hours": _hours(measured), "torch_channels_last_hours": None}
    if grid.perf.memory_format != "channels_last" and any(b in CHANNELS_LAST_BACKENDS
                                                          for b in backends):
        best = replace(grid.perf, memory_format="channels_last")
        out["torch_channels_last_hours"] = _hours(
            [run_cost(results, config, backend, best, shapes[config.config_hash], label=label)
             for config, backend in runs if backend in CHANNELS_LAST_BACKENDS])
    return out


def _group(members: Sequence[RunCost]) -> dict[str, Any]:
    first = members[0]
    per_epoch = {c.data: c.seconds_per_epoch for c in members}
    return {"model": first.model, "mechanism": first.mechanism, "backend": first.backend,
            "tier": first.tier, "runs": len(members),
            "epochs": sorted({c.epochs for c in members}),
            "seconds_per_epoch": per_epoch, "hours": _hours(members),
            "why": next((c.why for c in members if c.why is not None), None)}


def duration(hours: float | None) -> str:
    """Hours as text in a readable unit (``40 s``, ``4.8 min``, ``83 min``, ``3.2 h``);
    ``not measured`` for None."""
    if hours is None:
        return "not measured"
    seconds = hours * SECONDS_PER_HOUR
    if seconds < 120:
        return f"{seconds:.2g} s" if seconds < 10 else f"{seconds:.0f} s"
    if hours >= 2:
        return f"{hours:.1f} h"
    return f"{seconds / 60:.1f} min" if seconds < 600 else f"{seconds / 60:.0f} min"


def _fmt_epochs(epochs: Sequence[float]) -> str:
    return ", ".join(f"{e:g}" for e in epochs)


def section_lines(estimates: Sequence[Mapping[str, Any]], threads: int | None = None
                  ) -> list[str]:
    """The report's "Cost of the medical presets here" section (Markdown lines) from
    :func:`preset_cost` estimates; empty without estimates."""
    if not estimates:
        return []
    lines = [
        "## Cost of the medical presets here", "",
        "Estimated training time of each preset's whole grid on this machine, from this "
        "bench's step times (an estimate from extrapolated step times, not a measurement). "
        "Each run's tier follows its mechanism (dpcore.mechanisms): gradient noise -> the "
        "backend's DP tier of the preset's engine, local DP and non-private -> the plain "
        "step; torch in the preset's memory format. Scaled per example: the tier's seconds "
        "per step / the case's batch x the run's training-set size N x its epochs (the bench "
        "times ResNet-18 at batch 64 (`resnet18_pneumonia_b64`) and cnn4 at 256 (`cnn4_b256`), "
        "the presets train at 256 in physical chunks of 128; per-example time is taken as "
        "independent of the batch). The cases are 1-channel 28x28 images: RetinaMNIST's "
        "3-channel first convolution costs more than estimated. Runs one after another"
        + (f" with the bench's threads (torch {threads})" if threads else "")
        + "; evaluation, Grad-CAM / faithfulness, data loading and local-DP privatisation are "
        "not included.", ""]
    for est in estimates:
        lines += [f"**{est['preset']}** ({est['runs']} runs, engine {est['engine']}, torch "
                  f"memory format {est['memory_format']}):", ""]
        rows = [[g["model"], g["mechanism"], g["backend"], g["tier"] or "-", str(g["runs"]),
                 _fmt_epochs(g["epochs"]),
                 ", ".join(f"{d} {_seconds(s)}" for d, s in g["seconds_per_epoch"].items()),
                 duration(g["hours"])] for g in est["groups"]]
        header = ["model", "mechanism", "backend", "tier", "runs", "epochs",
                  "one epoch", "estimated time"]
        lines += ["| " + " | ".join(header) + " |",
                  "|---|---|---|---|---:|---:|---|---:|",
                  *["| " + " | ".join(row) + " |" for row in rows], ""]
        lines += [total_line(est), *not_measured_lines(est), ""]
    return lines


def _seconds(seconds: float | None) -> str:
    return "-" if seconds is None else duration(seconds / SECONDS_PER_HOUR)


def not_measured_lines(est: Mapping[str, Any]) -> list[str]:
    """One line per reason some runs of the preset could not be estimated: how many runs,
    of which models and tiers, and why."""
    by_why: dict[str, list[Mapping[str, Any]]] = {}
    for g in est["groups"]:
        if g["hours"] is None:
            by_why.setdefault(g["why"], []).append(g)
    return [f"- not measured: {sum(g['runs'] for g in groups)} runs ("
            + ", ".join(dict.fromkeys(g["model"] for g in groups)) + "; tiers "
            + ", ".join(dict.fromkeys(g["tier"] or "none" for g in groups)) + f"): {why}."
            for why, groups in by_why.items()]


def total_line(est: Mapping[str, Any]) -> str:
    """One line: the preset's estimated hours per backend and in total (of the runs that
    could be estimated), and torch in channels-last memory format when measured."""
    partial = est["estimated_runs"] < est["runs"]
    if not est["estimated_runs"]:
        return f"- {est['preset']}: no run could be estimated."
    per_backend = ", ".join(f"{b} {duration(h)}" for b, h in est["hours_by_backend"].items())
    text = (f"- {est['preset']}: {duration(est['hours'])} in total ({per_backend})"
            + (f", of the {est['estimated_runs']} of {est['runs']} runs that could be "
               "estimated" if partial else "") + ".")
    if est.get("torch_channels_last_hours") is not None:
        text += (f" Its torch runs in channels-last memory format (perf.memory_format: "
                 f"channels_last) would take {duration(est['torch_channels_last_hours'])}.")
    return text
