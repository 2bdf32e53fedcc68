"""Shared fixtures of the training tests: a tiny image set, configs, and per-framework
reference computations (plain gradients, naive per-example loops) in the neutral layout."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np
import pytest

from dpcore.config import DataSpec, ModelSpec, PrivacySpec, RunConfig, TrainSpec
from dpcore.data.dataset import Dataset
from dpcore.trainloop import StepMechanism

Weights = dict[str, np.ndarray]
SIDE = 16  # cnn4 needs >= 16 pixels; sklearn's digits are 8x8, padded here


@cache
def digits16(n_train: int = 300, n_test: int = 100) -> Dataset:
    """sklearn's digits, 8x8 centred in 16x16 uint8 images (bundled: no download)."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = np.zeros((len(digits.images), SIDE, SIDE, 1), np.uint8)
    x[:, 4:12, 4:12, 0] = np.round(digits.images * 255.0 / 16.0).astype(np.uint8)
    y = digits.target.astype(np.int64)
    return Dataset("digits16", "image", x[:n_train], y[:n_train],
                   x[n_train:n_train + n_test], y[n_train:n_train + n_test],
                   tuple(str(i) for i in range(10)), source="sklearn.datasets.load_digits")


def batch(indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Model inputs (float32 in [0, 1], NHWC) and labels of training examples."""
    ds = digits16()
    return ds.x_train[indices].astype(np.float32) / np.float32(255.0), ds.y_train[indices]


def chunks_of(indices: np.ndarray, size: int | None) -> list[tuple[np.ndarray, np.ndarray]]:
    """The physical chunks the driver would build."""
    from dpcore.sampling import chunk_indices

    return [batch(part) for part in chunk_indices(indices, size) if len(part)]


def config(*, mechanism: str = "dpsgd-gaussian", noise: float | None = 1.0, clip: float = 1.0,
           optimizer: str = "sgd", lr: float = 0.1, momentum: float = 0.0,
           ema: float | None = None, steps: int | None = None, epochs: float | None = None,
           batch_size: int = 32, seed: int = 0) -> RunConfig:
    """A small cnn4 run config on :func:`digits16`."""
    if steps is None and epochs is None:
        steps = 3
    return RunConfig(
        data=DataSpec(name="digits"), model=ModelSpec(name="cnn4"),
        privacy=PrivacySpec(mechanism=mechanism,
                            noise_multiplier=None if mechanism in ("none", "ldp") else noise,
                            max_grad_norm=clip),
        train=TrainSpec(epochs=epochs, steps=steps, batch_size=batch_size, lr=lr,
                        optimizer=optimizer, momentum=momentum, ema_decay=ema),
        seed=seed,
    )


def mechanism(clip_kind: str | None, clip: float, noise_scale: float, batch_size: int,
              noise_multiplier: float | None = None) -> StepMechanism:
    """A StepMechanism with matching noise kind (gaussian for l2, laplace for l1)."""
    kind = {"l2": "gaussian", "l1": "laplace", None: None}[clip_kind]
    sigma = noise_multiplier if noise_multiplier is not None else (
        noise_scale / clip if clip_kind else 0.0)
    return StepMechanism(clip_kind, clip, kind, noise_scale, sigma, batch_size)


def flat(weights: Weights) -> np.ndarray:
    """All arrays concatenated in key order (float64)."""
    return np.concatenate([np.asarray(weights[k], np.float64).ravel() for k in sorted(weights)])


def diff(a: Weights, b: Weights) -> Weights:
    return {k: np.asarray(a[k], np.float64) - np.asarray(b[k], np.float64) for k in a}


def rel_error(actual: Weights, expected: Weights) -> float:
    """||actual - expected|| / ||expected|| over all coordinates (flat L2)."""
    a, e = flat(actual), flat(expected)
    return float(np.linalg.norm(a - e) / np.linalg.norm(e))


def clip_flat(grad: Weights, clip: float, kind: str) -> Weights:
    """Scale a gradient to flat norm <= clip (the textbook definition, float64)."""
    g = flat(grad)
    norm = np.linalg.norm(g) if kind == "l2" else np.abs(g).sum()
    factor = min(1.0, clip / norm)
    return {k: np.asarray(v, np.float64) * factor for k, v in grad.items()}


def naive_clipped_sum(grad_of_example: Callable[[np.ndarray, np.ndarray], Weights],
                      indices: np.ndarray, clip: float, kind: str) -> tuple[Weights, list[float]]:
    """Loop over examples: plain gradient, clip, sum. Also returns the per-example norms."""
    x, y = batch(indices)
    total: Weights | None = None
    norms = []
    for i in range(len(indices)):
        g = grad_of_example(x[i:i + 1], y[i:i + 1])
        f = flat(g)
        norms.append(float(np.linalg.norm(f) if kind == "l2" else np.abs(f).sum()))
        c = clip_flat(g, clip, kind)
        total = c if total is None else {k: total[k] + c[k] for k in total}
    assert total is not None
    return total, norms


# ----------------------------------------------------------------------------- frameworks
class TfFramework:
    """Keras references: plain gradients and a plain Keras SGD step. ``engine_name``: which of
    the backend's step engines (``dpcore.backend.Backend.ENGINES``) the tests build."""

    name = "tf"

    def __init__(self, engine_name: str = "reference") -> None:
        self.engine_name = engine_name

    def perf(self) -> Any:
        """The PerfSpec that selects this engine in ``train``."""
        from dpcore.config import PerfSpec
        return PerfSpec(engine=self.engine_name)

    @staticmethod
    def modules() -> tuple[Any, Any, Any]:
        from tfpipe import models, predict, train
        return models, train, predict

    def build(self, seed: int = 0) -> Any:
        from dpcore.config import ModelSpec
        from tfpipe.models import build_model
        return build_model(ModelSpec(name="cnn4"), (SIDE, SIDE, 1), 10, seed=seed)

    def grad_of_sum(self, model: Any, x: np.ndarray, y: np.ndarray) -> Weights:
        import tensorflow as tf

        from tfpipe.models import get_weights, set_weights
        with tf.GradientTape() as tape:
            logits = model(tf.constant(x), training=True)
            loss = tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(
                tf.constant(y, tf.int32), logits))
        grads = tape.gradient(loss, model.trainable_variables)
        saved = get_weights(model)
        for v, g in zip(model.trainable_variables, grads, strict=True):
            v.assign(g)
        out = get_weights(model)
        set_weights(model, saved)
        return out

    def plain_sgd_step(self, model: Any, x: np.ndarray, y: np.ndarray, lr: float,
                       expected_batch_size: int) -> None:
        import tensorflow as tf
        optimizer = tf.keras.optimizers.legacy.SGD(learning_rate=lr)
        with tf.GradientTape() as tape:
            logits = model(tf.constant(x), training=True)
            loss = tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(
                tf.constant(y, tf.int32), logits)) / expected_batch_size
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))

    def engine(self, model: Any, cfg: RunConfig, mech: StepMechanism) -> Any:
        from dpcore.backend import load_backend
        return load_backend(self.name).ENGINES[self.engine_name](model, cfg, mech, self.perf())


class TorchFramework(TfFramework):
    """PyTorch references: plain autograd gradients and a plain torch.optim.SGD step."""

    name = "torch"

    @staticmethod
    def modules() -> tuple[Any, Any, Any]:
        from torchpipe import models, predict, train
        return models, train, predict

    def build(self, seed: int = 0) -> Any:
        from dpcore.config import ModelSpec
        from torchpipe.models import build_model
        return build_model(ModelSpec(name="cnn4"), (SIDE, SIDE, 1), 10, seed=seed)

    def _loss(self, model: Any, x: np.ndarray, y: np.ndarray) -> Any:
        import torch
        logits = model(torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2))))
        return torch.nn.functional.cross_entropy(logits, torch.from_numpy(y), reduction="sum")

    def grad_of_sum(self, model: Any, x: np.ndarray, y: np.ndarray) -> Weights:
        import torch

        from torchpipe.models import get_weights, set_weights
        params = list(model.parameters())
        grads = torch.autograd.grad(self._loss(model, x, y), params)
        saved = get_weights(model)
        with torch.no_grad():
            for p, g in zip(params, grads, strict=True):
                p.copy_(g)
        out = get_weights(model)
        set_weights(model, saved)
        return out

    def plain_sgd_step(self, model: Any, x: np.ndarray, y: np.ndarray, lr: float,
                       expected_batch_size: int) -> None:
        import torch
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        optimizer.zero_grad()
        (self._loss(model, x, y) / expected_batch_size).backward()
        optimizer.step()



#: The reference engines (the cross-framework tests compare these).
FRAMEWORKS = {"tf": TfFramework(), "torch": TorchFramework()}

#: Every engine of both backends (the contract runs on each).
ENGINE_FRAMEWORKS = {f"{cls.name}-{engine}": cls(engine)
                     for cls in (TfFramework, TorchFramework) for engine in ("reference", "fast")}


def cnn4_step(backend: str, engine_cls: Any, perf: Any, start: Weights, *,
              private: bool = True, pad: bool = False) -> tuple[Any, Weights]:
    """One step of a cnn4 (16x16) engine of ``backend`` from weights ``start``: 35 examples in
    chunks of 16, 16 and 3 (noise 0, L2 clip 2, lr 1); the engine (its step's loss as
    ``engine.last_loss``) and the weights after it. ``pad``: the chunks padded to their size
    class with zero-weight rows, as a compiled step runs them."""
    import importlib

    models = importlib.import_module(f"{'tfpipe' if backend == 'tf' else 'torchpipe'}.models")
    cfg = config(mechanism="dpsgd-gaussian" if private else "none", noise=0.0, clip=2.0,
                 lr=1.0)
    mech = mechanism("l2", 2.0, 0.0, 40) if private else mechanism(None, float("inf"), 0.0,
                                                                    40)
    model = models.build_model(ModelSpec(name="cnn4"), (16, 16, 1), 10, seed=0)
    models.set_weights(model, start)
    engine = engine_cls(model, cfg, mech, perf)
    engine.pad_chunks = pad
    engine.last_loss = engine.train_step(chunks_of(np.arange(40, 75), 16))
    engine.close()
    return engine, models.get_weights(model)


def check_routes_measured_recorded_replayed(
        step: Callable[[Any], tuple[Any, Weights]], perf: Any, start: Weights,
        layers: list[str], tol: float) -> None:
    """``step(perf)`` (a fast engine's :func:`cnn4_step`, physical chunks of 16,
    ``perf.route_choice: measure``) times its routes per chunk size class (16: the full
    chunks, 4: the last, 3 examples) and records them with their timings; ``perf.routes``
    replays them without timing (the same bits); a forced other route gives the same update
    to ``tol``. ``layers``: cnn4's conv1, conv2, fc1, fc2 as the backend names them."""
    import dataclasses

    conv1, conv2, fc1, _ = layers
    engine, measured = step(perf)
    record = engine.perf_record()
    assert set(record["routes"]) == {"16", "4"}
    assert all(set(routes) == set(layers) for routes in record["routes"].values())
    choice = record["routes_chosen_by"]
    assert choice["how"].startswith("measured") and choice["warmup_seconds"] > 0
    # conv1 (T = 64, p d = 64 x 16): its ghost norm has ~6x the multiply-adds, not timed
    assert set(choice["timings_ms"]["16"][conv1]) == {"per_example", "unfold"}
    assert record["routes"]["16"][fc1] == "ghost"  # a dense layer's only route

    replayed, again = step(dataclasses.replace(perf, routes=record["routes"]))
    assert replayed.perf_record()["routes"] == record["routes"]
    assert replayed.perf_record()["routes_chosen_by"]["how"] == "replayed from perf.routes"
    assert not replayed.perf_record()["routes_chosen_by"]["timings_ms"]
    assert all(np.array_equal(again[k], measured[k]) for k in measured)

    other = {size: {**routes, conv1: "unfold", conv2: "unfold"}
             for size, routes in record["routes"].items()}
    forced, weights = step(dataclasses.replace(perf, routes=other))
    assert forced.perf_record()["routes"] == other
    assert rel_error(diff(weights, start), diff(measured, start)) < tol


def check_a_route_the_layer_lacks_is_refused(step: Callable[[Any], Any], fc1: str) -> None:
    """``step(perf)`` (:func:`cnn4_step`) given ``perf.routes`` that send cnn4's dense layer
    ``fc1`` (as the backend names it) down the unfold, which a dense layer does not have, is
    refused with a ConfigError naming the entry and the layer's only route."""
    import re

    from dpcore.config import PerfSpec
    from dpcore.errors import ConfigError

    perf = PerfSpec(engine="fast", physical_batch_size=16, routes={"16": {fc1: "unfold"}})
    with pytest.raises(ConfigError, match=re.escape(f"perf.routes['16'][{fc1!r}]='unfold'")
                       + r".*valid: ghost"):
        step(perf)


def check_padding_changes_nothing(step: Callable[..., tuple[Any, Weights]], start: Weights,
                                  private: bool) -> None:
    """``step(pad=...)`` (:func:`cnn4_step`, physical chunks of 256: 16, 16 and 3 examples,
    all padded to 32 with zero-weight rows when ``pad``) gives the unpadded update to float
    rounding (rel 1e-6: the padded rows change only the length of each batch-axis sum; not
    bit for bit) and the same loss; a fast engine settles its routes for class 32 only."""
    engine, plain = step(pad=False)
    padded_engine, padded = step(pad=True)
    assert rel_error(diff(padded, start), diff(plain, start)) < 1e-6
    assert padded_engine.last_loss == pytest.approx(engine.last_loss, rel=1e-6)
    if private:
        assert set(padded_engine.perf_record()["routes"]) == {"32"}

