"""Model inputs and batched prediction, as the training loops and both backends use them."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from dpcore.data.images import as_float01
from dpcore.errors import ConfigError

#: Examples per forward pass when predicting (memory only; results do not depend on it).
PREDICT_BATCH_SIZE = 512


def model_inputs(x: np.ndarray, task: str) -> np.ndarray:
    """What the models take: float32 images in [0, 1] (NHWC), or int token ids unchanged."""
    return as_float01(x) if task == "image" else x


def predict_in_batches(
    predict: Callable[[np.ndarray], np.ndarray], x: np.ndarray, task: str = "image",
    batch_size: int = PREDICT_BATCH_SIZE,
) -> np.ndarray:
    """``predict`` over ``x`` in batches, converting each batch with :func:`model_inputs`."""
    return np.concatenate(_batches(predict, x, task, batch_size), axis=0)


def predict_outputs_in_batches(
    predict: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]], x: np.ndarray,
    task: str = "image", batch_size: int = PREDICT_BATCH_SIZE,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`predict_in_batches` of a ``predict`` returning (logits, probabilities) per
    batch (:meth:`dpcore.stepengine.StepEngine.predict_outputs`): both, each concatenated."""
    parts = _batches(predict, x, task, batch_size)
    return (np.concatenate([logits for logits, _ in parts], axis=0),
            np.concatenate([proba for _, proba in parts], axis=0))


def _batches(predict: Callable[[np.ndarray], Any], x: np.ndarray, task: str,
             batch_size: int) -> list[Any]:
    """``predict`` of each batch of ``x`` (converted by :func:`model_inputs`), in order."""
    if len(x) == 0:
        raise ConfigError("cannot predict on an empty array of inputs")
    return [predict(model_inputs(x[i:i + batch_size], task))
            for i in range(0, len(x), batch_size)]


def test_loss_and_accuracy(proba: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Mean cross-entropy (nats; probabilities floored at 1e-12) and top-1 accuracy."""
    if not np.isfinite(proba).all():
        return math.nan, math.nan
    picked = np.clip(proba[np.arange(len(y)), y], 1e-12, 1.0)
    return float(-np.mean(np.log(picked))), float(np.mean(np.argmax(proba, axis=1) == y))
