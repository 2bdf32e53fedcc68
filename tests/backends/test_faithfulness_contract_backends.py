"""The faithfulness contract (tests/contract_faithfulness.py) run on both backends.

Each backend pairs its ``predict_proba`` with its Grad-CAM on a seeded cnn4 (28x28x1, so the
last convolution is 5x5); the models are built once per module.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("torch")

from dpcore.config import ModelSpec  # noqa: E402
from tests.contract_faithfulness import FaithfulnessContract, PredictProba  # noqa: E402

IMAGE_SHAPE = (28, 28, 1)
N_CLASSES = 4
SEED = 0


@cache
def _keras_model() -> object:
    from tfpipe.models import build_model

    return build_model(ModelSpec(name="cnn4"), IMAGE_SHAPE, N_CLASSES, seed=SEED)


@cache
def _torch_model() -> object:
    from torchpipe.models import build_model

    return build_model(ModelSpec(name="cnn4"), IMAGE_SHAPE, N_CLASSES, seed=SEED).eval()


class TestTfFaithfulness(FaithfulnessContract):
    """tfpipe.predict.predict_proba + tfpipe.explain.gradcam."""

    image_shape = IMAGE_SHAPE

    def make_predict_proba(self) -> PredictProba:
        from tfpipe.predict import predict_proba

        model = _keras_model()
        return lambda x: predict_proba(model, x)

    def make_saliency(self, x: np.ndarray, target: np.ndarray) -> np.ndarray:
        from tfpipe.explain import gradcam

        return gradcam(_keras_model(), x, target)


class TestTorchFaithfulness(FaithfulnessContract):
    """torchpipe.predict.predict_proba + torchpipe.explain.gradcam."""

    image_shape = IMAGE_SHAPE

    def make_predict_proba(self) -> PredictProba:
        from torchpipe.predict import predict_proba

        model = _torch_model()
        return lambda x: predict_proba(model, x)

    def make_saliency(self, x: np.ndarray, target: np.ndarray) -> np.ndarray:
        from torchpipe.explain import gradcam

        return gradcam(_torch_model(), x, target)
