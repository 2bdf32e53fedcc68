"""What a saliency montage shows of one model (:func:`explain_sample`): its predicted class,
its confidence and its Grad-CAM map of each sample image, through the backend contract
(``predict_proba``, ``gradcam``). The report layer draws montages from these arrays."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpcore.backend import Backend
from dpcore.trained import TrainedModel


@dataclass(frozen=True)
class ExplainedSample:
    """One model's explanation of sample images ``x`` [N, H, W, C].

    Attributes:
        pred_class: the predicted class of each image, int [N].
        confidence: its softmax probability, [N] in [0, 1].
        maps: the Grad-CAM map of the predicted class, float32 [N, H, W] in [0, 1].
    """

    pred_class: np.ndarray
    confidence: np.ndarray
    maps: np.ndarray


def explain_sample(backend: Backend, trained: TrainedModel, x: np.ndarray) -> ExplainedSample:
    """``trained`` (of ``backend``) explained on the images ``x`` it is evaluated on: each
    image's predicted class, its confidence and the Grad-CAM map of that class."""
    proba = backend.predict_proba(trained.model, x)
    pred = proba.argmax(axis=1)
    maps = backend.gradcam(trained.model, x, pred)
    return ExplainedSample(pred, proba[np.arange(len(pred)), pred], maps)


__all__ = ["ExplainedSample", "explain_sample"]
