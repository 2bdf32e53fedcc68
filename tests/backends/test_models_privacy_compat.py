"""The zoos suit DP training: Opacus accepts every torch model, per-example gradients work in
both frameworks, and the tempered sigmoid is what it claims to be."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
torch = pytest.importorskip("torch")
opacus = pytest.importorskip("opacus")

from opacus import GradSampleModule  # noqa: E402
from opacus.validators import ModuleValidator  # noqa: E402

from dpcore.activations import ActivationSpec, reference, tempered_sigmoid  # noqa: E402
from dpcore.architectures import model_names  # noqa: E402
from dpcore.config import ModelSpec  # noqa: E402
from tfpipe import models as tfm  # noqa: E402
from torchpipe import models as ptm  # noqa: E402


def _shape(name: str) -> tuple[int, ...]:
    return (16,) if name == "textcnn" else (28, 28, 1)


@pytest.mark.parametrize("name", model_names())
def test_opacus_validator_accepts_every_model(name: str) -> None:
    model = ptm.build_model(ModelSpec(name=name), _shape(name), 10, vocab_size=100)
    assert ModuleValidator.validate(model, strict=True) == []
    assert not any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules())


@pytest.mark.parametrize("name", model_names())
def test_opacus_per_example_gradients_match_a_loop(name: str) -> None:
    """Opacus' hook-based grad samplers give each example's own gradient (width 1/8: fast)."""
    shape = _shape(name)
    model = ptm.build_model(ModelSpec(name=name, width=0.125), shape, 3, seed=0, vocab_size=30)
    rng = np.random.default_rng(0)
    if name == "textcnn":
        x = torch.from_numpy(rng.integers(0, 30, size=(3, *shape))).long()
    else:
        x = torch.from_numpy(rng.normal(size=(3, shape[2], *shape[:2])).astype(np.float32))
    y = torch.tensor([0, 1, 2])
    gsm = GradSampleModule(model, loss_reduction="sum")
    torch.nn.functional.cross_entropy(gsm(x), y, reduction="sum").backward()
    samples = {n: p.grad_sample.clone() for n, p in gsm.named_parameters()}
    for i in range(3):
        model.zero_grad()
        for p in model.parameters():
            p.grad = None
        loss = torch.nn.functional.cross_entropy(model(x[i:i + 1]), y[i:i + 1], reduction="sum")
        grads = torch.autograd.grad(loss, list(model.parameters()))
        for (n, _), g in zip(gsm.named_parameters(), grads, strict=True):
            torch.testing.assert_close(samples[n][i], g, atol=1e-5, rtol=1e-4)
    gsm._close()


@pytest.mark.parametrize("name", ["cnn4", "resnet18", "textcnn"])
def test_keras_per_example_gradients_vectorise(name: str) -> None:
    """TF Privacy's fast path (vectorized_map over examples) runs and matches a loop.

    Image models vectorise fully (no while-loop fallback). Keras' Embedding reads its table
    with ResourceGather, which pfor cannot vectorise, so textcnn needs the while-loop fallback
    (vectorized_map's default, also what DPKerasSGDOptimizer gets).
    """
    shape = _shape(name)
    model = tfm.build_model(ModelSpec(name=name, width=0.125), shape, 3, seed=0, vocab_size=30)
    rng = np.random.default_rng(0)
    if name == "textcnn":
        x = tf.constant(rng.integers(0, 30, size=(3, *shape)), tf.int32)
    else:
        x = tf.constant(rng.normal(size=(3, *shape)).astype(np.float32))
    y = tf.constant([0, 1, 2])
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def one(args):
        xi, yi = args
        with tf.GradientTape() as tape:
            loss = loss_fn(yi[None], model(xi[None], training=True))
        return tape.gradient(loss, model.trainable_variables)

    per_example = tf.vectorized_map(one, (x, y), fallback_to_while_loop=name == "textcnn")
    for i in range(3):
        looped = one((x[i], y[i]))
        for a, b in zip(per_example, looped, strict=True):
            g = tf.convert_to_tensor(b).numpy()  # embedding gradients arrive as IndexedSlices
            np.testing.assert_allclose(tf.convert_to_tensor(a)[i].numpy(), g, atol=1e-5)


def test_tempered_sigmoid_with_2_2_1_is_tanh() -> None:
    x = np.linspace(-6, 6, 101)
    np.testing.assert_allclose(tempered_sigmoid(x, 2.0, 2.0, 1.0), np.tanh(x), atol=1e-12)
    spec = ActivationSpec("tempered_sigmoid", 2.0, 2.0, 1.0)
    x32 = x.astype(np.float32)
    keras_out = tfm.activation_layer(spec, "a")(x32).numpy()
    torch_out = ptm.activation_module(spec)(torch.from_numpy(x32)).numpy()
    np.testing.assert_allclose(keras_out, np.tanh(x32), atol=1e-6)
    np.testing.assert_allclose(torch_out, np.tanh(x32), atol=1e-6)


@pytest.mark.parametrize("kind", ["relu", "tanh", "tempered_sigmoid"])
def test_activation_layers_match_the_numpy_reference(kind: str) -> None:
    spec = ActivationSpec(kind, scale=1.7, inverse_temperature=0.6, offset=0.4)
    x = np.random.default_rng(0).normal(scale=3, size=200).astype(np.float32)
    ref = reference(spec, x.astype(np.float64))
    np.testing.assert_allclose(tfm.activation_layer(spec, "a")(x).numpy(), ref, atol=1e-6)
    torch_out = ptm.activation_module(spec)(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(torch_out, ref, atol=1e-6)


def test_keras_tempered_sigmoid_serialises() -> None:
    spec = ModelSpec(name="cnn4", activation="tempered_sigmoid", tempered_scale=3.0)
    model = tfm.build_model(spec, (28, 28, 1), 10)
    clone = tf.keras.models.model_from_json(model.to_json())
    layer = clone.get_layer("conv1_act")
    assert isinstance(layer, tfm.TemperedSigmoid) and layer.scale == 3.0
