"""Grad-CAM for the Keras models of the zoo, with tf-keras-vis (the backend contract).

The raw class activation map is tf-keras-vis' :class:`~tf_keras_vis.gradcam.Gradcam`
(``cam = sum_k mean_ij(d score / d A_k[i, j]) * A_k``) on the named layer's output ``A``,
with a :class:`~tf_keras_vis.utils.scores.CategoricalScore` on the model's **logits** (our
models output logits, so no ``ReplaceToLinear`` model modifier is needed). tf-keras-vis' own
ReLU, resizing and normalisation are switched off (``activation_modifier=None,
expand_cam=False, normalize_cam=False``): they happen once, for both backends, in
:func:`dpcore.saliency.postprocess_cam` (ReLU, bilinear upsampling with half-pixel centres,
per-map min-max scaling; a constant map is all zeros).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf
from tf_keras_vis.gradcam import Gradcam
from tf_keras_vis.utils.scores import CategoricalScore

from dpcore.errors import ConfigError
from dpcore.saliency import check_batch_size, check_images, postprocess_cam, resolve_targets
from dpcore.trained import TrainedModel
from tfpipe.models import get_layer, gradcam_layer_name
from tfpipe.predict import predict_proba

DEFAULT_BATCH_SIZE = 64


def gradcam(
    model: TrainedModel | tf.keras.Model | Any,
    x: np.ndarray,
    class_idx: np.ndarray | int | None = None,
    *,
    layer: str | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> np.ndarray:
    """Grad-CAM saliency maps of a Keras image model: float32 [N, H, W] in [0, 1].

    Args:
        model: a :class:`~dpcore.trained.TrainedModel` of this backend or a Keras model of
            the zoo (NHWC input, logits output); it is run in inference mode.
        x: images [N, H, W, C] of the model's input shape, ``uint8`` 0..255 or float in [0, 1].
        class_idx: the class explained for each image: ``None`` for the predicted class, one
            int for all images, or an int array [N].
        layer: neutral name of the layer whose output is explained; default the last
            convolution (:func:`tfpipe.models.gradcam_layer_name`), the same layer the torch
            backend uses.
        batch_size: images per gradient computation (memory only; the maps do not depend on
            it).

    Returns:
        One map per image, upsampled bilinearly to (H, W) and scaled to [0, 1] per map; all
        zeros where the class activation map has no positive part.

    Raises:
        ConfigError: a text model, inputs of the wrong shape or dtype, an unknown layer or
            one without a spatial output, a class index out of range, a bad batch size.
    """
    keras_model = model.model if isinstance(model, TrainedModel) else model
    batch_size = check_batch_size(batch_size)
    images = check_images(x, tuple(keras_model.inputs[0].shape[1:]), keras_model.name)
    target_layer = get_layer(keras_model, layer or gradcam_layer_name(keras_model))
    if len(target_layer.output.shape) != 4:
        raise ConfigError(
            f"layer {target_layer.name!r} outputs shape {tuple(target_layer.output.shape)}; "
            "Grad-CAM needs a spatial [N, h, w, C] output (a convolution or feature layer)"
        )
    n_classes = int(keras_model.outputs[0].shape[-1])
    targets = resolve_targets(
        class_idx, len(images), n_classes,
        lambda: np.argmax(predict_proba(keras_model, images), axis=1),
    )
    # No model modifier: tf-keras-vis then uses the model as is (no clone).
    explainer = Gradcam(keras_model)
    raw = [
        np.asarray(explainer(
            CategoricalScore(targets[start:start + batch_size].tolist()),
            tf.constant(images[start:start + batch_size]),
            penultimate_layer=target_layer,
            seek_penultimate_conv_layer=False,
            activation_modifier=None,
            expand_cam=False,
            normalize_cam=False,
            training=False,
        ), dtype=np.float32)
        for start in range(0, len(images), batch_size)
    ]
    return postprocess_cam(np.concatenate(raw, axis=0), images.shape[1:3])


__all__ = ["DEFAULT_BATCH_SIZE", "gradcam"]
