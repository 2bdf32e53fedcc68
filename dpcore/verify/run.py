"""The check driver of ``dpcompare verify``: one configured DP step on one backend, every
engine that applies to the model (or the library recipe's own step), in seconds, training
nothing to the end.

For each step under test the driver builds, through the backend contract only
(:data:`dpcore.backend.Backend.ENGINES`, ``build_model``, ``library_step``), up to four copies
of the step with the verification optimizer (:mod:`dpcore.verify.steppers`): ``free`` (the
mechanism's noise scale set to 0), ``raw`` (no noise and no clipping: only to measure the
adversarial example's gradient), ``noisy`` (as configured) and ``other-key`` (as configured,
with another seed), and runs:

1. ``sensitivity`` and ``divisor`` on ``free`` (:mod:`dpcore.verify.clipping`);
2. the noise tests on ``noisy`` minus ``free`` on one batch of at least 2 chunks,
   :data:`NOISE_STEPS` steps from the same weights, and ``other-key`` for :data:`KEY_STEPS`
   steps (an engine's on an empty batch: its noise alone; a library step's on the same batch)
   (:mod:`dpcore.verify.noise`);
3. the accounting tests (:mod:`dpcore.verify.accounting`).

The engines of one run share what does not depend on the engine: the weights at which the
probe example's gradient is at least :data:`RAW_TARGET` C (measured once, on the first
engine's step without clipping) and the replay of the run's sampler.

With ``processes > 1`` the engines are checked at the same time, each after the first in a
fresh (spawned) Python process of its own that imports the backend from its files: the
adversarial weights are measured first, in this process, and handed to every engine, so the
report is the one a serial check gives (the same steps, weights, batches and noise keys; only
the seconds differ). A patch made in this process (a test's monkeypatch) does not reach the
other processes: check one engine at a time to see it.

Seeded and deterministic: the probe examples come from a generator of the config's seed, the
noise from the engines' own seeded generators. The false-alarm rate of every statistical test
is in :data:`ALPHA` (per step checked); the others are exact up to the float allowance they
print.
"""

from __future__ import annotations

import dataclasses
import math
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, cast

import numpy as np

from dpcore.architectures import architecture
from dpcore.audit.faults import NO_CLIP_NORM
from dpcore.backend import Backend
from dpcore.config import PerfSpec, RunConfig
from dpcore.data.dataset import Dataset
from dpcore.errors import ConfigError
from dpcore.mechanisms import dpsgd_names, get_mechanism
from dpcore.proved import ADD_REMOVE, REPLACE_ONE, StepFacts, proved_dpsgd
from dpcore.recipes import check_backend_recipe, divisor_rule, library_normalisation
from dpcore.sampling import batches_for
from dpcore.shared_noise import framework_mechanism, shared_noise_for, uses_shared_noise
from dpcore.trainloop import Chunk, StepMechanism, library_epochs, model_inputs, step_mechanism
from dpcore.verify import accounting, clipping, noise
from dpcore.verify.accounting import AccountantView
from dpcore.verify.clipping import Batch
from dpcore.verify.report import CheckResult, StepReport, VerifyReport
from dpcore.verify.stats import gaussianise
from dpcore.verify.steppers import (
    EngineStepper,
    LibraryStep,
    Measurement,
    Stepper,
    measure,
    norm,
    verification_config,
)

#: False-alarm rate of each statistical check, per step checked.
ALPHA: dict[str, float] = {
    "noise-scale": 1e-4, "noise-coordinates": 1e-4, "noise-mean": 1e-4, "noise-fresh": 1e-4,
    "noise-independence": 1e-4, "noise-keys": 1e-4, "accounting-sigma": 1e-4,
    "accounting-sampling": 1e-4,
}
#: Noisy steps from the same weights on one batch (the noise tests' T).
NOISE_STEPS = 8
#: Steps of the run with another noise key.
KEY_STEPS = 2
#: The adversarial example's gradient norm, at least, in units of C.
RAW_TARGET = 1e3
#: Offset of the other-key run's seed.
OTHER_KEY_OFFSET = 1_000_003
#: Tag of the probe examples' generator (a stream of its own).
PROBE_TAG = 0x7E21F

Log = Callable[[str], None]

MEASURED_HOW = [
    "each measured step starts from weights set by verify and uses a verification optimizer "
    "(plain SGD, lr 1, momentum 0): the update w0 - w1 is minus the privatised gradient; the "
    "configured optimizer (momentum, Adam) is not part of what is checked",
    "sensitivity and divisor: the same step with its noise scale set to 0; noise: the noisy "
    "step minus the noise-free one on the same batch; no audit canaries are added",
]


def verify(config: RunConfig, dataset: Dataset, backend: Backend, *,
           engine: str = "all", perf: PerfSpec | None = None, log: Log | None = None,
           processes: int | str = 1) -> VerifyReport:
    """Check one configured DP step of ``backend`` (see the module docstring).

    Args:
        config: the configuration (as ``dpcompare train`` takes it).
        dataset: its data set, as :func:`dpcore.pipeline.prepare_dataset` gives it.
        backend: the backend (:func:`dpcore.backend.load_backend`).
        engine: ``all`` (every engine that applies to the model), ``fast`` or ``reference``;
            a ``library`` recipe is checked on its library's own step.
        perf: performance switches the engines are built with (chunking is verify's own).
        log: receives a line as each step starts (from another process: printed to its
            standard error instead).
        processes: how many engines may be checked at the same time, each beyond the first
            in a process of its own (1: one after another, in this process); ``auto``: every
            engine at once, up to the machine's CPUs, where the backend gains by it
            (:func:`auto_processes`), else 1.

    Raises:
        ConfigError: a mechanism without a DP-SGD step, an engine that does not apply.
    """
    from dpcore.pipeline import apply_data_factors, privacy_plan

    perf = perf or PerfSpec()
    known = get_mechanism(config.privacy.mechanism)
    if not known.noises_gradients:
        raise ConfigError(
            f"privacy.mechanism={config.privacy.mechanism!r} has no DP-SGD step to verify; "
            f"valid: a DP-SGD mechanism ({', '.join(dpsgd_names())})")
    if engine not in ("all", "fast", "reference"):
        raise ConfigError(f"--engine {engine!r} is not known; valid: all, fast, reference")
    if processes != "auto" and (isinstance(processes, bool) or not isinstance(processes, int)
                                or processes < 1):
        raise ConfigError(f"processes={processes!r} is not a whole number >= 1 or 'auto'; "
                          "valid: 1 (one engine after another), more (engines checked at the "
                          "same time) or auto")
    check_backend_recipe(config, backend.NAME)
    # the framework's process-wide state (seeds, deterministic kernels, threads) set as
    # training sets it, here and in every other process of the check, so that a check does
    # not depend on what ran before it in this process (an earlier training switches
    # TensorFlow's op determinism on) and engines checked elsewhere compute as here
    backend.configure(config.seed, perf)
    dataset = apply_data_factors(config, dataset)
    plan = privacy_plan(config, len(dataset.x_train), dataset.ldp)
    mechanism = step_mechanism(config, plan)
    report = VerifyReport(backend.NAME, config.config_hash, measured_how=list(MEASURED_HOW))
    context = _Context(config, dataset, plan, mechanism, known.sampler.name, backend.NAME)
    if config.recipe == "library":
        if engine != "all":
            raise ConfigError(f"--engine {engine} does not apply to recipe=library (the "
                              "library's own step runs); valid: all")
        steps = {"library": _library_factory(backend, config, dataset, plan, perf)}
    else:
        steps = _engine_factories(backend, context, engine, perf, report)
    names = list(steps)
    if processes == "auto":
        processes = auto_processes(backend, config, dataset, len(names))
    if int(processes) > 1 and len(names) > 1 and config.recipe != "library":
        report.steps += _check_engines_in_processes(names, steps, context, perf,
                                                    int(processes), log)
        return report
    for name, (factory, fixed) in steps.items():
        if log is not None:
            log(f"verify {backend.NAME}: checking the {name} step")
        report.steps.append(_check_step(name, factory, fixed, context))
    return report


def auto_processes(backend: Backend, config: RunConfig, dataset: Dataset, engines: int) -> int:
    """What ``processes="auto"`` means for this check: every engine at once (up to the CPUs)
    where the model has at least the backend's ``VERIFY_PARALLEL_MIN_WEIGHTS`` weights, else
    1 (measured per backend: see that attribute)."""
    threshold = getattr(backend, "VERIFY_PARALLEL_MIN_WEIGHTS", None)
    if threshold is None or engines < 2:
        return 1
    shapes = architecture(config.model, dataset.input_shape, dataset.n_classes,
                          dataset.vocabulary_size).weight_shapes()
    weights = sum(math.prod(shape) for shape in shapes.values())
    return min(engines, os.cpu_count() or 1) if weights >= threshold else 1


def _check_engines_in_processes(names: list[str], steps: dict[str, tuple[Factory, int | None]],
                                ctx: _Context, perf: PerfSpec, processes: int,
                                log: Log | None) -> list[StepReport]:
    """The engines' checks at the same time: the first in this process, the others each in a
    spawned process (at most ``processes`` at once), after the shared adversarial weights are
    measured here; the reports in ``names``' order."""
    first = names[0]
    factory = steps[first][0]
    config = verification_config(ctx.config)
    free = factory("free", config)
    try:
        w_init = {k: np.array(v) for k, v in free.get_weights().items()}
    finally:
        free.close()
    _shared_adversarial(ctx, factory, config, w_init, None, 1.0, first)
    portable = dataclasses.replace(ctx, shared={"adversarial": ctx.shared["adversarial"]})
    spawn = multiprocessing.get_context("spawn")  # a fresh interpreter: no forked TF / torch
    with ProcessPoolExecutor(max_workers=min(processes, len(names)) - 1,
                             mp_context=spawn) as pool:
        others: dict[str, Future[StepReport]] = {
            name: pool.submit(_check_engine_elsewhere, name, portable, perf, log is not None)
            for name in names[1:]}
        if log is not None:
            log(f"verify {ctx.backend}: checking the {first} step (and "
                f"{', '.join(names[1:])} in {len(names) - 1} other process(es))")
        reports = {first: _check_step(first, factory, None, ctx)}
        for name, future in others.items():
            try:
                reports[name] = future.result()
            except BrokenProcessPool as error:
                raise RuntimeError(
                    f"verify {ctx.backend}: the process checking the {name} step ended "
                    f"abruptly ({error}; out of memory?); run again with --processes 1 to "
                    "check the engines one after another in one process") from error
    return [reports[name] for name in names]


def _check_engine_elsewhere(name: str, ctx: _Context, perf: PerfSpec, logging: bool
                            ) -> StepReport:
    """One engine's checks in a process of its own (see :func:`_check_engines_in_processes`):
    the backend loaded here, the engine built on a model of its own."""
    from dpcore.backend import load_backend

    backend = load_backend(ctx.backend)
    backend.configure(ctx.config.seed, perf)
    if logging:
        print(f"verify {ctx.backend}: checking the {name} step (process {name})",
              file=sys.stderr, flush=True)
    return _check_step(name, _engine_factory(backend, ctx, name, perf), None, ctx)


@dataclasses.dataclass(frozen=True)
class _Context:
    config: RunConfig
    dataset: Dataset
    plan: Any
    mechanism: StepMechanism
    law: str
    backend: str
    #: what the steps of one run share: the adversarial weights of the engines (same initial
    #: weights, same model), the replayed sampler of the harmonised recipe
    shared: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def k(self) -> int:
        return self.config.factors.microbatch_size

    @property
    def clip(self) -> float:
        return float(self.config.privacy.max_grad_norm)

    @property
    def kind(self) -> str:
        return str(get_mechanism(self.config.privacy.mechanism).clip_norm)


#: ``(factory(kind, config) -> Stepper, the fixed batch size or None)`` of a step.
Factory = Callable[[str, RunConfig], Stepper]


def _engine_factories(backend: Backend, ctx: _Context, engine: str, perf: PerfSpec,
                      report: VerifyReport) -> dict[str, tuple[Factory, int | None]]:
    """The engines to check, each as a stepper factory; engines that do not apply are
    recorded in ``report.not_checked`` (or refused when asked for by name)."""
    unsupported = backend.unsupported_fast_layers(_stepper_model(backend, ctx, ctx.config))
    why_not_fast = None
    if ctx.k > 1:
        why_not_fast = "factors.microbatch_size > 1 runs on the reference engine only"
    elif unsupported:
        why_not_fast = "no fast rule for layer " + ", ".join(unsupported)
    names = ["fast", "reference"] if engine == "all" else [engine]
    if engine == "fast" and why_not_fast:
        raise ConfigError(f"--engine fast does not apply: {why_not_fast}; valid: reference "
                          "or all")
    if why_not_fast and "fast" in names:
        names.remove("fast")
        report.not_checked["fast"] = why_not_fast
    return {name: (_engine_factory(backend, ctx, name, perf), None) for name in names}


def _engine_factory(backend: Backend, ctx: _Context, name: str, perf: PerfSpec) -> Factory:
    def make(kind: str, config: RunConfig) -> Stepper:
        model = _stepper_model(backend, ctx, config)
        mech = ctx.mechanism
        if kind == "free":
            mech = dataclasses.replace(mech, noise_scale=0.0, noise_multiplier=0.0)
        elif kind == "raw":
            mech = dataclasses.replace(mech, clip_norm=NO_CLIP_NORM, noise_scale=0.0,
                                       noise_multiplier=0.0)
        built = backend.ENGINES[name](model, config, framework_mechanism(config, mech), perf)
        shared = None
        if kind == "noisy" and uses_shared_noise(config, mech):
            shared = shared_noise_for(config, mech, {k: v.shape for k, v in
                                                     built.get_weights().items()})
        return EngineStepper(built, config, ctx.plan.batches.expected_batch_size, shared)

    return make


def _stepper_model(backend: Backend, ctx: _Context, config: RunConfig) -> Any:
    """The model a new engine stepper drives, at its initial weights: a model built for it,
    or, where the backend's engines may share one (``ENGINES_SHARE_MODELS``), the one model
    of this ``verify`` set back to its initial weights (every measurement sets its own
    weights first; a Keras ResNet-18 takes about 1 s to build, and a ``verify`` of both
    engines opens seven steppers). The weights of ``config.seed``, or of
    ``factors.initial_weights``."""
    from dpcore.pipeline import factor_initial_weights

    dataset = ctx.dataset
    cached = ctx.shared.get("model") if backend.ENGINES_SHARE_MODELS else None
    if cached is not None:
        model, weights = cached
        backend.set_weights(model, weights)
        return model
    model = backend.build_model(config.model, dataset.input_shape, dataset.n_classes,
                                seed=config.seed, vocab_size=dataset.vocabulary_size)
    initial = factor_initial_weights(config, dataset)
    if initial is not None:
        backend.set_weights(model, initial)
    if backend.ENGINES_SHARE_MODELS:
        ctx.shared["model"] = (model, backend.get_weights(model))
    return model


def _library_factory(backend: Backend, config: RunConfig, dataset: Dataset, plan: Any,
                     perf: PerfSpec) -> tuple[Factory, int | None]:
    """The library recipe's step: the backend's ``library_step`` with the plan's noise (or 0)
    and the config's clip norm (or none)."""
    holder: dict[str, int | None] = {}

    def make(kind: str, cfg: RunConfig) -> Stepper:
        step_plan = plan
        if kind in ("free", "raw"):
            step_plan = dataclasses.replace(plan, noise_multiplier=0.0)
        if kind == "raw":
            cfg = dataclasses.replace(cfg, privacy=dataclasses.replace(
                cfg.privacy, max_grad_norm=NO_CLIP_NORM))
        step = backend.library_step(cfg, dataset, step_plan, perf)
        holder["fixed"] = step.fixed_batch_size
        return step

    return make, None


def _probe_examples(ctx: _Context, count: int) -> np.ndarray:
    """``count`` distinct training indices (repeats when the set is smaller), seeded."""
    rng = np.random.default_rng([int(ctx.config.seed), PROBE_TAG])
    n = len(ctx.dataset.x_train)
    order = rng.permutation(n)
    if count > n:
        order = np.resize(order, count)
    return order[:count]


def _batch(ctx: _Context, indices: Sequence[int], label: str, fixed: bool) -> Batch:
    """Chunks of whole microbatches, at least 2 where the batch allows (the accumulation
    path runs), one chunk for a library step (it takes the batch whole)."""
    idx = np.asarray(indices, dtype=np.int64)
    x = model_inputs(ctx.dataset.x_train[idx], ctx.dataset.task)
    y = np.asarray(ctx.dataset.y_train[idx])
    n, k = len(idx), ctx.k
    if fixed:
        return Batch([(x, y)], n, label)
    units = max(1, n // k)
    size = k * max(1, math.ceil(units / 3))
    chunks: list[Chunk] = [(x[i:i + size], y[i:i + size]) for i in range(0, n, size)]
    return Batch(chunks, n, label)


def _last_layer_key(ctx: _Context, weights: dict[str, np.ndarray]) -> str:
    """The first weight of the model's last weighted layer (its kernel), in forward order."""
    data = ctx.dataset
    keys = list(architecture(ctx.config.model, data.input_shape, data.n_classes,
                             data.vocabulary_size).weight_shapes())
    keys = [k for k in keys if k in weights] or list(weights)
    layer = keys[-1].rsplit(".", 1)[0]
    return next(k for k in keys if k.rsplit(".", 1)[0] == layer)


def _check_step(name: str, factory: Factory, fixed_declared: int | None, ctx: _Context
                ) -> StepReport:
    start = time.perf_counter()
    step = StepReport(name)
    config = verification_config(ctx.config)
    free = factory("free", config)
    try:
        fixed = getattr(free, "fixed_batch_size", None) or fixed_declared
        explicit = None if _is_library(free) or fixed else 1.0
        w_init = {k: np.array(v) for k, v in free.get_weights().items()}
        library = _is_library(free)
        measured = ((*_adversarial_weights(ctx, factory, config, w_init, fixed, explicit), name)
                    if library else
                    _shared_adversarial(ctx, factory, config, w_init, fixed, explicit, name))
        w_big, raw_norm, scale, measured_on = measured
        step.facts["adversarial example"] = (
            f"raw gradient norm {raw_norm / ctx.clip:.3g} C (last layer "
            f"{_last_layer_key(ctx, w_init)} scaled by {scale:g}; measured on the {measured_on} "
            "step without clipping)")
        if raw_norm < RAW_TARGET * ctx.clip:
            step.facts["adversarial example"] += f"; below the target {RAW_TARGET:g} C"
        step.results += _sensitivity(ctx, free, w_big, fixed, explicit, step)
        step.results += _divisor(ctx, free, w_big, fixed, step)
        step.results += _noise_and_accounting(ctx, factory, config, free, w_init, fixed,
                                              step)
    finally:
        free.close()
    step.seconds = time.perf_counter() - start
    return step


def _shared_adversarial(ctx: _Context, factory: Factory, config: RunConfig,
                        w_init: dict[str, np.ndarray], fixed: int | None,
                        explicit: float | None, name: str
                        ) -> tuple[dict[str, np.ndarray], float, float, str]:
    """The adversarial weights every harmonised engine's check uses (the engines share one
    model init): measured on the first engine that asks (``name``), kept in ``ctx.shared``,
    and the same tuple for every later engine (and for the engines checked in other
    processes, which are handed it)."""
    if "adversarial" not in ctx.shared:
        ctx.shared["adversarial"] = (
            *_adversarial_weights(ctx, factory, config, w_init, fixed, explicit), name)
    return ctx.shared["adversarial"]


def _adversarial_weights(ctx: _Context, factory: Factory, config: RunConfig,
                         w_init: dict[str, np.ndarray], fixed: int | None,
                         explicit: float | None
                         ) -> tuple[dict[str, np.ndarray], float, float]:
    """Weights at which the probe example's gradient is at least :data:`RAW_TARGET` C (its
    raw norm measured on the step without clipping), the norm and the last layer's scale."""
    key = _last_layer_key(ctx, w_init)
    z = _probe_examples(ctx, 1)
    n = fixed or ctx.k
    batch = _batch(ctx, np.repeat(z, n), "raw", bool(fixed))
    raw = factory("raw", config)
    try:
        def raw_norm(scale: float) -> tuple[dict[str, np.ndarray], float]:
            weights = dict(w_init)
            weights[key] = (w_init[key].astype(np.float64) * scale).astype(np.float32)
            m = measure(raw, weights, batch.chunks, batch.n_examples, explicit)
            return weights, norm(m.noised_sum(), ctx.kind) / (n / ctx.k)

        scale = 1.0
        weights, value = raw_norm(scale)
        if value > 0 and math.isfinite(value):  # gradients below the last layer scale with it
            scale = max(1.0, float(f"{1.5 * RAW_TARGET * ctx.clip / value:.2g}"))
        for _ in range(4):
            weights, value = raw_norm(scale)
            if value >= RAW_TARGET * ctx.clip or not math.isfinite(value):
                break
            scale *= 3
        return weights, value, scale
    finally:
        raw.close()


def _relation(ctx: _Context) -> tuple[str, float]:
    """The neighbouring relation the proved rule assumes and its bound in units of C."""
    config, plan = ctx.config, ctx.plan
    facts = StepFacts(
        mechanism=config.privacy.mechanism, noise_multiplier=plan.noise_multiplier,
        sampling=config.privacy.sampling, sampling_rate=plan.batches.sampling_rate,
        steps=plan.batches.steps, steps_per_epoch=plan.batches.steps_per_epoch,
        delta=plan.delta, microbatch_size=ctx.k,
        divisor=divisor_rule(config.privacy.sampling, config.factors.normalisation
                             if config.recipe != "library" else
                             library_normalisation(config, ctx.backend), ctx.k),
    )
    relation = proved_dpsgd(facts).relation
    if relation not in (ADD_REMOVE, REPLACE_ONE):  # no bound proved: the claim's relation
        relation = ADD_REMOVE if config.privacy.sampling == "poisson" else REPLACE_ONE
    if relation == ADD_REMOVE:
        return relation, 2.0 if ctx.k > 1 else 1.0
    return relation, 2.0


def _sensitivity(ctx: _Context, free: Stepper, w_big: dict[str, np.ndarray],
                 fixed: int | None, explicit: float | None, step: StepReport
                 ) -> list[CheckResult]:
    relation, bound = _relation(ctx)
    k = ctx.k
    n_base = fixed or (5 if k == 1 else 2 * k)
    pool = _probe_examples(ctx, 1 + 2 * n_base + k)
    z, base_idx, spare = pool[0], list(pool[1:1 + n_base]), list(pool[1 + n_base:])
    is_fixed = bool(fixed)
    base = _batch(ctx, base_idx, "base", is_fixed)
    neighbours: list[tuple[Batch, float]] = []
    if relation == ADD_REMOVE and not fixed:
        neighbours.append((_batch(ctx, [*base_idx, z], "one example added", False), bound))
        neighbours.append((_batch(ctx, base_idx[1:], "first example removed", False), bound))
    else:
        replaced = list(base_idx)
        replaced[len(replaced) // 2] = z
        neighbours.append((_batch(ctx, replaced, "one example replaced", is_fixed), bound))
        if k > 1:
            whole = list(spare[:k]) + base_idx[k:]
            neighbours.append((_batch(ctx, whole, "first microbatch replaced", is_fixed),
                               bound))
    step.facts["sensitivity batches"] = (
        f"{n_base} examples in {len(base.chunks)} chunk(s); relation: {relation}; "
        f"divisor {'1 (explicit)' if explicit else 'configured'}")
    return clipping.sensitivity(free, w_big, base, neighbours, ctx.clip, ctx.kind, explicit,
                                relation.split(" (")[0])


def _divisor(ctx: _Context, free: Stepper, w_big: dict[str, np.ndarray], fixed: int | None,
             step: StepReport) -> list[CheckResult]:
    k, b = ctx.k, ctx.plan.batches.expected_batch_size
    z = _probe_examples(ctx, 1)[0]
    sizes = [fixed] if fixed else sorted({k, k * min(max(2, b // (2 * k)), 8)})
    batches = [(_batch(ctx, [z] * n, f"{n} copies of one example", bool(fixed)), n / k)
               for n in sizes]
    step.facts["divisor batches"] = ", ".join(str(n) for n in sizes) + f" examples (B = {b})"
    return clipping.divisor_check(free, w_big, batches, ctx.clip, ctx.kind)


def _noise_and_accounting(ctx: _Context, factory: Factory, config: RunConfig, free: Stepper,
                          w_init: dict[str, np.ndarray], fixed: int | None, step: StepReport
                          ) -> list[CheckResult]:
    n = fixed or 3 * ctx.k
    batch = _batch(ctx, _probe_examples(ctx, 1 + n)[1:], "noise", bool(fixed))
    baseline = measure(free, w_init, batch.chunks, batch.n_examples)
    divisor = baseline.divisor
    scale = ctx.plan.noise_multiplier * ctx.clip
    if scale <= 0:
        raise ConfigError("the plan's noise multiplier is 0: nothing to verify (no noise); "
                          "valid: a noise multiplier > 0 or a target epsilon")
    pooled = [0.0, 0]
    frozen = set(ctx.config.model.freeze)  # layers that are not trained get no noise
    keys = [k for k in w_init if k.rsplit(".", 1)[0] not in frozen]

    def noise_of(stepper: Stepper, steps: int) -> dict[str, np.ndarray]:
        rows: dict[str, list[np.ndarray]] = {k: [] for k in keys}
        for _ in range(steps):
            m = measure(stepper, w_init, batch.chunks, batch.n_examples, rounding=False)
            for key in keys:
                scaled = (m.update[key] - baseline.update[key]).ravel() * divisor / scale
                if ctx.law == "laplace":
                    pooled[0] += float(np.sum(np.abs(scaled)))
                else:
                    pooled[0] += float(np.sum(np.square(scaled)))
                pooled[1] += scaled.size
                rows[key].append(gaussianise(scaled, ctx.law).astype(np.float32))
        return {k: np.stack(v) for k, v in rows.items()}

    noisy = factory("noisy", config)
    try:
        z = noise_of(noisy, NOISE_STEPS)
    finally:
        noisy.close()
    main_pooled = (pooled[0], pooled[1])
    main_chunks, main_divisor = len(batch.chunks), divisor
    if not fixed and not _is_library(free):  # an engine: its noise alone, on an empty batch
        batch = Batch([], 0, "empty")
        baseline = Measurement({k: np.zeros_like(v, dtype=np.float64) for k, v in
                                w_init.items()}, free.divisor_of(0), {})
        divisor = baseline.divisor
    other = factory("noisy", verification_config(ctx.config, ctx.config.seed + OTHER_KEY_OFFSET))
    try:
        z_other = noise_of(other, KEY_STEPS)
    finally:
        other.close()
    step.facts["noise batch"] = (
        f"{n} examples in {main_chunks} chunk(s), {NOISE_STEPS} steps, divisor "
        f"{main_divisor:g}, noise scale sigma C = {scale:.6g} ({ctx.law}); other key: "
        f"{KEY_STEPS} steps ({'on an empty batch' if batch.n_examples == 0 else 'same batch'})"
        + (f"; frozen layers left out: {', '.join(sorted(frozen))}" if frozen else ""))
    results = []
    results += noise.noise_scale(z, ALPHA["noise-scale"])
    results += noise.noise_coordinates(z, ALPHA["noise-coordinates"])
    results += noise.noise_mean(z, ALPHA["noise-mean"])
    results += noise.noise_fresh(z, ALPHA["noise-fresh"])
    results += noise.noise_independence(z, ALPHA["noise-independence"])
    results += noise.noise_keys(z, z_other, ALPHA["noise-keys"])
    view = _accountant_view(ctx, free)
    results.append(accounting.sigma_result(main_pooled[0], main_pooled[1], ctx.law, view,
                                           ALPHA["accounting-sigma"]))
    if _is_library(free):
        replayed = accounting.replay(view)
    else:  # the harmonised recipe's sampler is the same for every engine: replayed once
        if "replay" not in ctx.shared:
            ctx.shared["replay"] = accounting.replay(view)
        replayed = ctx.shared["replay"]
    results += accounting.sampling_results(view, ALPHA["accounting-sampling"], replayed)
    results += accounting.steps_results(view, replayed)
    step.facts["accountant"] = (
        f"{view.source}: q = {view.sampling_rate:.6g}, {view.steps} steps, sigma "
        f"{view.noise_multiplier:.6g}")
    return results


def _is_library(stepper: Stepper) -> bool:
    """True for a library recipe's step (:class:`~dpcore.verify.steppers.LibraryStep`)."""
    return hasattr(stepper, "index_batches")


def _accountant_view(ctx: _Context, stepper: Stepper) -> AccountantView:
    """What the accountant was given for this step, and the sampler that ran."""
    from dpcore.accounting import dpsgd_event

    plan, config = ctx.plan, ctx.config
    if _is_library(stepper):
        library = cast(LibraryStep, stepper)
        epochs = library_epochs(plan)
        steps = epochs * library.steps_per_epoch
        event = dpsgd_event(plan.mechanism, plan.noise_multiplier, library.sampling_rate,
                            steps)
        return AccountantView(
            event, plan.noise_multiplier, library.sampling, library.sampling_rate, steps,
            plan.batches.n_examples, config.train.batch_size, library.steps_per_epoch,
            lambda: library.index_batches(epochs), "the library's loader")
    batches = plan.batches
    return AccountantView(
        plan.event, plan.noise_multiplier, config.privacy.sampling, batches.sampling_rate,
        batches.steps, batches.n_examples, batches.expected_batch_size,
        batches.steps_per_epoch,
        lambda: batches_for(batches, config.privacy.sampling, config.seed),
        "dpcore.sampling (the run's seed)")
