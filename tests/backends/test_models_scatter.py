"""The ScatterNet models (``scatter-linear``, ``scatter-cnn``; Tramer & Boneh, ICLR 2021) on
both frameworks: kymatio's scattering agrees between PyTorch and TensorFlow (1e-6, channel
order included), the models are Tramer & Boneh's (parameter counts), the scattering and its
GroupNorm have no weights and normalise each example alone (no privacy cost), probabilities
agree to 1e-6 after a weight port in either direction, every DP engine of both backends
gives the same clipped update, and Grad-CAM has a defined target on both models.

Tiny inputs (16x16, sklearn's digits), so the file runs in well under a minute.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
torch = pytest.importorskip("torch")
pytest.importorskip("kymatio")

from dpcore.architectures import architecture, scattering_channels  # noqa: E402
from dpcore.config import ModelSpec, PerfSpec  # noqa: E402
from dpcore.errors import ConfigError  # noqa: E402
from tests.backends.train_helpers import (  # noqa: E402
    chunks_of,
    config,
    diff,
    mechanism,
    rel_error,
)
from tfpipe import models as tfm  # noqa: E402
from tfpipe.predict import predict_proba as tf_proba  # noqa: E402
from torchpipe import models as ptm  # noqa: E402
from torchpipe.predict import predict_proba as torch_proba  # noqa: E402

SCATTER_MODELS = ("scatter-linear", "scatter-cnn")
PROBA_TOL = 1e-6
SCATTER_TOL = 1e-6  # absolute, on coefficients of size ~0.1-1 (measured max 2.4e-7)
UPDATE_TOL = 1e-5  # relative, flat L2 norm of the update difference (as test_dp_equivalence)


def _images(shape: tuple[int, ...], n: int = 3, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0.0, 1.0, (n, *shape)).astype(np.float32)


@pytest.mark.parametrize("shape", [(16, 16, 1), (30, 22, 3)])
def test_the_scattering_is_the_same_in_both_frameworks(shape: tuple[int, ...]) -> None:
    """The Keras and torch scattering layers (kymatio's two backends plus our channel
    merge) agree to 1e-6 on the same images, in the traced shape (H/4, W/4, 81 C)."""
    x = _images(shape)
    out_tf = tfm.Scattering(2, 8)(tf.constant(x)).numpy()
    module = ptm.Scattering(2, 8, shape[:2])
    with torch.no_grad():
        out_torch = module(torch.from_numpy(x).permute(0, 3, 1, 2)).permute(0, 2, 3, 1).numpy()
    expected = (shape[0] // 4, shape[1] // 4, 81 * shape[2])
    assert out_tf.shape == out_torch.shape == (3, *expected)
    assert np.abs(out_tf).max() > 0.1  # not two zero maps
    assert np.abs(out_tf - out_torch).max() <= SCATTER_TOL
    # channel c * 81 + k is coefficient k of input channel c: scattering channel 1 alone
    if shape[2] > 1:
        alone = tfm.Scattering(2, 8)(tf.constant(x[..., 1:2])).numpy()
        np.testing.assert_allclose(out_tf[..., 81:162], alone, atol=SCATTER_TOL)
    arch = architecture(ModelSpec(name="scatter-linear"), shape, 10)
    assert arch.trace()["scatter"][1] == expected
    assert scattering_channels(2, 8) == 81


def test_parameter_counts_are_tramer_and_bonehs() -> None:
    """On MNIST (28x28x1 -> 81x7x7 scattering), their ScatterLinear has 3969 * 10 + 10 =
    39,700 weights and their MNIST_CNN on scattered input 11,680 + 4,640 + 16,416 + 330 =
    33,066; on CIFAR-10 (243x8x8) their CNN has 140,032 + 36,928 + 10,250 = 187,210. (Both
    backends build exactly these shapes: test_models_weights.)"""
    counts = {("scatter-linear", (28, 28, 1)): 39_700, ("scatter-cnn", (28, 28, 1)): 33_066,
              ("scatter-cnn", (32, 32, 3)): 187_210}
    for (name, shape), expected in counts.items():
        shapes = architecture(ModelSpec(name=name), shape, 10).weight_shapes()
        assert sum(int(np.prod(s)) for s in shapes.values()) == expected, name


@pytest.mark.parametrize("name", SCATTER_MODELS)
def test_scattering_and_its_groupnorm_have_no_weights(name: str) -> None:
    """Nothing before the first trainable layer has weights: not trained, not clipped,
    no neutral key (kymatio's filters are torch buffers / TF constants)."""
    keras_model = tfm.build_model(ModelSpec(name=name), (16, 16, 1), 10)
    torch_model = ptm.build_model(ModelSpec(name=name), (16, 16, 1), 10)
    for layer_name in ("scatter", "scatter_gn"):
        assert keras_model.get_layer(layer_name).weights == []
        assert list(ptm.get_layer(torch_model, layer_name).parameters()) == []
    assert not any(key.startswith("scatter") for key in tfm.get_weights(keras_model))
    assert list(ptm.get_weights(torch_model)) == list(tfm.get_weights(keras_model))


@pytest.mark.parametrize("name", SCATTER_MODELS)
def test_each_example_is_normalised_alone(name: str) -> None:
    """The GroupNorm uses no statistics of other examples (so it costs no privacy): an
    example's output is the same alone and in a batch, in both frameworks."""
    x = _images((16, 16, 1), n=4)
    x[1:] *= 10.0  # the other examples' scale must not change example 0's output
    keras_model = tfm.build_model(ModelSpec(name=name), (16, 16, 1), 10, seed=0)
    torch_model = ptm.build_model(ModelSpec(name=name), (16, 16, 1), 10, seed=0).eval()

    def torch_logits(batch: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return torch_model(torch.from_numpy(batch).permute(0, 3, 1, 2)).numpy()

    for logits in (lambda b: keras_model(b, training=False).numpy(), torch_logits):
        np.testing.assert_allclose(logits(x)[0], logits(x[:1])[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("name", "shape"), [("scatter-linear", (16, 16, 1)),
                                             ("scatter-cnn", (16, 16, 1)),
                                             ("scatter-cnn", (16, 16, 3))])
def test_probabilities_agree_after_a_port_both_ways(name: str, shape: tuple[int, ...]) -> None:
    spec = ModelSpec(name=name, activation="tanh")
    x = _images(shape, n=5, seed=1)
    keras_model = tfm.build_model(spec, shape, 10, seed=1)
    torch_model = ptm.build_model(spec, shape, 10, seed=2)
    ptm.set_weights(torch_model, tfm.get_weights(keras_model))  # TF -> torch
    a, b = tf_proba(keras_model, x), torch_proba(torch_model, x)
    assert a.std(axis=1).min() > 1e-4  # not uniform: the comparison has something to see
    assert np.abs(a - b).max() <= PROBA_TOL
    other = ptm.build_model(spec, shape, 10, seed=3)  # torch -> TF
    tfm.set_weights(keras_model, ptm.get_weights(other))
    assert np.abs(tf_proba(keras_model, x) - torch_proba(other, x)).max() <= PROBA_TOL


ENGINES = [("tf", "reference"), ("tf", "fast"), ("torch", "reference"), ("torch", "fast")]


def _dp_step(backend: str, engine: str, name: str, start: dict[str, np.ndarray], clip: float,
             kind: str) -> dict[str, np.ndarray]:
    """One DP step (noise 0) of ``name`` on digits examples 40..74 in chunks of 16."""
    from dpcore.backend import load_backend

    code = load_backend(backend)
    zoo = tfm if backend == "tf" else ptm
    model = zoo.build_model(ModelSpec(name=name), (16, 16, 1), 10)
    zoo.set_weights(model, start)
    cfg = config(mechanism="dpsgd-gaussian" if kind == "l2" else "dpsgd-laplace",
                 noise=0.0, clip=clip, lr=1.0)
    step = code.ENGINES[engine](model, cfg, mechanism(kind, clip, 0.0, 40),
                                PerfSpec(engine=engine))
    step.train_step(chunks_of(np.arange(40, 75), 16))
    if hasattr(step, "close"):
        step.close()
    return zoo.get_weights(model)


@pytest.mark.parametrize("name", SCATTER_MODELS)
def test_every_engine_gives_the_same_clipped_update(name: str) -> None:
    """Fast and reference engines of both backends: one update (rel 1e-5), clipping active.
    (L2 here; each backend's fast engine equals its reference for L1 and L2 on these models
    in test_fast_engine*.py, and the backends agree on L1 steps in test_dp_equivalence.)"""
    kind, clip = "l2", 0.1
    start = tfm.get_weights(tfm.build_model(ModelSpec(name=name), (16, 16, 1), 10, seed=4))
    updates = {f"{b}-{e}": diff(_dp_step(b, e, name, start, clip, kind), start)
               for b, e in ENGINES}
    reference = updates.pop("tf-reference")
    for key, update in updates.items():
        assert rel_error(update, reference) < UPDATE_TOL, key
    unclipped = diff(_dp_step("torch", "fast", name, start, 1e9, kind), start)
    assert rel_error(unclipped, reference) > 0.05


def test_gradcam_targets() -> None:
    """scatter-cnn: its last convolution; scatter-linear (no convolution): the scattering
    output, the only spatial map its linear head sees; the same in both frameworks."""
    expected = {"scatter-cnn": "conv2", "scatter-linear": "scatter"}
    for name, layer in expected.items():
        spec = ModelSpec(name=name)
        assert architecture(spec, (16, 16, 1), 10).gradcam_layer() == layer
        assert tfm.gradcam_layer_name(tfm.build_model(spec, (16, 16, 1), 10)) == layer
        assert ptm.gradcam_layer_name(ptm.build_model(spec, (16, 16, 1), 10)) == layer


def test_an_architecture_without_convolution_or_scattering_still_refuses() -> None:
    from dpcore.architectures import Architecture, Dense, Flatten

    arch = Architecture("mlp", (4, 4, 1), 2, architecture(
        ModelSpec(), (16, 16, 1), 2).activation, (Flatten("flatten"), Dense("fc", 2)))
    with pytest.raises(ConfigError, match="no convolution"):
        arch.gradcam_layer()


@pytest.mark.parametrize("zoo", [tfm, ptm], ids=["tf", "torch"])
@pytest.mark.parametrize("name", SCATTER_MODELS)
def test_images_below_8_px_are_refused(zoo: Any, name: str) -> None:
    zoo.build_model(ModelSpec(name=name), (8, 8, 1), 10)  # the smallest size that works
    with pytest.raises(ConfigError, match=r"at least 8x8 px.*data.image_size"):
        zoo.build_model(ModelSpec(name=name), (7, 16, 1), 10)
