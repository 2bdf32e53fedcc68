"""The fast TF engine (tfpipe.fast) computes the reference engine's clipped-and-noised update:
the same clipped sum on every registered model (noise 0, rel 1e-5), the same DP step,
the same noise statistics; a model with an unsupported layer falls back to the reference
engine."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from dpcore.config import ModelSpec, PerfSpec  # noqa: E402
from tests.backends.train_helpers import (  # noqa: E402
    check_a_route_the_layer_lacks_is_refused,
    check_padding_changes_nothing,
    check_routes_measured_recorded_replayed,
    chunks_of,
    cnn4_step,
    config,
    diff,
    digits16,
    mechanism,
    rel_error,
)

TOL = 1e-5
IMAGE_MODELS = ["cnn4", "resnet18", "vgg11", "vgg16", "alexnet", "scatter-linear",
                "scatter-cnn"]
ALL_MODELS = [*IMAGE_MODELS, "textcnn"]


def _as_weights(tensors: list[Any]) -> dict[str, np.ndarray]:
    return {str(i): np.asarray(t, np.float64) for i, t in enumerate(tensors)}


def _numpy_clipped_sum(records: list[np.ndarray], clip: float, kind: str) -> list[np.ndarray]:
    """Per-example records [n, ...] clipped to flat norm <= clip and summed (float64)."""
    flat = np.concatenate([r.reshape(len(r), -1) for r in records], axis=1)
    norms = np.linalg.norm(flat, axis=1) if kind == "l2" else np.abs(flat).sum(axis=1)
    factors = clip / np.maximum(norms, clip)
    return [np.tensordot(factors, r, axes=1) for r in records]


def _norms(records: list[np.ndarray], kind: str) -> np.ndarray:
    flat = np.concatenate([r.reshape(len(r), -1) for r in records], axis=1)
    return np.linalg.norm(flat, axis=1) if kind == "l2" else np.abs(flat).sum(axis=1)


def _model_and_batch(name: str) -> tuple[Any, Any, Any]:
    """A small instance of registered model ``name`` and a batch of 5 examples for it (token
    ids with repeats within an example for ``textcnn``, so rows of the table add up)."""
    from tfpipe.models import build_model

    rng = np.random.default_rng(0)
    if name == "textcnn":
        model = build_model(ModelSpec(name=name, width=0.25), (12,), 2, seed=1, vocab_size=9)
        x = tf.constant(rng.integers(0, 9, (5, 12)), tf.int32)
        y = tf.constant(rng.integers(0, 2, 5), tf.int64)
        return model, x, y
    shape = (16, 16, 1) if name in ("cnn4", "scatter-cnn") else (32, 32, 3)
    width = 1.0 if name == "cnn4" else 0.125
    model = build_model(ModelSpec(name=name, width=width), shape, 10, seed=1)
    x = tf.constant(rng.uniform(size=(5, *shape)).astype(np.float32))
    return model, x, tf.constant(rng.integers(0, 10, 5), tf.int64)


@pytest.mark.parametrize("name", ALL_MODELS)
def test_clipped_sum_equals_the_reference_on_every_registered_model(name: str) -> None:
    from dpcore.architectures import model_names
    from tfpipe import dp, fast

    assert sorted(ALL_MODELS) == sorted(model_names())  # a newly registered model is tested too
    model, x, y = _model_and_batch(name)
    assert fast.unsupported_layers(model) == []
    _, refs = dp.per_example_gradients(model, model.trainable_variables, x, y)
    records = [np.asarray(r, np.float64) for r in refs]
    for kind in ("l2", "l1"):
        clip = float(np.median(_norms(records, kind)))  # clipping active for some examples
        expected = _numpy_clipped_sum(records, clip, kind)
        _, actual = fast.clipped_gradient_sum(model, model.trainable_variables, x, y, clip,
                                              kind)
        assert rel_error(_as_weights(actual), _as_weights(expected)) < TOL, (name, kind)


def _check_against_reference(model: Any, x: Any, y: Any, label: str,
                             kinds: tuple[str, ...] = ("l2", "l1"),
                             routes: Any = None) -> None:
    """``routes(kind)``: layer name -> route forced for that norm kind (None: defaults)."""
    from tfpipe import dp, fast

    _, refs = dp.per_example_gradients(model, model.trainable_variables, x, y)
    records = [np.asarray(r, np.float64) for r in refs]
    for kind in kinds:
        clip = float(np.median(_norms(records, kind)))
        _, actual = fast.clipped_gradient_sum(model, model.trainable_variables, x, y, clip,
                                              kind, routes(kind) if routes else None)
        assert rel_error(_as_weights(actual),
                         _as_weights(_numpy_clipped_sum(records, clip, kind))) < TOL, (
            label, kind)


def _norm_model() -> tuple[Any, Any, Any]:
    """LayerNormalization over the last axis and over the last two, and GroupNormalization
    (gamma and beta random, so their gradients matter), between convolutions; 7 examples."""
    layers = tf.keras.layers
    tf.keras.utils.set_random_seed(0)
    inputs = tf.keras.Input((6, 6, 2))
    x = layers.Conv2D(4, 3, padding="same")(inputs)
    x = layers.LayerNormalization(axis=-1, gamma_initializer="random_normal",
                                  beta_initializer="random_normal")(x)
    x = layers.Activation("tanh")(x)
    x = layers.LayerNormalization(axis=[2, 3], gamma_initializer="random_normal",
                                  beta_initializer="random_normal")(x)
    x = layers.GroupNormalization(2, gamma_initializer="random_normal",
                                  beta_initializer="random_normal")(x)
    model = tf.keras.Model(inputs, layers.Dense(3)(layers.Flatten()(x)))
    rng = np.random.default_rng(0)
    return (model, tf.constant(rng.normal(size=(7, 6, 6, 2)), tf.float32),
            tf.constant(rng.integers(0, 3, 7), tf.int64))


@pytest.mark.parametrize("route", ["ghost", "per_example", "unfold"])
def test_each_route_forced_on_every_layer_type_it_applies_to_gives_the_reference_sum(
        route: str) -> None:
    """Every route of dpcore.fastrules.ROUTES, forced on every layer whose rule has it (for
    the norm kind), on models that hold every registered layer type: the reference's clipped
    sums, L2 and L1."""
    from dpcore.fastrules import ROUTES
    from tfpipe import fast

    assert route in ROUTES
    covered: set[str] = set()
    for label, (model, x, y) in [*((n, _model_and_batch(n)) for n in
                                   ("cnn4", "resnet18", "textcnn")), ("norms", _norm_model())]:
        _, records = fast.record_layers(model, x, y)

        def forced(kind: str, records: Any = records) -> dict[str, str]:
            return {layer.name: route for layer, a, _ in records
                    if route in fast.FAST_RULES.get(type(layer)).routes(layer, a, kind)}

        covered |= {type(layer).__name__ for layer, _, _ in records
                    if layer.name in forced("l2") | forced("l1")}
        _check_against_reference(model, x, y, f"{label} {route}", routes=forced)
    assert covered == {t.__name__ for t in fast.FAST_RULES
                       if route in fast.FAST_RULES.get(t).ROUTES}, covered


def test_the_ghost_norm_is_chosen_by_the_book_keeping_rule() -> None:
    """Ghost norm exactly where 2 T^2 < p d (L2 only): cnn4's first conv (16x16 input, 8x8
    output, p d = 64 x 16) keeps per-example gradients (the unfold: the rule's route without a
    ghost norm), a wide conv on a 4x4 output not."""
    from tfpipe import fast

    rule = fast.FAST_RULES.get(tf.keras.layers.Conv2D)
    narrow = tf.keras.layers.Conv2D(16, 8, 2, padding="same")
    wide = tf.keras.layers.Conv2D(64, 3, padding="same")
    for layer, shape, out in ((narrow, (2, 16, 16, 1), (2, 8, 8, 16)),
                              (wide, (2, 4, 4, 64), (2, 4, 4, 64))):
        layer.build(shape)
        a, g = tf.random.normal(shape), tf.random.normal(out)
        ghost = layer is wide  # narrow: 2 * 64^2 > 64 * 16; wide: 2 * 16^2 < 576 * 64
        assert (rule.norms(layer, a, g, "l2").kept is None) == ghost
        assert rule.default_route(layer, a, g, "l2") == ("ghost" if ghost else "unfold")
        assert rule.norms(layer, a, g, "l1").kept is not None  # L1 has no ghost form
        assert rule.routes(layer, a, "l1") == ("unfold", "per_example")


def test_every_rule_is_registered_by_type_with_the_decorator() -> None:
    from tfpipe import fast

    layers = tf.keras.layers
    assert set(fast.FAST_RULES) == {layers.Dense, layers.Conv2D, layers.Conv1D,
                                    layers.Embedding, layers.GroupNormalization,
                                    layers.LayerNormalization}
    assert all(isinstance(fast.FAST_RULES.get(t), fast.FastRule) for t in fast.FAST_RULES)
    assert fast.FAST_RULES.get(layers.BatchNormalization) is None


def test_layernorm_and_groupnorm_sums_equal_the_reference() -> None:
    """LayerNormalization over the last axis and over the last two, and GroupNormalization
    (gamma and beta random, so their gradients matter), between convolutions."""
    from tfpipe import fast

    model, x, y = _norm_model()
    assert fast.unsupported_layers(model) == []
    _check_against_reference(model, x, y, "norms")


def _engine_step(engine_cls: Any, cfg: Any, mech: Any, start: dict[str, np.ndarray],
                 chunks: list[Any]) -> dict[str, np.ndarray]:
    from tfpipe.models import build_model, get_weights, set_weights

    model = build_model(ModelSpec(name="cnn4"), (16, 16, 1), 10, seed=0)
    set_weights(model, start)
    engine = engine_cls(model, cfg, mech, PerfSpec(engine="fast"))
    engine.train_step(chunks)
    return get_weights(model)


@pytest.fixture(scope="module")
def start() -> dict[str, np.ndarray]:
    from tfpipe.models import build_model, get_weights

    return get_weights(build_model(ModelSpec(name="cnn4"), (16, 16, 1), 10, seed=3))


@pytest.mark.parametrize(("kind", "clip"), [("l2", 2.0), ("l1", 90.0)])
def test_one_dp_step_is_the_reference_update(kind: str, clip: float,
                                             start: dict[str, np.ndarray]) -> None:
    from tfpipe.fast import FastTfStepEngine
    from tfpipe.train import TfStepEngine

    cfg = config(mechanism="dpsgd-gaussian" if kind == "l2" else "dpsgd-laplace",
                 noise=0.0, clip=clip, lr=1.0)
    mech = mechanism(kind, clip, 0.0, 40)
    chunks = chunks_of(np.arange(40, 75), 16)
    fast_w = _engine_step(FastTfStepEngine, cfg, mech, start, chunks)
    ref_w = _engine_step(TfStepEngine, cfg, mech, start, chunks)
    assert rel_error(diff(fast_w, start), diff(ref_w, start)) < TOL


def test_noise_has_the_reference_statistics(start: dict[str, np.ndarray]) -> None:
    """An empty batch's update is -lr * noise / B: its std is sigma * C * lr / B (within 3%
    over ~27k coordinates), its mean ~0."""
    from tfpipe.fast import FastTfStepEngine

    sigma, clip, lr, b = 1.3, 0.7, 1.0, 10
    cfg = config(noise=sigma, clip=clip, lr=lr)
    update = diff(_engine_step(FastTfStepEngine, cfg, mechanism("l2", clip, sigma * clip, b),
                               start, []), start)
    noise = np.concatenate([v.ravel() for v in update.values()]) * (-b / lr)
    assert noise.std() == pytest.approx(sigma * clip, rel=0.03)
    assert abs(noise.mean()) < 0.03 * sigma * clip
    # and a batch with gradients still carries the noise (not only the clipped sum)
    chunks = chunks_of(np.arange(0, 16), 16)
    noisy = diff(_engine_step(FastTfStepEngine, cfg, mechanism("l2", clip, sigma * clip, b),
                              start, chunks), start)
    clean = diff(_engine_step(FastTfStepEngine, cfg, mechanism("l2", clip, 0.0, b),
                              start, chunks), start)
    residual = np.concatenate([(noisy[k] - clean[k]).ravel() for k in noisy]) * (-b / lr)
    assert residual.std() == pytest.approx(sigma * clip, rel=0.03)


def test_train_records_the_fast_engine() -> None:
    from tfpipe.train import train

    trained = train(config(noise=1.0, steps=2), digits16(), PerfSpec(engine="fast"),
                    progress=False)
    assert trained.extra["engine_used"] == "fast"
    perf = trained.result.to_dict()["perf"]  # the run record's perf section
    assert perf["memory_format_used"].startswith("channels_last (NHWC")
    assert set(perf["threads_in_effect"]) == {"intra_op", "inter_op"}
    assert perf["per_example_gradients"].startswith("Book-Keeping")


def test_a_layer_without_a_rule_is_named_so_train_can_fall_back() -> None:
    from tfpipe import fast

    inputs = tf.keras.Input((8,))
    hidden = tf.keras.layers.Dense(4, activation="relu", name="fused")(inputs)
    normed = tf.keras.layers.BatchNormalization(name="bn")(hidden)
    model = tf.keras.Model(inputs, tf.keras.layers.Dense(2, name="out")(normed))
    problems = fast.unsupported_layers(model)
    assert any("fused" in p and "fused activation" in p for p in problems)
    assert any("bn" in p and "BatchNormalization" in p for p in problems)
    assert not any(p.startswith("out") for p in problems)


def test_train_falls_back_to_the_reference_engine_and_says_why(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The default engine (none asked for) falls back and records why."""
    from tfpipe import fast
    from tfpipe.train import train

    monkeypatch.setattr(fast, "unsupported_layers", lambda model: ["ln (LayerNormalization)"])
    trained = train(config(noise=1.0, steps=2), digits16(), PerfSpec(), progress=False)
    assert trained.extra["engine_used"] == "reference"
    assert trained.extra["fast_engine_fallback"] == "unsupported layers: ln (LayerNormalization)"


def test_fast_asked_explicitly_on_an_unsupported_layer_is_an_error_naming_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from dpcore.errors import ConfigError
    from tfpipe import fast
    from tfpipe.train import train

    monkeypatch.setattr(fast, "unsupported_layers", lambda model: ["ln (LayerNormalization)"])
    with pytest.raises(ConfigError, match=r"no rule for layer ln \(LayerNormalization\)"):
        train(config(noise=1.0, steps=2), digits16(), PerfSpec(engine="fast"), progress=False)


def test_the_default_engine_is_fast() -> None:
    from tfpipe.train import train

    trained = train(config(noise=1.0, steps=2), digits16(), PerfSpec(), progress=False)
    assert trained.extra["engine_used"] == "fast" and "fast_engine_fallback" not in trained.extra


def _cnn4_step(engine_cls: Any, perf: PerfSpec, start: dict[str, np.ndarray], *,
               private: bool = True, pad: bool = False) -> tuple[Any, dict[str, np.ndarray]]:
    return cnn4_step("tf", engine_cls, perf, start, private=private, pad=pad)


def test_routes_are_measured_recorded_and_replayed(start: dict[str, np.ndarray]) -> None:
    from tfpipe.fast import FastTfStepEngine

    check_routes_measured_recorded_replayed(
        lambda perf: _cnn4_step(FastTfStepEngine, perf, start),
        PerfSpec(engine="fast", physical_batch_size=16, route_choice="measure"), start,
        ["conv1", "conv2", "fc1", "fc2"], TOL)


def test_a_route_a_layer_does_not_have_is_refused_naming_the_valid_ones(
        start: dict[str, np.ndarray]) -> None:
    from tfpipe.fast import FastTfStepEngine

    check_a_route_the_layer_lacks_is_refused(
        lambda perf: _cnn4_step(FastTfStepEngine, perf, start), "fc1")


@pytest.mark.parametrize("private", [True, False])
def test_padded_chunks_give_the_unpadded_update(private: bool,
                                                start: dict[str, np.ndarray]) -> None:
    """Chunks padded to their size class with zero-weight rows, as compiled steps run them,
    change nothing but float rounding (:func:`check_padding_changes_nothing`)."""
    from tfpipe.fast import FastTfStepEngine
    from tfpipe.train import TfStepEngine

    cls = FastTfStepEngine if private else TfStepEngine
    check_padding_changes_nothing(
        lambda pad: _cnn4_step(cls, PerfSpec(engine="fast"), start, private=private, pad=pad),
        start, private)


@pytest.mark.parametrize("private", [True, False])
def test_xla_compiled_steps_give_the_uncompiled_update(private: bool,
                                                       start: dict[str, np.ndarray]) -> None:
    """perf.compile (XLA; TF's op determinism off, as XLA needs: no deterministic MaxPool
    gradient) on padded chunks: the uncompiled update to float rounding (rel 1e-6)."""
    from tensorflow.python.framework import config as tf_config

    from tfpipe.fast import FastTfStepEngine
    from tfpipe.train import TfStepEngine

    cls = FastTfStepEngine if private else TfStepEngine
    _, eager = _cnn4_step(cls, PerfSpec(engine="fast"), start, private=private)
    tf_config.disable_op_determinism()
    try:
        engine, compiled = _cnn4_step(cls, PerfSpec(engine="fast", compile=True,
                                                    deterministic=False), start,
                                      private=private, pad=True)
    finally:
        tf.config.experimental.enable_op_determinism()
    assert engine.perf_record()["compiled"].startswith("XLA")
    assert rel_error(diff(compiled, start), diff(eager, start)) < 1e-6
