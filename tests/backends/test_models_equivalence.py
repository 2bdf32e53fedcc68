"""The two model zoos compute the same function from the same neutral weights.

Reference: the Keras model. Its weights are read with ``tfpipe.models.get_weights``, loaded
into the torch model with ``torchpipe.models.set_weights``, and both models' logits on one
random batch must agree to 1e-4 (float32).
"""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
torch = pytest.importorskip("torch")

from dpcore.architectures import model_names  # noqa: E402
from dpcore.config import ModelSpec  # noqa: E402
from tfpipe import models as tfm  # noqa: E402
from torchpipe import models as ptm  # noqa: E402

TOL = 1e-4
VOCAB = 50
N_CLASSES = 10

# (model, input shape) pairs: 28x28x1 and 32x32x3 where images apply
CASES = [
    ("cnn4", (28, 28, 1)),
    ("cnn4", (32, 32, 3)),
    ("cnn4", (29, 31, 3)),  # odd sizes: asymmetric TF 'same' padding of the 8x8 stride-2 conv
    ("resnet18", (32, 32, 3)),
    ("resnet18", (28, 28, 1)),
    ("vgg11", (28, 28, 1)),
    ("vgg11", (32, 32, 3)),
    ("vgg16", (32, 32, 3)),
    ("vgg16", (28, 28, 1)),
    ("alexnet", (28, 28, 1)),
    ("alexnet", (32, 32, 3)),
    ("scatter-linear", (28, 28, 1)),
    ("scatter-linear", (30, 22, 3)),  # sizes not divisible by 4: kymatio floors H/4, W/4
    ("scatter-cnn", (28, 28, 1)),  # grey: Tramer & Boneh's MNIST head
    ("scatter-cnn", (16, 16, 3)),  # colour: their CIFAR-10 head
    ("textcnn", (40,)),
]
ACTIVATION_SPECS = {
    "relu": ModelSpec(activation="relu"),
    "tanh": ModelSpec(activation="tanh"),
    # non-default parameters, so a mix-up of s, T, o would show
    "tempered_sigmoid": ModelSpec(
        activation="tempered_sigmoid", tempered_scale=1.5, tempered_inverse_temperature=0.7,
        tempered_offset=0.3,
    ),
}


def _batch(shape: tuple[int, ...], seed: int = 0) -> tuple[np.ndarray, torch.Tensor]:
    """A batch of 2 in Keras layout and the same batch in torch layout."""
    rng = np.random.default_rng(seed)
    if len(shape) == 1:
        tokens = rng.integers(0, VOCAB, size=(2, *shape))
        return tokens.astype(np.int32), torch.from_numpy(tokens).long()
    x = rng.normal(size=(2, *shape)).astype(np.float32)
    return x, torch.from_numpy(x).permute(0, 3, 1, 2).contiguous()


def _pair(spec: ModelSpec, shape: tuple[int, ...]) -> tuple[tf.keras.Model, torch.nn.Module]:
    keras_model = tfm.build_model(spec, shape, N_CLASSES, vocab_size=VOCAB)
    torch_model = ptm.build_model(spec, shape, N_CLASSES, vocab_size=VOCAB)
    ptm.set_weights(torch_model, tfm.get_weights(keras_model))
    return keras_model, torch_model.eval()


def _logits(keras_model, torch_model, shape):
    x_keras, x_torch = _batch(shape)
    a = keras_model(x_keras, training=False).numpy()
    with torch.no_grad():
        b = torch_model(x_torch).numpy()
    return a, b


def test_registries_have_the_same_names() -> None:
    assert list(tfm.MODELS) == list(ptm.MODELS) == list(model_names())
    assert set(model_names()) == {"cnn4", "resnet18", "vgg11", "vgg16", "alexnet", "scatter-linear",
                                "scatter-cnn", "textcnn"}


def test_every_registered_model_is_tested_here() -> None:
    assert {name for name, _ in CASES} == set(model_names())


@pytest.mark.parametrize(("name", "shape"), CASES, ids=[f"{n}-{'x'.join(map(str, s))}"
                                                       for n, s in CASES])
def test_same_weights_give_same_logits(name: str, shape: tuple[int, ...]) -> None:
    spec = ModelSpec(name=name)
    keras_model, torch_model = _pair(spec, shape)
    a, b = _logits(keras_model, torch_model, shape)
    assert a.shape == b.shape == (2, N_CLASSES)
    assert np.abs(a).max() > 1e-3  # the comparison is not between two zero outputs
    assert np.abs(a - b).max() <= TOL
    # the same Grad-CAM targets in both frameworks
    for target in ("last_conv", "features"):
        name_tf = tfm.gradcam_layer_name(keras_model, target=target)
        assert name_tf == ptm.gradcam_layer_name(torch_model, target=target)
        tfm.get_layer(keras_model, name_tf)
        ptm.get_layer(torch_model, name_tf)


@pytest.mark.parametrize("activation", list(ACTIVATION_SPECS))
@pytest.mark.parametrize("shape", [(28, 28, 1), (32, 32, 3)])
def test_cnn4_every_activation(activation: str, shape: tuple[int, ...]) -> None:
    spec = ACTIVATION_SPECS[activation]
    keras_model, torch_model = _pair(spec, shape)
    a, b = _logits(keras_model, torch_model, shape)
    assert np.abs(a - b).max() <= TOL


def test_cnn4_is_the_tutorial_network() -> None:
    """26,010 parameters on MNIST: the count of the TF Privacy / Opacus tutorial convnet."""
    keras_model = tfm.build_model(ModelSpec(name="cnn4"), (28, 28, 1), 10)
    torch_model = ptm.build_model(ModelSpec(name="cnn4"), (28, 28, 1), 10)
    assert keras_model.count_params() == 26010
    assert sum(p.numel() for p in torch_model.parameters()) == 26010
    assert tfm.gradcam_layer_name(keras_model) == ptm.gradcam_layer_name(torch_model) == "conv2"


def test_width_multiplier_and_seeded_init_match() -> None:
    """A seed gives the identical neutral init in both frameworks (no porting needed)."""
    spec = ModelSpec(name="resnet18", width=0.25)
    keras_model = tfm.build_model(spec, (28, 28, 1), 3, seed=7)
    torch_model = ptm.build_model(spec, (28, 28, 1), 3, seed=7).eval()
    w_tf, w_pt = tfm.get_weights(keras_model), ptm.get_weights(torch_model)
    assert w_tf.keys() == w_pt.keys()
    assert w_tf["conv1.kernel"].shape == (3, 3, 1, 16)
    for key in w_tf:
        np.testing.assert_array_equal(w_tf[key], w_pt[key])
    a, b = _logits(keras_model, torch_model, (28, 28, 1))
    assert np.abs(a - b).max() <= TOL
    other = tfm.get_weights(tfm.build_model(spec, (28, 28, 1), 3, seed=8))
    assert not np.array_equal(other["conv1.kernel"], w_tf["conv1.kernel"])


def test_outputs_are_logits_not_probabilities() -> None:
    spec = ModelSpec(name="cnn4")
    keras_model, torch_model = _pair(spec, (28, 28, 1))
    x_keras, _ = _batch((28, 28, 1))
    out = keras_model(x_keras * 10.0, training=False).numpy()
    assert not np.allclose(out.sum(axis=1), 1.0)
    assert keras_model.layers[-1].get_config()["activation"] == "linear"
