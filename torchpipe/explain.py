"""Grad-CAM for the torch models of the zoo, with Captum (the backend contract).

The raw class activation map is Captum's :class:`~captum.attr.LayerGradCam` on the named
layer (``cam = sum_k mean_ij(d logit_c / d A_k[i, j]) * A_k``), with the target class's
**logit** as the score (our models output logits), exactly as tf-keras-vis computes it in
``tfpipe.explain``. Captum's own ReLU is switched off (``relu_attributions=False``) and its
map is not interpolated: ReLU, bilinear upsampling (half-pixel centres) and per-map min-max
scaling happen once, for both backends, in :func:`dpcore.saliency.postprocess_cam`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from captum.attr import LayerGradCam
from torch import nn

from dpcore.errors import ConfigError
from dpcore.saliency import check_batch_size, check_images, postprocess_cam, resolve_targets
from dpcore.trained import TrainedModel
from torchpipe.device import model_device
from torchpipe.models import get_layer, gradcam_layer_name
from torchpipe.predict import predict_proba

DEFAULT_BATCH_SIZE = 64


def gradcam(
    model: TrainedModel | nn.Module | Any,
    x: np.ndarray,
    class_idx: np.ndarray | int | None = None,
    *,
    layer: str | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> np.ndarray:
    """Grad-CAM saliency maps of a torch image model: float32 [N, H, W] in [0, 1].

    Args:
        model: a :class:`~dpcore.trained.TrainedModel` of this backend or a model of the zoo
            (NCHW input, logits output; a plain module, not an Opacus wrapper). It is run in
            eval mode and put back in its previous mode afterwards; its parameters' ``.grad``
            are not touched.
        x: images [N, H, W, C] (NHWC, as in the other backend; converted to NCHW here),
            ``uint8`` 0..255 or float in [0, 1].
        class_idx: the class explained for each image: ``None`` for the predicted class, one
            int for all images, or an int array [N].
        layer: neutral name of the layer whose output is explained; default the last
            convolution (:func:`torchpipe.models.gradcam_layer_name`), the same layer the
            Keras backend uses.
        batch_size: images per gradient computation (memory only; the maps do not depend on
            it).

    Returns:
        One map per image, upsampled bilinearly to (H, W) and scaled to [0, 1] per map; all
        zeros where the class activation map has no positive part.

    Raises:
        ConfigError: a text model, inputs of the wrong shape or dtype, an unknown layer or
            one without a spatial output, a class index out of range, a bad batch size.
    """
    module = model.model if isinstance(model, TrainedModel) else model
    batch_size = check_batch_size(batch_size)
    name = getattr(module, "arch_name", type(module).__name__)
    images = check_images(x, tuple(getattr(module, "input_shape", ())), name)
    layer_name = layer or gradcam_layer_name(module)
    target_layer = get_layer(module, layer_name)
    was_training = module.training
    module.eval()
    try:
        # the predicted classes when needed, else one example to learn the class count
        proba = predict_proba(module, images if class_idx is None else images[:1])
        targets = resolve_targets(
            class_idx, len(images), proba.shape[1], lambda: np.argmax(proba, axis=1)
        )
        explainer = LayerGradCam(module, target_layer)
        raw = []
        for start in range(0, len(images), batch_size):
            batch = torch.from_numpy(images[start:start + batch_size]).permute(0, 3, 1, 2).to(
                model_device(module))
            cam = explainer.attribute(
                batch.contiguous(), target=targets[start:start + batch_size].tolist(),
                relu_attributions=False,
            )
            if cam.ndim != 4:
                raise ConfigError(
                    f"layer {layer_name!r} has no spatial output "
                    f"(Grad-CAM map shape {tuple(cam.shape)}); Grad-CAM needs an [N, C, h, w] "
                    "output (a convolution or feature layer)"
                )
            raw.append(cam[:, 0].detach().cpu().numpy())
    finally:
        module.train(was_training)
    return postprocess_cam(np.concatenate(raw, axis=0), images.shape[1:3])


__all__ = ["DEFAULT_BATCH_SIZE", "gradcam"]
