"""Steady-state training speed and peak memory of every DP / non-private variant, in one process.

For each case (model, batch size B) every variant gets its own model and step engine; each is
first warmed up (its first steps trace / compile and are not timed), then the variants are
timed in alternating rounds (the order rotates every round), so that a change of machine load
hits them all alike. A "step" is one logical batch of B examples drawn uniformly at random
(fixed size, no Poisson sampling), split into physical chunks of at most 256 examples exactly
as :func:`dpcore.trainloop.run_training` does (the uint8 -> float conversion included).
Seconds per epoch are extrapolated: ``seconds per step * ceil(N / B)`` with N the case's
nominal training-set size (60000 for MNIST-sized data) -- no variant runs a whole epoch.

Variants (DP ones: Gaussian DP-SGD, C = 1, sigma = 1, SGD lr 0.1, noise once per batch):

* ``tf_plain``: the tfpipe engine's non-private step (a Keras model, ``tf.function`` of the
  summed-loss gradient, Keras SGD);
* ``tf_dp_reference``: tfpipe's reference DP engine (TF Privacy query + optimizer,
  ``tf.vectorized_map`` per-example gradients);
* ``tf_dp_fast``: :class:`tfpipe.fast.FastTfStepEngine` (same update, layer-wise clipping);
* ``tf_privacy_keras``: TF Privacy's own ``DPKerasSGDOptimizer`` with
  ``num_microbatches = B`` via ``model.train_on_batch`` (batch 256 only);
* ``torch_plain``: the torchpipe engine's non-private step;
* ``torch_dp_fast``: :class:`torchpipe.fast.FastTorchStepEngine` (same update, layer-wise
  clipping: the same algorithm as ``tf_dp_fast``);
* ``opacus_<mode>``: torchpipe's Opacus engine with grad-sample mode ``hooks``,
  ``functorch`` or ``ew`` (a mode that fails on the model is recorded as unsupported).

Peak memory: the process's peak resident set size (``VmHWM`` of ``/proc/self/status``) during
the variant's timed steps, reset before each timed block through ``/proc/self/clear_refs``
(Linux); reported as the peak and as the increase over the RSS at the block's start, and the
same increase during the variant's warm-up (its first allocations). It is process-wide (all
frameworks, models and data stay loaded, and the allocators keep freed memory), so only the
increases are specific to the variant, and they depend on what ran before it. Where the reset
is unavailable ``ru_maxrss`` (monotone) is reported instead.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import resource
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpcore.config import DataSpec, ModelSpec, PerfSpec, PrivacySpec, RunConfig, TrainSpec
from dpcore.errors import DpCompareError
from dpcore.sampling import chunk_indices
from dpcore.trainloop import StepMechanism, model_inputs

#: OpenMP wait policy the benchmark asks for unless the environment sets one. Measured on this
#: 2-core machine under a load average of ~6: a plain torch cnn4 step (B=256, 2 threads) took
#: 0.196 s with libgomp's default (spinning) workers and 0.032 s with PASSIVE ones; TF's own
#: thread pool was not affected. The spinning default makes torch collapse on a shared machine.
OMP_WAIT_POLICY = "PASSIVE"

#: Physical chunk size of every DP variant (PerfSpec's default).
CHUNK = 256
#: Nominal training-set size of the MNIST-sized cases (the epoch the figures extrapolate to).
MNIST_N = 60000
OPACUS_MODES = ("hooks", "functorch", "ew")
#: Why TF Privacy's own Keras optimizer is not run at batch 1024 (``tfpipe.dp``'s finding).
KERAS_DP_OOM_REASON = (
    "out of memory (not run): DPKerasSGDOptimizer with num_microbatches=1024 takes "
    "tape.jacobian of the 1024 microbatch losses over the whole batch; it ran out of memory "
    "for cnn4 at 1024 when tried (see tfpipe/dp.py)")
SIGMA = 1.0
CLIP = 1.0
LR = 0.1

#: A step function: one logical batch (its physical chunks) -> summed loss.
StepFn = Callable[[list[tuple[np.ndarray, np.ndarray]]], float]


@dataclass(frozen=True)
class Case:
    """One benchmark case.

    Attributes:
        name: label, e.g. ``cnn4_b1024``.
        model: model zoo name.
        batch_size: logical batch B.
        shape: input shape (H, W, C).
        nominal_n: training-set size an epoch is extrapolated to.
        rounds: timed rounds (variants alternate within a round).
        steps: timed steps per variant per round.
        warmup: untimed steps per variant first (tracing / compilation).
        keras_dp: run TF Privacy's own DPKerasSGDOptimizer (else record why not).
        keras_dp_reason: why it is not run.
        slow_steps: cap on the timed steps per round of ``tf_privacy_keras`` (its per-batch
            jacobian makes a step ~100x slower than the others).
    """

    name: str
    model: str
    batch_size: int
    shape: tuple[int, int, int] = (28, 28, 1)
    nominal_n: int = MNIST_N
    rounds: int = 3
    steps: int = 10
    warmup: int = 2
    keras_dp: bool = False
    keras_dp_reason: str = ""
    slow_steps: int = 2

    @property
    def steps_per_epoch(self) -> int:
        """Logical steps of one epoch of ``nominal_n`` examples."""
        return math.ceil(self.nominal_n / self.batch_size)


def cases(quick: bool) -> list[Case]:
    """The full benchmark's cases, or ``--quick``'s (fewer steps, no resnet18)."""
    if quick:
        return [Case("cnn4_b256", "cnn4", 256, rounds=1, steps=2, warmup=1, keras_dp=True,
                     slow_steps=1),
                Case("cnn4_b1024", "cnn4", 1024, rounds=1, steps=1, warmup=1,
                     keras_dp_reason=KERAS_DP_OOM_REASON)]
    return [
        Case("cnn4_b256", "cnn4", 256, rounds=3, steps=40, keras_dp=True),
        Case("cnn4_b1024", "cnn4", 1024, rounds=3, steps=15, keras_dp_reason=KERAS_DP_OOM_REASON),
        Case("resnet18_b64", "resnet18", 64, rounds=2, steps=2, warmup=1,
             keras_dp_reason="not run: TF Privacy's Keras optimizer is measured on cnn4 only"),
    ]


# ------------------------------------------------------------------------------ memory
def _status_kib(key: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak() -> bool:
    """Reset the kernel's peak-RSS mark of this process (Linux >= 4.0); False if impossible."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


@contextlib.contextmanager
def peak_rss() -> Iterator[dict[str, float]]:
    """Measures the block's peak RSS (MiB) and its increase over the RSS at the start."""
    out: dict[str, float] = {}
    resettable = _reset_peak()
    start = _status_kib("VmRSS") if resettable else None
    yield out
    if resettable and start is not None:
        peak = _status_kib("VmHWM") or 0
        out.update(peak_rss_mb=peak / 1024.0, peak_increase_mb=max(0, peak - start) / 1024.0)
    else:
        out.update(peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
                   peak_increase_mb=math.nan)


def memory_method() -> str:
    """How :func:`peak_rss` measures on this machine (for the report)."""
    if _reset_peak():
        return ("peak RSS (VmHWM) of the whole process during the variant's timed steps, reset "
                "before each timed block via /proc/self/clear_refs; 'increase' = peak minus the "
                "RSS at the block's start")
    return "ru_maxrss of the process (monotone: a later variant cannot report less)"


# ------------------------------------------------------------------------------ data
def load_images(quick: bool, data_dir: str | None) -> tuple[np.ndarray, np.ndarray, str]:
    """MNIST training images (uint8 [N, 28, 28, 1]) from the data root, else random data.

    Returns:
        images, labels, and a description of which was used.
    """
    with contextlib.suppress(DpCompareError, OSError):
        from dpcore.data.loading import load_dataset

        ds = load_dataset(DataSpec(name="mnist"), data_dir)
        x, y = ds.x_train, ds.y_train
        if quick:
            x, y = x[:4096], y[:4096]
        return x, y, f"real MNIST ({len(x)} training images from {ds.source})"
    rng = np.random.default_rng(0)
    n = 4096 if quick else MNIST_N
    return (rng.integers(0, 256, (n, 28, 28, 1), dtype=np.uint8),
            rng.integers(0, 10, n).astype(np.int64),
            f"random uint8 data of MNIST's shape ({n}x28x28x1; no MNIST under the data root)")


# ------------------------------------------------------------------------------ variants
@dataclass
class Variant:
    """One way of training: its step function, or why it was not run."""

    name: str
    framework: str
    private: bool
    step: StepFn | None = None
    skipped: str | None = None
    close: Callable[[], None] = lambda: None
    seconds: list[float] = field(default_factory=list)
    steps_timed: int = 0
    memory: dict[str, float] = field(default_factory=dict)


def _config(model: str, batch: int, private: bool) -> RunConfig:
    privacy = (PrivacySpec(mechanism="dpsgd-gaussian", noise_multiplier=SIGMA,
                           max_grad_norm=CLIP) if private else PrivacySpec())
    return RunConfig(model=ModelSpec(name=model), privacy=privacy,
                     train=TrainSpec(batch_size=batch, lr=LR, optimizer="sgd"))


def _mechanism(batch: int, private: bool) -> StepMechanism:
    if private:
        return StepMechanism("l2", CLIP, "gaussian", SIGMA * CLIP, SIGMA, batch)
    return StepMechanism(None, math.inf, None, 0.0, 0.0, batch)


def _tf_variants(case: Case) -> list[Variant]:
    import tensorflow as tf

    from tfpipe.engine import TfStepEngine
    from tfpipe.fast import FastTfStepEngine, unsupported_layers
    from tfpipe.models import build_model

    perf = PerfSpec()
    out = []
    for name, cls, private in (("tf_plain", TfStepEngine, False),
                               ("tf_dp_reference", TfStepEngine, True),
                               ("tf_dp_fast", FastTfStepEngine, True)):
        model = build_model(ModelSpec(name=case.model), case.shape, 10, seed=0)
        if cls is FastTfStepEngine and unsupported_layers(model):
            out.append(Variant(name, "tf", private, skipped="unsupported layers: "
                               + ", ".join(unsupported_layers(model))))
            continue
        engine = cls(model, _config(case.model, case.batch_size, private),
                     _mechanism(case.batch_size, private), perf)
        out.append(Variant(name, "tf", private, step=engine.train_step))
    if not case.keras_dp:
        out.append(Variant("tf_privacy_keras", "tf", True, skipped=case.keras_dp_reason))
        return out
    from tensorflow_privacy import DPKerasSGDOptimizer

    model = build_model(ModelSpec(name=case.model), case.shape, 10, seed=0)
    model.compile(
        optimizer=DPKerasSGDOptimizer(l2_norm_clip=CLIP, noise_multiplier=SIGMA,
                                      num_microbatches=case.batch_size, learning_rate=LR),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction=tf.keras.losses.Reduction.NONE))

    def keras_step(chunks: list[tuple[np.ndarray, np.ndarray]]) -> float:
        x = np.concatenate([c[0] for c in chunks])
        y = np.concatenate([c[1] for c in chunks])
        return float(model.train_on_batch(x, y))

    out.append(Variant("tf_privacy_keras", "tf", True, step=keras_step))
    return out


def _torch_variants(case: Case) -> list[Variant]:
    from torchpipe.engine import TorchStepEngine
    from torchpipe.fast import FastTorchStepEngine, unsupported_layers
    from torchpipe.models import build_model

    perf = PerfSpec()
    out = []
    model = build_model(ModelSpec(name=case.model), case.shape, 10, seed=0)
    engine = TorchStepEngine(model, _config(case.model, case.batch_size, False),
                             _mechanism(case.batch_size, False), perf)
    out.append(Variant("torch_plain", "torch", False, step=engine.train_step))
    model = build_model(ModelSpec(name=case.model), case.shape, 10, seed=0)
    if unsupported_layers(model):
        out.append(Variant("torch_dp_fast", "torch", True, skipped="unsupported layers: "
                           + ", ".join(unsupported_layers(model))))
    else:
        engine = FastTorchStepEngine(model, _config(case.model, case.batch_size, True),
                                     _mechanism(case.batch_size, True), perf)
        out.append(Variant("torch_dp_fast", "torch", True, step=engine.train_step,
                           close=engine.close))
    for mode in OPACUS_MODES:
        model = build_model(ModelSpec(name=case.model), case.shape, 10, seed=0)
        try:
            engine = TorchStepEngine(model, _config(case.model, case.batch_size, True),
                                     _mechanism(case.batch_size, True), perf,
                                     grad_sample_mode=mode)
        except Exception as exc:  # noqa: BLE001 - Opacus raises various types per mode
            out.append(Variant(f"opacus_{mode}", "torch", True,
                               skipped=f"unsupported: {type(exc).__name__}: {exc}"[:300]))
            continue
        out.append(Variant(f"opacus_{mode}", "torch", True, step=engine.train_step,
                           close=engine.close))
    return out


# ------------------------------------------------------------------------------ timing
def _batches(x: np.ndarray, y: np.ndarray, batch: int, count: int, seed: int
             ) -> list[list[tuple[np.ndarray, np.ndarray]]]:
    """``count`` logical batches of ``batch`` random examples, as physical chunks."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        indices = np.sort(rng.choice(len(x), size=batch, replace=False))
        out.append([(model_inputs(x[p], "image"), y[p]) for p in chunk_indices(indices, CHUNK)])
    return out


def _run_steps(variant: Variant, batches: Sequence[Any]) -> None:
    assert variant.step is not None
    for chunks in batches:
        loss = variant.step(chunks)
        if not math.isfinite(loss):
            raise DpCompareError(f"{variant.name}: non-finite loss {loss}")


def _guarded(variant: Variant, action: Callable[[], None]) -> None:
    """Run ``action``; an exception marks the variant as failed (out of memory, unsupported)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            action()
    except Exception as exc:  # noqa: BLE001 - any failure is recorded, the benchmark goes on
        kind = "out of memory" if isinstance(exc, MemoryError) or "OOM" in str(exc) else "failed"
        variant.skipped = f"{kind}: {type(exc).__name__}: {exc}"[:300]
        variant.step = None


def run_case(case: Case, x: np.ndarray, y: np.ndarray,
             log: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Time every variant of ``case`` (alternating rounds); the case's figures as a dict."""
    log(f"[{case.name}] building variants")
    variants = _tf_variants(case) + _torch_variants(case)
    seed = 0
    for v in variants:
        if v.step is not None:
            log(f"[{case.name}] warm-up {v.name}")
            with peak_rss() as mem:
                _guarded(v, lambda v=v: _run_steps(v, _batches(x, y, case.batch_size,
                                                               case.warmup, seed)))
            v.memory["warmup_peak_increase_mb"] = mem["peak_increase_mb"]
    for r in range(case.rounds):
        batches = _batches(x, y, case.batch_size, case.steps, seed=1 + r)
        live = [v for v in variants if v.step is not None]
        order = live[r % len(live):] + live[:r % len(live)] if live else []
        for v in order:
            with peak_rss() as mem:
                start = time.perf_counter()
                timed = batches[:case.slow_steps] if v.name == "tf_privacy_keras" else batches
                _guarded(v, lambda v=v, b=timed: _run_steps(v, b))
                elapsed = time.perf_counter() - start
            if v.step is None:
                continue
            v.seconds.append(elapsed)
            v.steps_timed += len(timed)
            for key, value in mem.items():
                v.memory[key] = max(v.memory.get(key, -math.inf), value)
            log(f"[{case.name}] round {r + 1}/{case.rounds} {v.name}: "
                f"{elapsed / len(timed):.4f} s/step")
    for v in variants:
        v.close()
    return _case_figures(case, variants)


def _case_figures(case: Case, variants: list[Variant]) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    for v in variants:
        entry: dict[str, Any] = {"framework": v.framework, "private": v.private}
        if v.skipped is not None or not v.steps_timed or not v.seconds:
            entry["skipped"] = v.skipped or "not run"
        else:
            per_step = sum(v.seconds) / v.steps_timed
            per_round = [s / (v.steps_timed / len(v.seconds)) for s in v.seconds]  # equal steps
            entry.update(
                seconds_per_step=per_step,
                seconds_per_epoch=per_step * case.steps_per_epoch,
                examples_per_second=case.batch_size / per_step,
                round_spread=(max(per_round) - min(per_round)) / per_step,
                steps_timed=v.steps_timed, **v.memory)
        figures[v.name] = entry
    return {"model": case.model, "batch_size": case.batch_size, "input_shape": list(case.shape),
            "steps_per_epoch": case.steps_per_epoch, "nominal_n": case.nominal_n,
            "rounds": case.rounds, "steps_per_round": case.steps,
            "variants": figures, "ratios": ratios(figures)}


def fastest(figures: dict[str, Any], names: Sequence[str]) -> str | None:
    """The variant among ``names`` with the least seconds per step (None if none ran)."""
    ran = [n for n in names if "seconds_per_step" in figures.get(n, {})]
    return min(ran, key=lambda n: figures[n]["seconds_per_step"]) if ran else None


def ratios(figures: dict[str, Any]) -> dict[str, float | str | None]:
    """DP / non-private per framework, and TF / torch per privacy setting (time ratios)."""
    def ratio(a: str | None, b: str | None) -> float | None:
        if a is None or b is None:
            return None
        if "seconds_per_step" not in figures.get(a, {}) or \
                "seconds_per_step" not in figures.get(b, {}):
            return None
        return figures[a]["seconds_per_step"] / figures[b]["seconds_per_step"]

    opacus_best = fastest(figures, [f"opacus_{m}" for m in OPACUS_MODES])
    return {
        "opacus_fastest_mode": opacus_best,
        "tf_dp_reference/tf_plain": ratio("tf_dp_reference", "tf_plain"),
        "tf_dp_fast/tf_plain": ratio("tf_dp_fast", "tf_plain"),
        "tf_privacy_keras/tf_plain": ratio("tf_privacy_keras", "tf_plain"),
        "opacus_hooks/torch_plain": ratio("opacus_hooks", "torch_plain"),
        "opacus_fastest/torch_plain": ratio(opacus_best, "torch_plain"),
        "torch_dp_fast/torch_plain": ratio("torch_dp_fast", "torch_plain"),
        "tf_dp_fast/torch_dp_fast": ratio("tf_dp_fast", "torch_dp_fast"),
        "tf_plain/torch_plain": ratio("tf_plain", "torch_plain"),
        "tf_dp_reference/opacus_hooks": ratio("tf_dp_reference", "opacus_hooks"),
        "tf_dp_fast/opacus_hooks": ratio("tf_dp_fast", "opacus_hooks"),
        "tf_dp_fast/opacus_fastest": ratio("tf_dp_fast", opacus_best),
    }


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
            "torch_threads": torch.get_num_threads()}


def set_omp_wait_policy() -> str:
    """Ask for :data:`OMP_WAIT_POLICY` unless the environment already sets one; returns the
    policy in effect. Only effective before torch (and its OpenMP runtime) is first imported.
    """
    import sys

    if "torch" not in sys.modules:
        os.environ.setdefault("OMP_WAIT_POLICY", OMP_WAIT_POLICY)
    return os.environ.get("OMP_WAIT_POLICY", "unset (libgomp default: spinning)")


def run_benchmark(*, quick: bool = False, data_dir: str | None = None,
                  log: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Run every case; one JSON-ready dict with every figure, the machine and the load."""
    omp_policy = set_omp_wait_policy()
    from tfpipe.train import configure_tensorflow
    from torchpipe.train import configure_torch

    configure_tensorflow(0, PerfSpec())
    configure_torch(0, PerfSpec())
    load_before = os.getloadavg()
    started = time.time()
    x, y, data = load_images(quick, data_dir)
    results = {case.name: run_case(case, x, y, log) for case in cases(quick)}
    return {"quick": quick, "data": data, "machine": machine(),
            "loadavg_before": list(load_before), "loadavg_after": list(os.getloadavg()),
            "wall_seconds": time.time() - started, "memory_method": memory_method(),
            "settings": {"sigma": SIGMA, "clip": CLIP, "lr": LR, "optimizer": "sgd",
                         "omp_wait_policy": omp_policy,
                         "physical_chunk": CHUNK, "deterministic_kernels": True},
            "cases": results}
