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


@pytest.mark.parametrize("backend", ["tf", "torch"])
def test_predict_outputs_are_the_logits_and_probabilities_bit_for_bit(backend: str) -> None:
    """One forward pass gives both, each exactly what predict_logits / predict_proba give (so
    a run's recorded accuracy and loss do not move when its logits are kept beside them)."""
    code = load_backend(backend)
    for n_classes in (2, 10):
        model = code.build_model(ModelSpec(name="cnn4"), SHAPE, n_classes, seed=2)
        weights = code.get_weights(model)  # scaled up: saturated outputs too
        code.set_weights(model, {k: v * 8 for k, v in weights.items()})
        images = np.random.default_rng(3).integers(0, 256, size=(700, *SHAPE), dtype=np.uint8)
        logits, proba = code.predict_outputs(model, images)
        assert logits.dtype == proba.dtype == np.float32
        np.testing.assert_array_equal(logits, code.predict_logits(model, images))
        np.testing.assert_array_equal(proba, code.predict_proba(model, images))


@pytest.mark.parametrize("backend", ["tf", "torch"])
def test_the_engines_predict_outputs_are_their_probabilities_bit_for_bit(backend: str) -> None:
    """The step engines (both engines of a backend) give the training loop its logits and
    probabilities from one pass; the probabilities are exactly ``predict_proba``'s."""
    from dpcore.config import PerfSpec, RunConfig
    from dpcore.trainloop import StepMechanism

    code = load_backend(backend)
    config = RunConfig.from_dict({"data": {"name": "digits"}, "model": {"name": "cnn4"},
                                  "privacy": {"mechanism": "none"},
                                  "train": {"steps": 1, "batch_size": 8}, "seed": 0})
    mechanism = StepMechanism(None, float("inf"), None, 0.0, 0.0, 8)
    x = np.random.default_rng(4).random((40, *SHAPE), dtype=np.float32)
    for name, factory in code.ENGINES.items():
        model = code.build_model(ModelSpec(name="cnn4"), SHAPE, 3, seed=5)
        engine = factory(model, config, mechanism, PerfSpec())
        logits, proba = engine.predict_outputs(x)
        np.testing.assert_array_equal(proba, engine.predict_proba(x), err_msg=name)
        np.testing.assert_array_equal(logits, code.predict_logits(model, x), err_msg=name)
        engine.close()
