"""Split a Keras model of the zoo at the end of its fixed front end (see
:mod:`dpcore.frontcache`): the front as a numpy function, the head as a functional model over
its output built from the full model's layer objects (hence sharing its weights)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf
from tensorflow import keras

from dpcore.errors import ConfigError
from dpcore.frontcache import FixedFront


def split_fixed_front(model: keras.Model, names: Sequence[str]) -> FixedFront:
    """``model`` split after its leading layers ``names`` (neutral names, in order).

    The model must be a chain (:func:`dpcore.frontcache.fixed_front_names` guarantees it for
    the zoo): the head applies the remaining layers, in order, to a new input of the front's
    output shape. The features are NHWC float32 numpy arrays.

    Raises:
        ConfigError: ``names`` are not the model's leading layers.
    """
    layers = [layer for layer in model.layers if not isinstance(layer, keras.layers.InputLayer)]
    n = len(names)
    leading = tuple(layer.name for layer in layers[:n])
    if n == 0 or leading != tuple(names):
        raise ConfigError(f"cannot split model {model.name!r} after {list(names)}: its "
                          f"leading layers are {list(leading)}")
    last = layers[n - 1]
    front = keras.Model(model.inputs, last.output, name=f"{model.name}_front")
    x = inputs = keras.Input(shape=last.output.shape[1:], dtype="float32", name="features")
    for layer in layers[n:]:
        x = layer(x)
    head = keras.Model(inputs, x, name=f"{model.name}_head")
    spec = tf.TensorSpec([None, *model.inputs[0].shape[1:]], tf.float32)

    @tf.function(input_signature=[spec])
    def front_features(batch: tf.Tensor) -> tf.Tensor:
        return front(batch, training=False)

    def features(batch: np.ndarray) -> np.ndarray:
        return front_features(tf.constant(np.asarray(batch, np.float32))).numpy()

    return FixedFront(names=tuple(names), features=features, head=head)
