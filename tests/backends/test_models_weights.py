"""Neutral weight layout: round trips, validation errors, seeded init, layout conversions."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
torch = pytest.importorskip("torch")

from dpcore.architectures import architecture, model_names  # noqa: E402
from dpcore.config import ModelSpec  # noqa: E402
from dpcore.errors import ConfigError  # noqa: E402
from dpcore.weights import (  # noqa: E402
    from_torch_layout,
    init_weights,
    load_weights,
    save_weights,
    to_torch_layout,
    weight_shapes,
)
from tfpipe import models as tfm  # noqa: E402
from torchpipe import models as ptm  # noqa: E402

BACKENDS = {"keras": tfm, "torch": ptm}
SMALL = ModelSpec(name="cnn4")


def _shape(name: str) -> tuple[int, ...]:
    return (20,) if name == "textcnn" else (28, 28, 1)


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_round_trip_is_identity(backend: str) -> None:
    zoo = BACKENDS[backend]
    model = zoo.build_model(ModelSpec(name="resnet18", width=0.125), (28, 28, 1), 4)
    first = zoo.get_weights(model)
    weights = init_weights({k: v.shape for k, v in first.items()}, seed=3)
    zoo.set_weights(model, weights)
    again = zoo.get_weights(model)
    assert list(again) == list(weights)
    for key in weights:
        assert again[key].dtype == np.float32
        np.testing.assert_array_equal(again[key], weights[key])


@pytest.mark.parametrize("name", model_names())
def test_keys_and_shapes_agree_with_the_description(name: str) -> None:
    spec = ModelSpec(name=name, width=0.25)
    expected = architecture(spec, _shape(name), 5, vocab_size=30).weight_shapes()
    assert weight_shapes(spec, _shape(name), 5, vocab_size=30) == expected
    for zoo in BACKENDS.values():
        got = zoo.get_weights(zoo.build_model(spec, _shape(name), 5, vocab_size=30))
        assert {k: v.shape for k, v in got.items()} == expected


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_missing_extra_and_misshapen_weights_raise(backend: str) -> None:
    zoo = BACKENDS[backend]
    model = zoo.build_model(SMALL, (28, 28, 1), 10)
    good = zoo.get_weights(model)

    missing = dict(good)
    del missing["fc1.bias"]
    with pytest.raises(ConfigError, match=r"missing key\(s\) fc1\.bias"):
        zoo.set_weights(model, missing)

    extra = {**good, "fc9.kernel": np.zeros((1, 1), np.float32)}
    with pytest.raises(ConfigError, match=r"unexpected key\(s\) fc9\.kernel"):
        zoo.set_weights(model, extra)

    wrong = {**good, "conv1.kernel": np.zeros((8, 8, 3, 16), np.float32)}
    with pytest.raises(ConfigError, match=r"conv1\.kernel.*\(8, 8, 3, 16\).*\(8, 8, 1, 16\)"):
        zoo.set_weights(model, wrong)

    # all-or-nothing: the failed calls changed nothing
    after = zoo.get_weights(model)
    for key in good:
        np.testing.assert_array_equal(after[key], good[key])


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_unknown_name_and_bad_inputs_raise(backend: str) -> None:
    zoo = BACKENDS[backend]
    with pytest.raises(ConfigError, match="valid: cnn4, resnet18, vgg11, vgg16, alexnet"):
        zoo.build_model(ModelSpec(name="lenet"), (28, 28, 1), 10)
    with pytest.raises(ConfigError, match="vocab_size"):
        zoo.build_model(ModelSpec(name="textcnn"), (20,), 2)
    with pytest.raises(ConfigError, match="too small"):
        zoo.build_model(SMALL, (8, 8, 1), 10)
    with pytest.raises(ConfigError, match=r"\(H, W, C\)"):
        zoo.build_model(SMALL, (28, 28), 10)
    with pytest.raises(ConfigError, match="builder 'vgg11'"):
        zoo.MODELS["vgg11"](SMALL, (28, 28, 1), 10)


def test_torch_weights_survive_opacus_wrapping() -> None:
    from opacus import GradSampleModule

    model = ptm.build_model(SMALL, (28, 28, 1), 10, seed=1)
    wrapped = GradSampleModule(model)
    assert ptm.get_weights(wrapped).keys() == ptm.get_weights(model).keys()
    assert ptm.gradcam_layer_name(wrapped) == "conv2"
    new = init_weights({k: v.shape for k, v in ptm.get_weights(model).items()}, seed=2)
    ptm.set_weights(wrapped, new)
    np.testing.assert_array_equal(ptm.get_weights(model)["fc2.kernel"], new["fc2.kernel"])


def test_init_weights_is_deterministic_and_keras_like() -> None:
    shapes = {"c.kernel": (3, 3, 4, 8), "c.bias": (8,), "g.gamma": (8,), "g.beta": (8,),
              "e.embeddings": (10, 4), "d.kernel": (72, 5)}
    a, b = init_weights(shapes, 0), init_weights(shapes, 0)
    for key in shapes:
        np.testing.assert_array_equal(a[key], b[key])
        assert a[key].shape == shapes[key] and a[key].dtype == np.float32
    limit = np.sqrt(6.0 / (9 * 4 + 9 * 8))  # Glorot-uniform with receptive-field fans
    assert np.abs(a["c.kernel"]).max() <= limit and np.abs(a["c.kernel"]).max() > 0.8 * limit
    assert not a["c.bias"].any() and not a["g.beta"].any() and (a["g.gamma"] == 1).all()
    assert np.abs(a["e.embeddings"]).max() <= 0.05
    # an array depends on its own key only, not on which other layers exist
    np.testing.assert_array_equal(init_weights({"d.kernel": (72, 5)}, 0)["d.kernel"],
                                  a["d.kernel"])
    assert not np.array_equal(init_weights(shapes, 1)["c.kernel"], a["c.kernel"])
    with pytest.raises(ConfigError, match="no initialiser"):
        init_weights({"x.alpha": (2,)}, 0)
    with pytest.raises(ConfigError, match="seed"):
        init_weights(shapes, -1)


@pytest.mark.parametrize(("kind", "param", "neutral", "torch_shape"), [
    ("conv2d", "kernel", (3, 5, 2, 7), (7, 2, 3, 5)),
    ("conv1d", "kernel", (5, 2, 7), (7, 2, 5)),
    ("dense", "kernel", (4, 6), (6, 4)),
    ("groupnorm", "gamma", (6,), (6,)),
    ("embedding", "embeddings", (9, 3), (9, 3)),
])
def test_layout_conversions_invert(kind, param, neutral, torch_shape) -> None:
    x = np.arange(np.prod(neutral), dtype=np.float32).reshape(neutral)
    t = to_torch_layout(kind, param, x)
    assert t.shape == torch_shape
    np.testing.assert_array_equal(from_torch_layout(kind, param, t), x)


def test_conv_kernel_layout_matches_torch_semantics() -> None:
    """The HWIO -> OIHW permutation is the one that makes the two convolutions agree."""
    rng = np.random.default_rng(0)
    kernel = rng.normal(size=(3, 2, 4, 5)).astype(np.float32)  # non-square: catches H/W swaps
    x = rng.normal(size=(1, 6, 7, 4)).astype(np.float32)
    ref = tf.nn.conv2d(x, kernel, strides=1, padding="VALID").numpy()
    weight = torch.from_numpy(to_torch_layout("conv2d", "kernel", kernel))
    got = torch.nn.functional.conv2d(torch.from_numpy(x).permute(0, 3, 1, 2), weight)
    np.testing.assert_allclose(got.permute(0, 2, 3, 1).numpy(), ref, atol=1e-5)


def test_save_and_load(tmp_path) -> None:
    weights = init_weights({"a.kernel": (2, 3), "a.bias": (3,)}, 0)
    path = save_weights(tmp_path / "w" / "weights.npz", weights)
    back = load_weights(path)
    assert list(back) == list(weights)
    np.testing.assert_array_equal(back["a.kernel"], weights["a.kernel"])
    with pytest.raises(ConfigError, match="does not exist"):
        load_weights(tmp_path / "nope.npz")
