"""Grad-CAM in both backends: the same maps from the same weights, and the shared conventions.

Reference for the cross-framework test: with the same neutral weights (same init seed, or
ported with get/set_weights), tf-keras-vis' map (Keras) and Captum's (torch) must have a
per-image Pearson correlation >= 0.99 on every registered image model. Maps that are constant
(a dead ReLU map becomes all zeros) must be constant in both, and most maps must not be.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
torch = pytest.importorskip("torch")
pytest.importorskip("tf_keras_vis")
pytest.importorskip("captum")

import torch.nn.functional as F  # noqa: E402

from dpcore.architectures import IMAGE_ARCHITECTURES  # noqa: E402
from dpcore.config import ModelSpec  # noqa: E402
from dpcore.errors import ConfigError  # noqa: E402
from dpcore.saliency import is_constant, postprocess_cam, upsample_bilinear  # noqa: E402
from tfpipe import explain as tfe  # noqa: E402
from tfpipe import models as tfm  # noqa: E402
from tfpipe.predict import predict_proba as tf_predict_proba  # noqa: E402
from torchpipe import explain as pte  # noqa: E402
from torchpipe import models as ptm  # noqa: E402

N_CLASSES = 10
N_IMAGES = 4
MIN_CORRELATION = 0.99
# every registered conv model, at a small size whose last convolution is at least 3x3
# (vgg* at 32x32 would end in 2x2 maps, half of them dead at random init)
SHAPES = {
    "cnn4": (28, 28, 1),
    "resnet18": (32, 32, 3),
    "vgg11": (28, 28, 1),
    "vgg16": (28, 28, 1),
    "alexnet": (32, 32, 3),
    "scatter-linear": (16, 16, 1),  # explains the 4x4 scattering output (no convolution)
    "scatter-cnn": (32, 32, 3),  # conv2 is 8x8
}


def test_every_image_model_is_covered() -> None:
    assert set(SHAPES) == set(IMAGE_ARCHITECTURES)


def _pair(name: str, seed: int = 0) -> tuple[object, object]:
    """The Keras and torch models of ``name`` with the same seeded weights."""
    shape = SHAPES[name]
    spec = ModelSpec(name=name)
    return (tfm.build_model(spec, shape, N_CLASSES, seed=seed),
            ptm.build_model(spec, shape, N_CLASSES, seed=seed))


@cache
def _cnn4() -> tuple[object, object]:
    """The cnn4 pair, built once (the models used by several tests)."""
    return _pair("cnn4")


def _images(shape: tuple[int, ...], n: int = N_IMAGES, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0.0, 1.0, (n, *shape)).astype(np.float32)


def _assert_same_maps(a: np.ndarray, b: np.ndarray, min_varying: int) -> None:
    """Constant maps constant in both; Pearson >= 0.99 for the others; enough of those."""
    const_a, const_b = is_constant(a), is_constant(b)
    np.testing.assert_array_equal(const_a, const_b)
    np.testing.assert_array_equal(a[const_a], 0.0)
    np.testing.assert_array_equal(b[const_b], 0.0)
    varying = np.flatnonzero(~const_a)
    assert len(varying) >= min_varying, f"only {len(varying)} maps are not constant"
    for i in varying:
        r = np.corrcoef(a[i].ravel(), b[i].ravel())[0, 1]
        assert r >= MIN_CORRELATION, (i, r)


# ------------------------------------------------------------------ cross-framework
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_same_weights_give_the_same_maps(name: str) -> None:
    keras_model, torch_model = _pair(name)
    x = _images(SHAPES[name])
    a = tfe.gradcam(keras_model, x)
    b = pte.gradcam(torch_model, x)
    for maps in (a, b):
        assert maps.shape == x.shape[:3] and maps.dtype == np.float32
        assert maps.min() >= 0.0 and maps.max() <= 1.0
    _assert_same_maps(a, b, min_varying=N_IMAGES - 1)


def test_ported_weights_explicit_targets_and_feature_layer() -> None:
    """Keras-default weights ported into torch; a fixed class per image; the 'features'
    layer (after the last activation/pooling) instead of the last convolution."""
    tf.keras.utils.set_random_seed(3)
    shape = SHAPES["cnn4"]
    keras_model = tfm.build_model(ModelSpec(name="cnn4"), shape, N_CLASSES)
    torch_model = ptm.build_model(ModelSpec(name="cnn4"), shape, N_CLASSES)
    ptm.set_weights(torch_model, tfm.get_weights(keras_model))
    x = _images(shape, n=6, seed=1)
    targets = np.arange(6) % N_CLASSES
    _assert_same_maps(tfe.gradcam(keras_model, x, targets), pte.gradcam(torch_model, x, targets),
                      min_varying=4)
    layer = tfm.gradcam_layer_name(keras_model, target="features")
    assert layer == ptm.gradcam_layer_name(torch_model, target="features")
    _assert_same_maps(tfe.gradcam(keras_model, x, targets, layer=layer),
                      pte.gradcam(torch_model, x, targets, layer=layer), min_varying=4)


# ------------------------------------------------------------------ conventions
BACKENDS = {
    "tf": (tfe.gradcam, lambda: _cnn4()[0]),
    "torch": (pte.gradcam, lambda: _cnn4()[1]),
}


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_default_target_is_the_predicted_class(backend: str) -> None:
    gradcam, make = BACKENDS[backend]
    model = make()
    x = _images(SHAPES["cnn4"], n=5, seed=2)
    keras_model = _cnn4()[0]  # same weights: the same predictions
    predicted = np.argmax(tf_predict_proba(keras_model, x), axis=1)
    np.testing.assert_array_equal(gradcam(model, x), gradcam(model, x, predicted))


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_batching_int_target_and_uint8_do_not_change_the_maps(backend: str) -> None:
    gradcam, make = BACKENDS[backend]
    model = make()
    x8 = np.random.default_rng(4).integers(0, 256, (5, *SHAPES["cnn4"]), dtype=np.uint8)
    x = x8.astype(np.float32) / np.float32(255.0)
    whole = gradcam(model, x, 3)
    np.testing.assert_allclose(gradcam(model, x, 3, batch_size=2), whole, atol=1e-5)
    np.testing.assert_allclose(gradcam(model, x, np.full(5, 3)), whole, atol=1e-6)
    np.testing.assert_allclose(gradcam(model, x8, 3), whole, atol=1e-6)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_bad_arguments_raise_config_error(backend: str) -> None:
    gradcam, make = BACKENDS[backend]
    model = make()
    x = _images(SHAPES["cnn4"], n=2)
    with pytest.raises(ConfigError, match=r"out of range; valid: 0..9"):
        gradcam(model, x, N_CLASSES)
    with pytest.raises(ConfigError, match="shape"):
        gradcam(model, x[..., :0])
    with pytest.raises(ConfigError, match="no layer 'nope'"):
        gradcam(model, x, layer="nope")
    with pytest.raises(ConfigError, match="spatial"):
        gradcam(model, x, layer="fc1")
    with pytest.raises(ConfigError, match="batch_size"):
        gradcam(model, x, batch_size=0)


def test_text_models_are_rejected_in_both() -> None:
    spec = ModelSpec(name="textcnn")
    tokens = np.zeros((2, 20), np.int32)
    keras_model = tfm.build_model(spec, (20,), 2, seed=0, vocab_size=30)
    torch_model = ptm.build_model(spec, (20,), 2, seed=0, vocab_size=30)
    for gradcam, model in ((tfe.gradcam, keras_model), (pte.gradcam, torch_model)):
        with pytest.raises(ConfigError, match="image models only"):
            gradcam(model, tokens)


def test_torch_gradcam_restores_mode_and_leaves_grads_alone() -> None:
    model = _cnn4()[1]
    model.train()
    pte.gradcam(model, _images(SHAPES["cnn4"], n=2))
    assert model.training
    assert all(p.grad is None for p in model.parameters())
    model.eval()


def test_torch_gradcam_matches_a_hand_written_reference() -> None:
    """Grad-CAM by hand: a forward hook keeps the layer output A; w_k = mean_ij dlogit/dA_k."""
    model = ptm.build_model(ModelSpec(name="alexnet"), SHAPES["alexnet"], N_CLASSES, seed=0)
    model.eval()
    x = _images(SHAPES["alexnet"], n=3, seed=5)
    targets = np.array([1, 7, 4])
    kept: list[torch.Tensor] = []
    layer = ptm.get_layer(model, ptm.gradcam_layer_name(model))
    handle = layer.register_forward_hook(lambda _m, _i, out: kept.append(out))
    try:
        logits = model(torch.from_numpy(x).permute(0, 3, 1, 2).contiguous())
    finally:
        handle.remove()
    score = logits[torch.arange(3), torch.from_numpy(targets)].sum()
    (grad,) = torch.autograd.grad(score, kept[0])
    raw = (grad.mean(dim=(2, 3), keepdim=True) * kept[0]).sum(dim=1)
    expected = postprocess_cam(raw.detach().numpy(), x.shape[1:3])
    np.testing.assert_allclose(pte.gradcam(model, x, targets), expected, atol=1e-5)


def test_shared_upsampling_matches_both_libraries() -> None:
    """dpcore's bilinear upsampling = torch interpolate(align_corners=False) = tf resize."""
    rng = np.random.default_rng(6)
    for h, w, H, W in ((2, 2, 4, 4), (5, 5, 28, 28), (7, 6, 32, 29), (3, 4, 32, 32)):
        maps = rng.normal(size=(2, h, w)).astype(np.float32)
        ours = upsample_bilinear(maps, (H, W))
        by_torch = F.interpolate(torch.from_numpy(maps)[:, None], size=(H, W), mode="bilinear",
                                 align_corners=False)[:, 0].numpy()
        by_tf = tf.image.resize(maps[..., None], (H, W), method="bilinear").numpy()[..., 0]
        np.testing.assert_allclose(ours, by_torch, atol=1e-5)
        np.testing.assert_allclose(ours, by_tf, atol=1e-5)
