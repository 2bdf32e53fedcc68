"""Step 2 of the checklist: the Keras builder of :class:`ToyScale` (a layer called its name)."""

from __future__ import annotations

import tensorflow as tf

from tests.end_to_end.toy_layer.description import ToyScale
from tfpipe.models import LAYER_BUILDERS, KerasContext


@LAYER_BUILDERS.register(ToyScale)
def build_toy_scale(layer: ToyScale, x: tf.Tensor, ctx: KerasContext) -> tf.Tensor:
    return tf.keras.layers.Rescaling(layer.factor, name=layer.name)(x)
