"""Gradient canaries through each engine's own clipping (dpcore.audit.canary_records).

A canary enters ``train_step(..., canaries=)`` as more per-example records, before the
engine's clipping: its per-example gradients (reference engines, the microbatched path
included) or its rows of the owning layer's (a, g) pair (fast engines). An honest step must
then add exactly each canary clipped to C: the update with canaries minus the same seeded
update without them is ``-lr * sum_i C / max(norm_i, C) * canary_i / B`` (SGD, no momentum),
on every engine of both backends, for every layer route (dense, convolution with and without
bias, with symmetric and asymmetric ``same`` padding, group norm, embedding, 1-D convolution),
in the L2 and the L1 clip norm, with canaries riding along real chunks and in chunks of
their own. And the engine reports the noised sum at watched coordinates.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from dpcore.architectures import architecture
from dpcore.audit.canary_records import (
    CANARY_NORM_MULTIPLE,
    CanaryRecords,
    canary_records,
    clipped_sum,
)
from dpcore.audit.faults import apply_fault
from dpcore.backend import load_backend
from dpcore.config import ModelSpec
from tests.backends.train_helpers import config, mechanism

B = 16
LR = 0.5
C = 1.0

IMAGE = ModelSpec(name="custom", layers=[
    {"type": "Conv2D", "name": "conv_a", "filters": 4, "kernel": 3, "stride": 2,
     "padding": "same", "use_bias": False},  # 9 -> 5: TF pads (1, 1); 3x3 s2 on 10: (0, 1)
    {"type": "GroupNorm", "name": "gn", "groups": 2},
    {"type": "Activation", "name": "act_a"},
    {"type": "Conv2D", "name": "conv_b", "filters": 6, "kernel": 3, "stride": 1,
     "padding": "same"},
    {"type": "Activation", "name": "act_b"},
    {"type": "Conv2D", "name": "conv_c", "filters": 5, "kernel": 2, "stride": 2,
     "padding": "same"},
    {"type": "Flatten", "name": "flat"},
    {"type": "Dense", "name": "out"},
])
TEXT = ModelSpec(name="custom", layers=[
    {"type": "Embedding", "name": "emb", "dim": 6},
    {"type": "Conv1D", "name": "conv", "filters": 5, "kernel": 3, "stride": 2,
     "padding": "same"},
    {"type": "Activation", "name": "act"},
    {"type": "GlobalMaxPool1D", "name": "pool"},
    {"type": "Dense", "name": "out"},
])
VOCAB = 30

MODELS = {"cnn4": (ModelSpec(name="cnn4"), (16, 16, 1)), "image": (IMAGE, (10, 10, 1)),
          "text": (TEXT, (11,))}
ENGINES = [("tf", "reference"), ("tf", "fast"), ("torch", "reference"), ("torch", "fast")]


def _data(shape: tuple[int, ...], n: int = 12) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(5)
    y = rng.integers(0, 10, n).astype(np.int64)
    if len(shape) == 1:
        x = rng.integers(0, VOCAB, (n, *shape)).astype(np.int32)
    else:
        x = rng.random((n, *shape)).astype(np.float32)
    return [(x[i:i + 4], y[i:i + 4]) for i in range(0, n, 4)]


def _canaries(spec: ModelSpec, shape: tuple[int, ...], kind: str, per_key: int = 3
              ) -> tuple[list[Any], dict[str, tuple[int, ...]]]:
    arch = architecture(spec, shape, 10, VOCAB if len(shape) == 1 else None)
    shapes = arch.weight_shapes()
    rng = np.random.default_rng(1)
    keys, flats = [], []
    for key in sorted(shapes, reverse=True):  # a layer's kernel canaries before its bias's
        size = int(np.prod(shapes[key]))
        for flat in rng.choice(size, size=min(per_key, size), replace=False):
            keys.append(key)
            flats.append(int(flat))
    return canary_records(arch, keys, flats, CANARY_NORM_MULTIPLE * C, kind), shapes


def _step(backend: str, engine_name: str, spec: ModelSpec, shape: tuple[int, ...],
          kind: str, records: CanaryRecords | None, microbatch: int = 1,
          watch: dict[str, np.ndarray] | None = None, fault: str = "none",
          compiled: bool = False
          ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray] | None]:
    from dpcore.config import PerfSpec

    be = load_backend(backend)
    model = be.build_model(spec, shape, 10, seed=0,
                           vocab_size=VOCAB if len(shape) == 1 else None)
    noise = 0.7
    mech = apply_fault(dataclasses.replace(
        mechanism(kind, C, noise * C, B, noise_multiplier=noise), microbatch_size=microbatch),
        fault)
    cfg = config(noise=noise, lr=LR, batch_size=B,
                 mechanism="dpsgd-gaussian" if kind == "l2" else "dpsgd-laplace")
    # a compiled TF step needs perf.deterministic false (XLA has no deterministic MaxPool
    # gradient), as a run configures it
    engine = be.ENGINES[engine_name](model, cfg, mech,
                                     PerfSpec(engine=engine_name, compile=compiled,
                                              deterministic=not compiled))
    try:
        if watch is not None:
            engine.watch(watch)
        engine.train_step(_data(shape), canaries=records)
        return engine.get_weights(), engine.watched() if watch is not None else None
    finally:
        engine.close()


def _expected(records: list[Any], shapes: dict[str, tuple[int, ...]], kind: str
              ) -> dict[str, np.ndarray]:
    out = {k: np.zeros(int(np.prod(s))) for k, s in shapes.items()}
    for key, entries in clipped_sum(records, C, kind).items():
        for flat, value in entries.items():
            out[key][flat] += value
    return {k: v.reshape(shapes[k]) for k, v in out.items()}


def _check(backend: str, engine_name: str, model: str, kind: str, microbatch: int = 1,
           per_key: int = 3, compiled: bool = False) -> None:
    spec, shape = MODELS[model]
    recs, shapes = _canaries(spec, shape, kind, per_key)
    base, _ = _step(backend, engine_name, spec, shape, kind, None, microbatch,
                    compiled=compiled)
    hooked, _ = _step(backend, engine_name, spec, shape, kind, CanaryRecords.of(recs),
                      microbatch, compiled=compiled)
    expected = _expected(recs, shapes, kind)
    for key in base:
        np.testing.assert_allclose(
            hooked[key].astype(np.float64) - base[key], -LR * expected[key] / B, atol=3e-6,
            rtol=1e-4, err_msg=f"{backend}-{engine_name} {model} {key}")


@pytest.mark.parametrize(("backend", "engine_name"), ENGINES, ids=lambda v: str(v))
@pytest.mark.parametrize("model", sorted(MODELS))
def test_an_honest_step_adds_each_canary_clipped_to_c(backend: str, engine_name: str,
                                                      model: str) -> None:
    _check(backend, engine_name, model, "l2")


@pytest.mark.parametrize(("backend", "engine_name"), ENGINES, ids=lambda v: str(v))
def test_canaries_are_clipped_in_the_l1_norm_of_laplace_dpsgd(backend: str, engine_name: str
                                                              ) -> None:
    _check(backend, engine_name, "image", "l1")


@pytest.fixture
def tf_ops_not_deterministic() -> Iterator[None]:
    """Op determinism off for the test, as ``configure_tensorflow`` sets it for a compiled
    run (it is process-wide: an earlier test in this process may have switched it on), and
    restored after."""
    import tensorflow as tf
    from tensorflow.python.framework import config as tf_config  # no public "disable"

    was = tf_config.is_op_determinism_enabled()
    tf_config.disable_op_determinism()
    yield
    if was:
        tf.config.experimental.enable_op_determinism()


@pytest.mark.parametrize("engine_name", ["reference", "fast"])
@pytest.mark.usefixtures("tf_ops_not_deterministic")
def test_compiled_tf_steps_clip_each_canary_to_c(engine_name: str) -> None:
    """XLA-compiled chunk steps (``perf.compile``): chunks padded to their size class with
    zero-weight rows, the canaries beside them with weight 1, the leftover ones in a chunk
    of zero-weight examples."""
    _check("tf", engine_name, "cnn4", "l2", compiled=True)


@pytest.mark.parametrize("backend", ["tf", "torch"])
def test_the_microbatched_path_clips_each_canary_as_one_microbatch(backend: str) -> None:
    _check(backend, "reference", "cnn4", "l2", microbatch=2)


@pytest.mark.parametrize(("backend", "engine_name"), ENGINES, ids=lambda v: str(v))
def test_the_no_clip_fault_reaches_the_engines_clipping(backend: str, engine_name: str
                                                        ) -> None:
    """factors.fault=no_clip rewrites the clip norm the engine clips with: its canaries then
    enter at their full norm, 100 times what an honest step adds (the noise is unchanged:
    sigma C, the same seeded draw)."""
    spec, shape = MODELS["cnn4"]
    recs, shapes = _canaries(spec, shape, "l2", per_key=1)
    records = CanaryRecords.of(recs)
    base, _ = _step(backend, engine_name, spec, shape, "l2", None, fault="no_clip")
    hooked, _ = _step(backend, engine_name, spec, shape, "l2", records, fault="no_clip")
    expected = _expected(recs, shapes, "l2")
    for key in base:
        np.testing.assert_allclose(
            hooked[key].astype(np.float64) - base[key],
            -LR * CANARY_NORM_MULTIPLE * expected[key] / B, atol=2e-4, rtol=1e-4, err_msg=key)


@pytest.mark.parametrize(("backend", "engine_name"), ENGINES, ids=lambda v: str(v))
def test_the_engine_reports_the_noised_sum_it_applies(backend: str, engine_name: str) -> None:
    """watched() is the applied gradient times B at the coordinates, in their order."""
    spec, shape = MODELS["cnn4"]
    watch = {"conv1.kernel": np.array([5, 0, 77]), "fc2.bias": np.array([9, 2])}
    recs, _ = _canaries(spec, shape, "l2")
    be = load_backend(backend)
    initial = be.get_weights(be.build_model(spec, shape, 10, seed=0))
    after, seen = _step(backend, engine_name, spec, shape, "l2", CanaryRecords.of(recs),
                        watch=watch)
    assert seen is not None and set(seen) == set(watch)
    for key, flat in watch.items():
        applied = (initial[key].reshape(-1)[flat] - after[key].reshape(-1)[flat]) / LR
        np.testing.assert_allclose(seen[key] / B, applied, rtol=1e-4, atol=1e-6)
