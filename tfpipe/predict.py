"""Class probabilities and logits of a Keras model of the zoo, batched (the backend contract)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

from dpcore.predicting import PREDICT_BATCH_SIZE, predict_in_batches, predict_outputs_in_batches
from dpcore.trained import TrainedModel

#: Attributes under which a model keeps its compiled output functions (tied to the model's
#: lifetime; a cache keyed by model would keep every model alive through the closure).
_ATTRIBUTE = "_dpcompare_probability_function"
_LOGIT_ATTRIBUTE = "_dpcompare_logit_function"
_OUTPUT_ATTRIBUTE = "_dpcompare_output_function"


def _compiled(model: tf.keras.Model, attribute: str,
              head: Callable[[tf.Tensor], Any]) -> Callable[[np.ndarray], Any]:
    """A compiled ``x -> head(model(x))`` for one batch of model inputs, cached on the model
    under ``attribute`` (numpy out: an array, or a tuple of arrays for a tuple head)."""
    cached = getattr(model, attribute, None)
    if cached is not None:
        return cached
    spec = tf.TensorSpec([None, *model.inputs[0].shape[1:]], model.inputs[0].dtype)

    @tf.function(input_signature=[spec])
    def output(x: tf.Tensor) -> tf.Tensor:
        return head(model(x, training=False))

    # One function per model, traced once (fixed signature). TensorFlow's frequent-tracing
    # detector keys on the shared code object, so explaining several models in a row (a
    # report's montages) logged "N out of the last N calls ... triggered tf.function
    # retracing" for these single traces. TensorFlow silences it the same way for functions
    # it restores from SavedModels (function_deserialization.py).
    output._omit_frequent_tracing_warning = True

    dtype = model.inputs[0].dtype.as_numpy_dtype

    def call(x: np.ndarray) -> Any:
        out = output(tf.constant(np.asarray(x, dtype)))
        return tuple(t.numpy() for t in out) if isinstance(out, tuple | list) else out.numpy()

    object.__setattr__(model, attribute, call)  # bypass Keras's attribute tracking
    return call


def probability_function(model: tf.keras.Model) -> Callable[[np.ndarray], np.ndarray]:
    """A compiled ``x -> softmax(model(x))`` for one batch of model inputs (cached per model).

    Inputs are NHWC float32 images (or int32 token ids); the output is float32 [n, K].
    """
    return _compiled(model, _ATTRIBUTE, lambda logits: tf.nn.softmax(logits, axis=-1))


def logit_function(model: tf.keras.Model) -> Callable[[np.ndarray], np.ndarray]:
    """A compiled ``x -> model(x)`` (the logits, float32 [n, K]; cached per model)."""
    return _compiled(model, _LOGIT_ATTRIBUTE, lambda logits: logits)


def output_function(model: tf.keras.Model
                    ) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """A compiled ``x -> (model(x), softmax(model(x)))`` (logits and probabilities, float32
    [n, K]; one forward pass; cached per model). Its probabilities are bit for bit those of
    :func:`probability_function` (the same graph with one more output; tested)."""
    return _compiled(model, _OUTPUT_ATTRIBUTE,
                     lambda logits: (logits, tf.nn.softmax(logits, axis=-1)))


def predict_proba(model: TrainedModel | tf.keras.Model | Any, x: np.ndarray,
                  batch_size: int = PREDICT_BATCH_SIZE) -> np.ndarray:
    """Softmax probabilities [N, K] (float32) of ``x``, in batches of ``batch_size``.

    Args:
        model: a :class:`~dpcore.trained.TrainedModel` of this backend or a Keras model of the
            zoo (outputs logits).
        x: NHWC images (``uint8`` 0..255 or float32 in [0, 1]) or ``[N, L]`` token ids.
        batch_size: examples per forward pass (memory only).
    """
    keras_model = model.model if isinstance(model, TrainedModel) else model
    task = "text" if keras_model.inputs[0].dtype.is_integer else "image"
    return predict_in_batches(probability_function(keras_model), x, task, batch_size)


def predict_logits(model: TrainedModel | tf.keras.Model | Any, x: np.ndarray,
                   batch_size: int = PREDICT_BATCH_SIZE) -> np.ndarray:
    """Logits [N, K] (float32) of ``x``, in batches of ``batch_size``: what
    :func:`predict_proba` applies the softmax to (they keep the ranking a saturated float32
    softmax loses; see :func:`dpcore.metrics.classification.log_odds`).

    Args: as :func:`predict_proba`.
    """
    keras_model = model.model if isinstance(model, TrainedModel) else model
    task = "text" if keras_model.inputs[0].dtype.is_integer else "image"
    return predict_in_batches(logit_function(keras_model), x, task, batch_size)


def predict_outputs(model: TrainedModel | tf.keras.Model | Any, x: np.ndarray,
                    batch_size: int = PREDICT_BATCH_SIZE) -> tuple[np.ndarray, np.ndarray]:
    """(:func:`predict_logits`, :func:`predict_proba`) of ``x`` from one forward pass per
    batch, each exactly what those functions give.

    Args: as :func:`predict_proba`.
    """
    keras_model = model.model if isinstance(model, TrainedModel) else model
    task = "text" if keras_model.inputs[0].dtype.is_integer else "image"
    return predict_outputs_in_batches(output_function(keras_model), x, task, batch_size)
