"""Steady-state training speed and peak memory of every tier, all tiers of a case in one
process (each case in a fresh one when several run: :mod:`benchmarks.case_process`); the
batch-size sweep; the speed and memory targets.

For each case (model, batch size B, data) every tier (:mod:`benchmarks.variants`) gets its
own model and step; each is first warmed up (its first steps trace / compile and are not
timed), then the tiers are timed in alternating rounds (the order rotates every round), so
that a change of machine load hits them all alike. A "step" is one logical batch of B
examples drawn uniformly at random (fixed size, no Poisson sampling), split into physical
chunks of at most 256 examples exactly as :func:`dpcore.trainloop.run_training` does (the
uint8 -> float conversion included); the stock library paths take the whole batch. Every tier
gets the same batches. Seconds per epoch are extrapolated: ``seconds per step * ceil(N / B)``
with N the case's training-set size (60000 for MNIST-sized cases, 4708 for PneumoniaMNIST,
the loaded IMDB subset's size) -- no variant runs a whole epoch.

Memory of a tier (:mod:`benchmarks.memory`): the rise of the process's peak RSS during the
tier's warm-up and during its timed steps over the RSS at their start, i.e. what the tier
allocated on top of what was loaded already (all tiers share the process; the allocators keep
freed memory, which a later tier may reuse without a rise, so this is a lower bound of a
tier's own need). The whole process's peak is kept once (``process_peak_rss_mb``), not per
tier. The memory targets are read from the sweep (:mod:`benchmarks.sweep`), whose points each
run in a fresh process.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks.case_process import run_case_in_process
from benchmarks.layer_costs import layer_costs
from benchmarks.memory import available_bytes, memory_method, peak_rss
from benchmarks.ratios import ratio_spreads, ratios, target_rows
from benchmarks.runtime import configure
from benchmarks.variants import (
    BEST_TIERS,
    CHUNK,
    CLIP,
    COMPILE_DETERMINISM,
    COMPILE_TIERS,
    FAST_TIERS,
    LR,
    PLAIN_TIERS,
    SIGMA,
    TIERS,
    ModelCase,
    Variant,
    make_batches,
    tf_variants,
    torch_variants,
)
from dpcore.config import DataSpec
from dpcore.errors import ConfigError, DpCompareError

#: Nominal training-set size of the MNIST-sized cases (the epoch the figures extrapolate to).
MNIST_N = 60000


@dataclass(frozen=True)
class Case:
    """One benchmark case.

    Attributes:
        name: label, e.g. ``cnn4_b1024``.
        model: model zoo name.
        batch_size: logical batch B.
        data: ``mnist``, ``pneumoniamnist`` (28x28x1 images) or ``imdb`` (token ids).
        rounds: timed rounds (variants alternate within a round).
        steps: timed steps per variant per round.
        warmup: untimed steps per variant first (tracing / compilation).
        tiers: the tiers run (the others are recorded as "not in this case").
        slow_steps: cap on the timed steps per round of the per-example tiers (reference and
            stock: several times slower than the others).
    """

    name: str
    model: str
    batch_size: int
    data: str = "mnist"
    rounds: int = 3
    steps: int = 10
    warmup: int = 2
    tiers: tuple[str, ...] = TIERS
    slow_steps: int | None = None


#: Tiers that materialise per-example gradients of the whole model (slow ones).
SLOW_TIERS = ("tf_dp_reference", "tf_privacy_stock", "torch_dp_reference", "opacus_stock")


def cases(quick: bool) -> list[Case]:
    """The full benchmark's cases, or ``--quick``'s (cnn4 at 256, few steps)."""
    if quick:
        return [Case("cnn4_b256", "cnn4", 256, rounds=1, steps=2, warmup=1, slow_steps=1)]
    return [
        Case("cnn4_b256", "cnn4", 256, rounds=3, steps=20, slow_steps=2),
        Case("cnn4_b1024", "cnn4", 1024, rounds=3, steps=8, slow_steps=2),
        Case("resnet18_b64", "resnet18", 64, rounds=2, steps=3, warmup=1, slow_steps=1),
        Case("resnet18_b256", "resnet18", 256, rounds=2, steps=2, warmup=1, slow_steps=1),
        Case("textcnn_imdb_b256", "textcnn", 256, data="imdb", rounds=3, steps=5,
             slow_steps=2),
        Case("resnet18_pneumonia_b64", "resnet18", 64, data="pneumoniamnist", rounds=2,
             steps=3, warmup=1, tiers=FAST_TIERS + BEST_TIERS),
    ]


CASE_NAMES = ("cnn4_b256", "cnn4_b1024", "resnet18_b64", "resnet18_b256", "textcnn_imdb_b256",
              "resnet18_pneumonia_b64")


# ------------------------------------------------------------------------------ data
@dataclass(frozen=True)
class CaseData:
    """Training arrays of a case, what they are, and the epoch size figures extrapolate to."""

    x: np.ndarray
    y: np.ndarray
    task: str
    n_classes: int
    nominal_n: int
    description: str
    vocab_size: int | None = None


def load_data(name: str, quick: bool, data_dir: str | None) -> CaseData:
    """The named data set's training arrays from the data root, else seeded random data of
    its shape (the description says which)."""
    from dpcore.data import portable_location
    from dpcore.data.loading import load_dataset

    documented = {"mnist": (MNIST_N, 10), "pneumoniamnist": (4708, 2), "imdb": (25000, 2)}
    if name not in documented:
        raise ConfigError(f"benchmark data {name!r} is not known; valid: "
                          + ", ".join(documented))
    with contextlib.suppress(DpCompareError, OSError):
        ds = load_dataset(DataSpec(name=name), data_dir)
        x, y = ds.x_train, np.asarray(ds.y_train, np.int64)
        n = len(x)
        if quick:
            x, y = x[:4096], y[:4096]
        return CaseData(x, y, ds.task, ds.n_classes, n if name != "mnist" else MNIST_N,
                        f"real {name} ({n} training examples from "
                        f"{portable_location(name, ds.source)})",  # no folder of this machine
                        getattr(ds, "vocabulary_size", None))
    n, classes = documented[name]
    rng = np.random.default_rng(0)
    size = 4096 if quick else min(n, 8192)
    if name == "imdb":
        return CaseData(rng.integers(0, 10000, (size, 256)).astype(np.int64),
                        rng.integers(0, 2, size).astype(np.int64), "text", 2, n,
                        f"random token ids of IMDB's shape ({size}x256, vocabulary 10000; "
                        "no IMDB under the data root)", 10000)
    return CaseData(rng.integers(0, 256, (size, 28, 28, 1), dtype=np.uint8),
                    rng.integers(0, classes, size).astype(np.int64), "image", classes, n,
                    f"random uint8 images of {name}'s shape ({size}x28x28x1; none under the "
                    "data root)")


# ------------------------------------------------------------------------------ timing
def _guarded(variant: Variant, action: Callable[[], None]) -> None:
    """Run ``action``; an exception marks the variant as failed (unsupported, ...)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            action()
    except Exception as exc:  # noqa: BLE001 - any failure is recorded, the benchmark goes on
        kind = "out of memory" if isinstance(exc, MemoryError) or "OOM" in str(exc) else "failed"
        variant.skipped = f"{kind}: {type(exc).__name__}: {exc}"[:300]
        variant.run = None


def model_case(case: Case, data: CaseData) -> ModelCase:
    """What the case's models are built from."""
    return ModelCase(case.model, tuple(data.x.shape[1:]), data.n_classes, case.batch_size,
                     data.vocab_size)


def build_variants(case: Case, data: CaseData, compile_steps: bool = False) -> list[Variant]:
    """Every tier of ``case`` (those outside ``case.tiers`` recorded as not in the case);
    with ``compile_steps``, the :data:`benchmarks.variants.COMPILE_TIERS` with a compiled
    twin to try."""
    model_case_ = model_case(case, data)
    available = available_bytes()
    twins = COMPILE_TIERS if compile_steps else ()
    built = {v.name: v for v in (tf_variants(model_case_, case.tiers, available, twins)
                                 + torch_variants(model_case_, case.tiers, available, twins))}
    return [built.get(name) or Variant(name, "tf" if name.startswith("tf") else "torch",
                                       name not in PLAIN_TIERS,
                                       skipped="not in this case")
            for name in TIERS]


#: A compiled tier is kept only if its step is faster than the uncompiled one by this
#: fraction (so that the load of a shared machine does not decide).
COMPILE_MARGIN = 0.05


def _step_seconds(runs: Sequence[Callable[[Sequence[Any]], None]], batches: Sequence[Any]
                  ) -> list[float]:
    """Wall-clock seconds per step of each of ``runs``: the fastest of one-step runs over
    ``batches``, the runs alternating on each batch (a change of load hits them alike)."""
    best = [math.inf] * len(runs)
    for batch in batches:
        for i, run in enumerate(runs):
            start = time.perf_counter()
            run([batch])
            best[i] = min(best[i], time.perf_counter() - start)
    return best


#: A compiled twin measured at least this many times slower than its uncompiled tier is not
#: tried again on a later case of the same model (a larger batch, other data): compiling
#: the TF DP step of ResNet-18 with XLA gave 65.8 s per step against 1.48 uncompiled at
#: batch 64, and its compilation at batch 256 had not ended after 35 minutes.
COMPILE_GIVE_UP_RATIO = 2.0

#: ``(framework, tier, model) -> (case, compiled / uncompiled s per step)`` of the compiled
#: twins measured at least :data:`COMPILE_GIVE_UP_RATIO` slower, filled case by case.
CompileHistory = dict[tuple[str, str, str], tuple[str, float]]


def choose_compiled(v: Variant, warm: Sequence[Any], probe: Sequence[Any],
                    log: Callable[[str], None] = lambda _: None, *, model: str = "",
                    case: str = "", history: CompileHistory | None = None) -> None:
    """Try ``v``'s compiled twin (if any): warm it up (the compilation, timed), time one step
    of each on every ``probe`` batch, alternating (the fastest counts), keep the compiled tier
    only where it is faster by :data:`COMPILE_MARGIN`; ``v.compile`` records what was tried,
    what it cost and what it gave. ``history`` (of the run's earlier cases; updated): a twin
    of the same framework, tier and ``model`` measured :data:`COMPILE_GIVE_UP_RATIO` times
    slower in an earlier case is not compiled again, and the note says why."""
    twin, v.compiled = v.compiled, None
    if twin is None or v.run is None:
        return
    note: dict[str, Any] = {
        "tried": "XLA (tf.function jit_compile), chunks padded to their size class"
        if v.framework == "tf" else "torch.compile (inductor), chunks padded to their size "
        "class", "determinism": COMPILE_DETERMINISM[v.framework]}
    key = (v.framework, v.name, model)
    if history is not None and key in history:
        earlier, ratio = history[key]
        note.update(kept=False, given_up=(
            f"not compiled: its compiled twin took {ratio:.1f}x the uncompiled step's time "
            f"in {earlier} (same model; the give-up ratio is {COMPILE_GIVE_UP_RATIO:g})"))
        twin.close()
        v.compile = note
        log(f"[compile] {v.name}: {note['given_up']}")
        return
    start = time.perf_counter()
    _guarded(twin, lambda: twin.run(warm))
    note["compile_seconds"] = time.perf_counter() - start
    if twin.run is None:
        note.update(kept=False, failed=twin.skipped)
        twin.close()
        v.compile = note
        log(f"[compile] {v.name}: {twin.skipped}")
        return
    plain, compiled = _step_seconds([v.run, twin.run], probe)
    note.update(uncompiled_s_per_step=plain, compiled_s_per_step=compiled,
                kept=compiled < (1.0 - COMPILE_MARGIN) * plain)
    if history is not None and compiled >= COMPILE_GIVE_UP_RATIO * plain:
        history[key] = (case, compiled / plain)
    if note["kept"]:
        v.close()
        v.run, v.close, v.engine = twin.run, twin.close, twin.engine
    else:
        twin.close()
    v.compile = note
    log(f"[compile] {v.name}: {compiled:.4f} s/step compiled, {plain:.4f} uncompiled: "
        + ("kept" if note["kept"] else "not kept"))


def run_case(case: Case, data: CaseData, log: Callable[[str], None] = lambda _: None,
             *, compile_steps: bool = False, roofline: dict[str, Any] | None = None,
             compile_history: CompileHistory | None = None, layers: bool = True
             ) -> dict[str, Any]:
    """Time every tier of ``case`` (alternating rounds); the case's figures as a dict.
    ``compile_steps``: the "at its best" tiers are also tried compiled (kept where faster;
    ``compile_history``: see :func:`choose_compiled`); ``roofline``: this CPU's, for the
    per-layer cost model; ``layers``: also the per-layer tables (False: the caller measures
    them, e.g. each in a process of its own, :mod:`benchmarks.case_process`)."""
    log(f"[{case.name}] building variants")
    variants = build_variants(case, data, compile_steps)
    for v in variants:
        if v.run is not None:
            log(f"[{case.name}] warm-up {v.name}")
            count = 1 if v.name in SLOW_TIERS else case.warmup  # one step traces them
            warm = make_batches(data.x, data.y, case.batch_size, count, 0, data.task)
            with peak_rss() as mem:
                _guarded(v, lambda v=v, b=warm: v.run(b))
                choose_compiled(v, warm, make_batches(data.x, data.y, case.batch_size, 3, 99,
                                                      data.task), log, model=case.model,
                                case=case.name, history=compile_history)
            v.memory["warmup_peak_increase_mb"] = mem["peak_increase_mb"]
    for r in range(case.rounds):
        batches = make_batches(data.x, data.y, case.batch_size, case.steps, 1 + r, data.task)
        live = [v for v in variants if v.run is not None]
        order = live[r % len(live):] + live[:r % len(live)] if live else []
        for v in order:
            slow = v.name in SLOW_TIERS and case.slow_steps is not None
            timed = batches[:case.slow_steps] if slow else batches
            with peak_rss() as mem:
                start, cpu = time.perf_counter(), time.process_time()
                _guarded(v, lambda v=v, b=timed: v.run(b))
                elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
            if v.run is None:
                continue
            v.seconds.append(elapsed)
            v.cpu_seconds.append(cpu)
            v.steps_timed += len(timed)
            for key, value in mem.items():
                v.memory[key] = max(v.memory.get(key, -math.inf), value)
            log(f"[{case.name}] round {r + 1}/{case.rounds} {v.name}: "
                f"{elapsed / len(timed):.4f} s/step")
    for v in variants:
        v.engine_record = (v.engine.perf_record() if hasattr(v.engine, "perf_record")
                           else None)
        v.close()
    figures = case_figures(case, data, variants)
    if layers:
        log(f"[{case.name}] per-layer costs of the fast DP step")
        figures["layers"] = layer_costs(model_case(case, data), case.tiers, roofline)
    return figures


def case_figures(case: Case, data: CaseData, variants: Sequence[Variant]) -> dict[str, Any]:
    """Per-variant figures (or why not run) and the case's time ratios."""
    figures: dict[str, Any] = {}
    steps_per_epoch = math.ceil(data.nominal_n / case.batch_size)
    for v in variants:
        entry: dict[str, Any] = {"framework": v.framework, "private": v.private}
        if v.skipped is not None or not v.steps_timed or not v.seconds:
            entry["skipped"] = v.skipped or "not run"
        else:
            per_step = sum(v.seconds) / v.steps_timed
            steps_per_round = v.steps_timed / len(v.seconds)
            per_round = [s / steps_per_round for s in v.seconds]
            entry.update(
                seconds_per_step=per_step,
                cpu_seconds_per_step=sum(v.cpu_seconds) / v.steps_timed,
                seconds_per_epoch=per_step * steps_per_epoch,
                examples_per_second=case.batch_size / per_step,
                round_spread=(max(per_round) - min(per_round)) / per_step,
                round_seconds_per_step=per_round,
                steps_timed=v.steps_timed, **v.memory)
        if v.compile:
            entry["compile"] = v.compile
        record = getattr(v, "engine_record", None)
        if record and record.get("routes") is not None:
            entry["routes"] = record["routes"]
            entry["routes_chosen_by"] = record["routes_chosen_by"]
        figures[v.name] = entry
    return {"model": case.model, "batch_size": case.batch_size,
            "input_shape": list(data.x.shape[1:]), "data": data.description,
            "steps_per_epoch": steps_per_epoch, "nominal_n": data.nominal_n,
            "rounds": case.rounds, "steps_per_round": case.steps,
            "slow_steps_per_round": case.slow_steps,
            "variants": figures, "ratios": ratios(figures),
            "cpu_ratios": ratios(figures, "cpu_seconds_per_step"),
            "ratio_spreads": ratio_spreads(figures)}


# ------------------------------------------------------------------------------ whole run
def machine() -> dict[str, Any]:
    """The machine and software the figures were measured on."""
    import opacus
    import tensorflow as tf
    import tensorflow_privacy
    import torch

    return {"platform": platform.platform(), "processor": platform.processor() or None,
            "cpu_count": os.cpu_count(), "python": platform.python_version(),
            "tensorflow": tf.__version__, "tensorflow_privacy": tensorflow_privacy.__version__,
            "torch": torch.__version__, "opacus": opacus.__version__,
            "torch_threads": torch.get_num_threads(),
            "tf_threads": {"intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
                           "inter_op": tf.config.threading.get_inter_op_parallelism_threads()}}


#: How the tiers run (the bench header): memory formats and engines.
TIER_SETTINGS = {
    "memory_format": {"tf_*": "NHWC (Keras's only layout on CPU)",
                      "torch_*, opacus_stock": "default (NCHW-contiguous, PyTorch's default)",
                      "torch_*_cl": "channels_last (perf.memory_format: channels_last)"},
    "engine": {"*_dp_fast*": "fast (Book-Keeping clipping: tfpipe.fast / torchpipe.fast; each "
                             "layer's route timed at warm-up, the fastest kept)",
               "*_dp_reference": "reference (tf.vectorized_map / Opacus GradSampleModule)",
               "*_plain*": "the engine's non-private step",
               "tf_privacy_stock, opacus_stock": "the libraries' stock paths",
               ", ".join(COMPILE_TIERS): "also tried compiled at warm-up (TF XLA, torch.compile; "
                                         "chunks padded to their size class), kept compiled "
                                         "only where faster"},
}


def select_cases(quick: bool, names: Sequence[str] | None) -> list[Case]:
    """The cases to run: all of the mode's, or the named ones (any mode's)."""
    if not names:
        return cases(quick)
    every = {c.name: c for c in cases(False)} | {c.name: c for c in cases(True)}
    unknown = [n for n in names if n not in every]
    if unknown:
        raise ConfigError(f"benchmark case {', '.join(unknown)} is not known; valid: "
                          + ", ".join(CASE_NAMES))
    return [every[n] for n in names]


def run_benchmark(*, quick: bool = False, data_dir: str | None = None,
                  case_names: Sequence[str] | None = None, sweep: bool = True,
                  isolate_sweep: bool = True, compile_steps: bool | None = None,
                  isolate_cases: bool | None = None,
                  log: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Run the cases and the sweep; one JSON-ready dict with every figure, the machine, the
    load, this CPU's roofline and the targets (met / missed). ``compile_steps``: try the
    "at its best" tiers compiled (default: unless ``quick``; compiling takes minutes).
    ``isolate_cases``: each case in a fresh process (:mod:`benchmarks.case_process`; default:
    whenever more than one case runs), so that one case's memory is given back before the
    next: in one process the full benchmark outgrew a 24 GB machine."""
    from benchmarks.roofline import measure
    from benchmarks.sweep import run_sweep

    selected = select_cases(quick, case_names)
    omp_policy = configure()
    compile_steps = (not quick) if compile_steps is None else compile_steps
    load_before = os.getloadavg()
    started = time.time()
    log("[roofline] peak FLOP/s and memory bandwidth")
    roofline = measure()
    loaded: dict[str, CaseData] = {}
    results: dict[str, Any] = {}
    compile_history: CompileHistory = {}
    isolate_cases = len(selected) > 1 if isolate_cases is None else isolate_cases
    descriptions: dict[str, str] = {}
    for case in selected:
        if isolate_cases:
            results[case.name], descriptions[case.data] = run_case_in_process(
                case, quick=quick, data_dir=data_dir, compile_steps=compile_steps,
                roofline=roofline, history=compile_history, log=log)
            continue
        if case.data not in loaded:
            loaded[case.data] = load_data(case.data, quick, data_dir)
            descriptions[case.data] = loaded[case.data].description
        results[case.name] = run_case(case, loaded[case.data], log,
                                      compile_steps=compile_steps, roofline=roofline,
                                      compile_history=compile_history)
    out: dict[str, Any] = {
        "quick": quick, "data": descriptions, "cases_isolated": isolate_cases,
        "machine": machine(), "loadavg_before": list(load_before),
        "wall_seconds": 0.0, "memory_method": memory_method(), "roofline": roofline,
        "settings": {"sigma": SIGMA, "clip": CLIP, "lr": LR, "optimizer": "sgd",
                     "omp_wait_policy": omp_policy, "physical_chunk": CHUNK,
                     "deterministic_kernels": True, "compiled_steps_tried": compile_steps,
                     **TIER_SETTINGS},
        "cases": results}
    if sweep:
        out["sweep"] = run_sweep(quick=quick, isolate=isolate_sweep, log=log)
    out["process_peak_rss_mb"] = max(
        (v.get("peak_rss_mb", 0.0) for case in results.values()
         for v in case["variants"].values()), default=None)
    out["loadavg_after"] = list(os.getloadavg())
    out["wall_seconds"] = time.time() - started
    out["targets"] = target_rows(out)
    return out

