"""The benchmark's tiers: every way of training one case, built fresh for that case.

Each framework has four tiers (DP ones: Gaussian DP-SGD, C = 1, sigma = 1, SGD lr 0.1):

* ``<fw>_plain``: the backend engine's non-private step (summed-loss gradient over the
  physical chunks, divided by B, SGD);
* ``<fw>_dp_reference``: the backend's reference DP engine (``--engine reference``): TF
  Privacy's query + optimizer with ``tf.vectorized_map`` per-example gradients / an Opacus
  ``GradSampleModule`` (grad-sample mode ``hooks``, Opacus's default) with Opacus's
  ``DPOptimizer``, chunked like training;
* ``<fw>_dp_fast``: the backend's fast engine (the default): layer-wise norms from one
  backward pass and the clip-weighted sum (:mod:`tfpipe.fast`, :mod:`torchpipe.fast`), each
  layer's route timed at warm-up (``perf.route_choice: measure``: the engine at its fastest);
* ``torch_plain_cl`` / ``torch_dp_fast_cl``: the torch plain and fast steps with
  ``perf.memory_format: channels_last`` (model and inputs ``torch.channels_last``, the layout
  PyTorch's CPU convolutions are fastest in): torch "at its best" (TF is NHWC already);
* the stock library path, as ``recipe: library`` runs it: ``tf_privacy_stock`` is TF
  Privacy's ``VectorizedDPKerasSGDOptimizer`` (``num_microbatches = B``, built by
  :func:`tfpipe.library.make_optimizer`) through ``model.fit`` on a ``tf.data`` pipeline of
  fixed-size batches (one ``fit`` call per timed round: its set-up is part of the time);
  ``opacus_stock`` is ``PrivacyEngine().make_private`` with its defaults (hooks, flat
  clipping, mean loss) and the tutorial loop (``nn.CrossEntropyLoss``, one backward per
  logical batch, no memory manager), except ``poisson_sampling=False``: the benchmark feeds
  every variant the same fixed-size batches.

A variant that cannot run records why (``skipped``) instead of failing the benchmark: a layer
without a fast rule, or per-example gradients too big for the machine's memory
(:func:`benchmarks.memory.too_big`, checked before trying, since an out-of-memory kills).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from benchmarks.memory import FLOAT_BYTES, over_share, too_big
from dpcore.config import ModelSpec, PerfSpec, PrivacySpec, RunConfig, TrainSpec
from dpcore.errors import DpCompareError
from dpcore.sampling import chunk_indices
from dpcore.trainloop import StepMechanism, model_inputs

#: The tiers of each framework, in report order (the issue's names).
TF_TIERS = ("tf_plain", "tf_dp_reference", "tf_dp_fast", "tf_privacy_stock")
TORCH_TIERS = ("torch_plain", "torch_dp_reference", "torch_dp_fast", "opacus_stock",
               "torch_plain_cl", "torch_dp_fast_cl")
TIERS = TF_TIERS + TORCH_TIERS
#: The tiers that run without per-example gradients of the whole model (every case runs them;
#: the batch-size sweep's points).
FAST_TIERS = ("tf_plain", "tf_dp_fast", "torch_plain", "torch_dp_fast")
#: Suffix of a torch tier run in channels-last memory format.
CHANNELS_LAST = "_cl"
#: The channels-last torch tiers (torch at its best).
BEST_TIERS = ("torch_plain_cl", "torch_dp_fast_cl")
#: The non-private tiers.
PLAIN_TIERS = ("tf_plain", "torch_plain", "torch_plain_cl")
#: The "at its best" tiers, each also tried compiled (TF XLA, torch.compile) at warm-up and
#: kept compiled only where that is faster (:func:`benchmarks.bench.choose_compiled`).
COMPILE_TIERS = ("tf_plain", "tf_dp_fast", "torch_plain_cl", "torch_dp_fast_cl")
#: What compiling costs in determinism, per framework (recorded with the attempt).
COMPILE_DETERMINISM = {
    "tf": "XLA needs TF's op determinism off (XLA has no deterministic MaxPool gradient): "
          "its steps are not bit-reproducible; equal to the uncompiled step to float rounding "
          "(tested rel 1e-6)",
    "torch": "torch.use_deterministic_algorithms stays on; inductor's fused CPU kernels sum "
             "in their own order: equal to the eager step to float rounding (tested rel "
             "1e-6), not bit for bit",
}

SIGMA = 1.0
CLIP = 1.0
LR = 0.1
#: Physical chunk size of the engine variants (PerfSpec's default).
CHUNK = 256

#: One logical batch as the engines take it: its physical chunks (inputs, labels).
Batch = list[tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class ModelCase:
    """What a variant needs to build its model: name, input shape, classes, vocabulary."""

    model: str
    shape: tuple[int, ...]
    n_classes: int
    batch_size: int
    vocab_size: int | None = None


@dataclass
class Variant:
    """One way of training: ``run`` trains on a list of logical batches, or why not run."""

    name: str
    framework: str
    private: bool
    run: Callable[[Sequence[Batch]], None] | None = None
    skipped: str | None = None
    close: Callable[[], None] = lambda: None
    seconds: list[float] = field(default_factory=list)
    cpu_seconds: list[float] = field(default_factory=list)
    steps_timed: int = 0
    memory: dict[str, float] = field(default_factory=dict)
    #: The engine behind ``run`` (None: a stock path), for its ``perf_record``.
    engine: Any = None
    #: The same tier compiled (``perf.compile``), tried at warm-up; None: not tried.
    compiled: Variant | None = None
    #: What trying the compiled tier gave (:func:`benchmarks.bench.choose_compiled`).
    compile: dict[str, Any] = field(default_factory=dict)
    #: The engine's ``perf_record()`` once timed (e.g. the fast engines' routes).
    engine_record: dict[str, Any] | None = None


def config(case: ModelCase, private: bool) -> RunConfig:
    """The RunConfig of a variant (the engines read lr, optimizer, clip from it)."""
    privacy = (PrivacySpec(mechanism="dpsgd-gaussian", noise_multiplier=SIGMA,
                           max_grad_norm=CLIP) if private else PrivacySpec())
    return RunConfig(model=ModelSpec(name=case.model), privacy=privacy,
                     train=TrainSpec(batch_size=case.batch_size, lr=LR, optimizer="sgd"))


def mechanism(batch: int, private: bool) -> StepMechanism:
    """The step mechanism of a variant (noise once per logical batch of ``batch``)."""
    if private:
        return StepMechanism("l2", CLIP, "gaussian", SIGMA * CLIP, SIGMA, batch)
    return StepMechanism(None, math.inf, None, 0.0, 0.0, batch)


def engine_run(name: str, step: Callable[[Batch], float]) -> Callable[[Sequence[Batch]], None]:
    """A ``run`` that takes one engine step per logical batch (a non-finite loss fails)."""
    def run(batches: Sequence[Batch]) -> None:
        for chunks in batches:
            loss = step(chunks)
            if not math.isfinite(loss):
                raise DpCompareError(f"{name}: non-finite loss {loss}")
    return run


def whole(batch: Batch) -> tuple[np.ndarray, np.ndarray]:
    """The logical batch as one array pair (the stock paths take no chunks)."""
    return np.concatenate([c[0] for c in batch]), np.concatenate([c[1] for c in batch])


def _per_example_limit(case: ModelCase, parameters: int, examples: int,
                       available: int | None) -> str | None:
    return too_big(min(examples, case.batch_size), parameters, available)


# ------------------------------------------------------------------------------ TF
def _tf_model(case: ModelCase) -> Any:
    from tfpipe.models import build_model

    return build_model(ModelSpec(name=case.model), case.shape, case.n_classes, seed=0,
                       vocab_size=case.vocab_size)


@contextlib.contextmanager
def tf_op_nondeterminism() -> Iterator[None]:
    """TF's op determinism off within the block, back on after (XLA needs it off)."""
    import tensorflow as tf
    from tensorflow.python.framework import config as tf_config  # no public "disable"

    tf_config.disable_op_determinism()
    try:
        yield
    finally:
        tf.config.experimental.enable_op_determinism()


def _nondeterministic(run: Callable[[Sequence[Batch]], None]
                      ) -> Callable[[Sequence[Batch]], None]:
    def wrapped(batches: Sequence[Batch]) -> None:
        with tf_op_nondeterminism():
            run(batches)
    return wrapped


def tf_variants(case: ModelCase, names: Sequence[str], available: int | None,
                compile_tiers: Sequence[str] = ()) -> list[Variant]:
    """The TF tiers among ``names`` for ``case``; those in ``compile_tiers`` with a compiled
    twin (XLA, op determinism off while it runs) to try."""
    from tfpipe.engine import TfStepEngine
    from tfpipe.fast import FastTfStepEngine, unsupported_layers

    out = []
    engines = {"tf_plain": (TfStepEngine, False), "tf_dp_reference": (TfStepEngine, True),
               "tf_dp_fast": (FastTfStepEngine, True)}
    for name in [n for n in TF_TIERS if n in names]:
        model = _tf_model(case)
        parameters = int(sum(np.prod(w.shape) for w in model.trainable_weights))
        variant = Variant(name, "tf", name != "tf_plain")
        if name == "tf_privacy_stock":
            variant.skipped = (_per_example_limit(case, parameters, case.batch_size, available)
                               or over_share(keras_jacobian_bytes(model, case.batch_size),
                                             available, "tape.jacobian's B x B activation "
                                             "gradients"))
            if variant.skipped is None:
                variant.run = _keras_fit_run(model, case)
        else:
            cls, private = engines[name]
            if name == "tf_dp_reference":
                variant.skipped = _per_example_limit(case, parameters, CHUNK, available)
            if cls is FastTfStepEngine and unsupported_layers(model):
                variant.skipped = "unsupported layers: " + ", ".join(unsupported_layers(model))
            if variant.skipped is None:
                perf = PerfSpec(route_choice="measure" if private else "rule")
                engine = cls(model, config(case, private), mechanism(case.batch_size, private),
                             perf)
                variant.run = engine_run(name, engine.train_step)
                variant.close = getattr(engine, "close", lambda: None)
                variant.engine = engine
                if name in compile_tiers:
                    twin = cls(_tf_model(case), config(case, private),
                               mechanism(case.batch_size, private),
                               dataclasses.replace(perf, compile=True, deterministic=False))
                    variant.compiled = Variant(
                        name, "tf", private, _nondeterministic(engine_run(name, twin.train_step)),
                        close=getattr(twin, "close", lambda: None), engine=twin)
        out.append(variant)
    return out


def keras_jacobian_bytes(model: Any, batch: int) -> int:
    """Estimated bytes of TF Privacy's vectorised Keras optimizer at ``num_microbatches = B``:
    ``tape.jacobian`` of the B microbatch losses is vectorised (pfor) over B backward passes,
    each through the whole batch's activations, so it holds ~B x B x (activation floats per
    example) gradients (measured: cnn4 at B = 256 takes ~12 s per step on 2 cores, ~100x the
    reference engine; ``tfpipe.dp`` found it out of memory at 1024)."""
    per_example = sum(int(np.prod(layer.output.shape[1:])) for layer in model.layers
                      if not layer.name.startswith("input"))
    return FLOAT_BYTES * batch * batch * per_example


def _keras_fit_run(model: Any, case: ModelCase) -> Callable[[Sequence[Batch]], None]:
    """TF Privacy's stock path: the library recipe's optimizer and loss, ``model.fit`` on a
    ``tf.data`` pipeline of the round's fixed-size batches (in order)."""
    import tensorflow as tf

    from tfpipe.library import make_loss, make_optimizer

    cfg = config(case, True)
    model.compile(optimizer=make_optimizer(cfg, SIGMA), loss=make_loss(cfg))

    def run(batches: Sequence[Batch]) -> None:
        pairs = [whole(b) for b in batches]
        x = np.concatenate([p[0] for p in pairs])
        y = np.concatenate([p[1] for p in pairs]).astype(np.int64)
        data = tf.data.Dataset.from_tensor_slices((x, y)).batch(case.batch_size,
                                                                drop_remainder=True)
        history = model.fit(data, epochs=1, verbose=0)
        loss = history.history["loss"][-1]
        if not math.isfinite(loss):
            raise DpCompareError(f"tf_privacy_stock: non-finite loss {loss}")
    return run


# ------------------------------------------------------------------------------ torch
def _torch_model(case: ModelCase) -> Any:
    from torchpipe.models import build_model

    return build_model(ModelSpec(name=case.model), case.shape, case.n_classes, seed=0,
                       vocab_size=case.vocab_size)


def torch_variants(case: ModelCase, names: Sequence[str], available: int | None,
                   compile_tiers: Sequence[str] = ()) -> list[Variant]:
    """The torch tiers among ``names`` for ``case``; those in ``compile_tiers`` with a
    compiled twin (``torch.compile``) to try."""
    from torchpipe.engine import TorchStepEngine
    from torchpipe.fast import FastTorchStepEngine, unsupported_layers

    out = []
    for name in [n for n in TORCH_TIERS if n in names]:
        model = _torch_model(case)
        parameters = sum(p.numel() for p in model.parameters() if p.requires_grad)
        variant = Variant(name, "torch", name not in PLAIN_TIERS)
        base = name.removesuffix(CHANNELS_LAST)
        perf = PerfSpec(memory_format="channels_last" if base != name else "default",
                        route_choice="measure" if base == "torch_dp_fast" else "rule")
        if name == "opacus_stock":
            variant.skipped = _per_example_limit(case, parameters, case.batch_size, available)
            if variant.skipped is None:
                variant.run, variant.close = _opacus_stock_run(model, case)
        else:
            if name == "torch_dp_reference":
                variant.skipped = _per_example_limit(case, parameters, CHUNK, available)
            if base == "torch_dp_fast" and unsupported_layers(model):
                variant.skipped = "unsupported layers: " + ", ".join(unsupported_layers(model))
            if variant.skipped is None:
                cls = FastTorchStepEngine if base == "torch_dp_fast" else TorchStepEngine
                engine = cls(model, config(case, variant.private),
                             mechanism(case.batch_size, variant.private), perf)
                variant.run = engine_run(name, engine.train_step)
                variant.close = engine.close
                variant.engine = engine
                if name in compile_tiers:
                    twin = cls(_torch_model(case), config(case, variant.private),
                               mechanism(case.batch_size, variant.private),
                               dataclasses.replace(perf, compile=True))
                    variant.compiled = Variant(name, "torch", variant.private,
                                               engine_run(name, twin.train_step),
                                               close=twin.close, engine=twin)
        out.append(variant)
    return out


def _opacus_stock_run(model: Any, case: ModelCase
                      ) -> tuple[Callable[[Sequence[Batch]], None], Callable[[], None]]:
    """Opacus's stock path: ``make_private`` defaults (fixed-size batches), tutorial loop."""
    import torch
    from opacus import PrivacyEngine
    from torch.utils.data import DataLoader, TensorDataset

    from torchpipe.predict import is_text_model, to_tensor

    text = is_text_model(model)
    dummy = TensorDataset(torch.zeros(case.batch_size, 1), torch.zeros(case.batch_size))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Secure RNG turned off")
        engine = PrivacyEngine()
    module, optimizer, _ = engine.make_private(
        module=model, optimizer=torch.optim.SGD(model.parameters(), lr=LR),
        data_loader=DataLoader(dummy, batch_size=case.batch_size),
        noise_multiplier=SIGMA, max_grad_norm=CLIP, poisson_sampling=False)
    criterion = torch.nn.CrossEntropyLoss()
    module.train()

    def run(batches: Sequence[Batch]) -> None:
        for batch in batches:
            x, y = whole(batch)
            optimizer.zero_grad()
            loss = criterion(module(to_tensor(x, text)), torch.from_numpy(y.astype(np.int64)))
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Full backward hook is firing")
                loss.backward()
            optimizer.step()
            if not math.isfinite(float(loss)):
                raise DpCompareError(f"opacus_stock: non-finite loss {float(loss)}")

    def close() -> None:
        optimizer.zero_grad(set_to_none=True)
        module._close()

    return run, close


def make_batches(x: np.ndarray, y: np.ndarray, batch: int, count: int, seed: int,
                 task: str = "image") -> list[Batch]:
    """``count`` logical batches of ``batch`` random examples, as physical chunks."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        indices = np.sort(rng.choice(len(x), size=batch, replace=len(x) < batch))
        out.append([(model_inputs(x[p], task), y[p]) for p in chunk_indices(indices, CHUNK)])
    return out
