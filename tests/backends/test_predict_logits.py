"""``predict_logits`` of both backends: the softmax of the logits is ``predict_proba``, raw
uint8 images are scaled as there, and one set of weights gives the same logits in both."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
torch = pytest.importorskip("torch")

from scipy.special import softmax  # noqa: E402

from dpcore.backend import load_backend  # noqa: E402
from dpcore.config import ModelSpec  # noqa: E402

SHAPE = (16, 16, 1)


@pytest.mark.parametrize("backend", ["tf", "torch"])
def test_the_softmax_of_the_logits_is_predict_proba(backend: str) -> None:
    code = load_backend(backend)
    model = code.build_model(ModelSpec(name="cnn4"), SHAPE, 3, seed=0)
    images = np.random.default_rng(0).integers(0, 256, size=(10, *SHAPE), dtype=np.uint8)
    logits = code.predict_logits(model, images, batch_size=4)
    assert logits.shape == (10, 3) and logits.dtype == np.float32
    np.testing.assert_allclose(softmax(logits.astype(np.float64), axis=1),
                               code.predict_proba(model, images), atol=1e-6)
    as_floats = images.astype(np.float32) / np.float32(255.0)
    np.testing.assert_allclose(code.predict_logits(model, as_floats), logits, atol=1e-5)


def test_one_set_of_weights_gives_the_same_logits_in_both_backends() -> None:
    tf_code, torch_code = load_backend("tf"), load_backend("torch")
    keras_model = tf_code.build_model(ModelSpec(name="cnn4"), SHAPE, 3, seed=1)
    torch_model = torch_code.build_model(ModelSpec(name="cnn4"), SHAPE, 3)
    torch_code.set_weights(torch_model, tf_code.get_weights(keras_model))
    x = np.random.default_rng(1).random((8, *SHAPE), dtype=np.float32)
    np.testing.assert_allclose(torch_code.predict_logits(torch_model, x),
                               tf_code.predict_logits(keras_model, x), atol=1e-5)
