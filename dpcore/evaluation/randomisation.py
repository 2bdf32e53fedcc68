"""The model-randomisation sanity check (Adebayo et al. 2018, :mod:`dpcore.metrics.sanity`) of
a trained model's Grad-CAM maps, through the backend contract (``build_model``,
``set_weights``, ``gradcam``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from dpcore.architectures import architecture
from dpcore.backend import Backend
from dpcore.metrics.sanity import (
    RANDOMISATION_SEED,
    cascade_layers,
    randomisation_check,
    randomised_weights,
)
from dpcore.trained import TrainedModel


def randomisation_check_of(backend: Backend, trained: TrainedModel, x: np.ndarray,
                           target: np.ndarray, saliency: np.ndarray,
                           seed: int = RANDOMISATION_SEED) -> dict[str, Any]:
    """The model-randomisation check of ``trained``'s Grad-CAM maps ``saliency`` of ``x`` for
    the classes ``target``.

    The same architecture is built by ``backend``, loaded with ``trained``'s weights in the
    neutral layout where the explained layer (the Grad-CAM layer) and every weighted layer
    above it are re-initialised with ``seed``, and explained by the backend's ``gradcam`` on
    the same images and classes. One code path for both backends (the backend contract)."""
    arch = architecture(trained.config.model, trained.input_shape, trained.n_classes,
                        trained.vocab_size)
    layers = cascade_layers([layer.name for layer in arch.walk()], list(arch.weight_kinds()),
                            arch.gradcam_layer())
    model = backend.build_model(trained.config.model, trained.input_shape, trained.n_classes,
                                vocab_size=trained.vocab_size)
    backend.set_weights(model, randomised_weights(trained.weights, layers, seed))
    random_maps = backend.gradcam(model, x, target)
    return randomisation_check(saliency, random_maps, layers=layers, seed=seed)


__all__ = ["randomisation_check_of"]
