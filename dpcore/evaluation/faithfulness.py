"""Grad-CAM faithfulness of a trained image model on a fixed seeded test subset, with the
model-randomisation check of its maps (:mod:`dpcore.evaluation.randomisation`) and its figures
after temperature scaling (:mod:`dpcore.evaluation.calibrated`), through the backend contract
(``predict_proba``, ``gradcam``): one code path for both frameworks."""

from __future__ import annotations

from typing import Any

import numpy as np

from dpcore.architectures import IMAGE_ARCHITECTURES, explainable
from dpcore.backend import Backend
from dpcore.data.dataset import Dataset
from dpcore.data.images import as_float01
from dpcore.evaluation.calibrated import calibrated_faithfulness_of
from dpcore.evaluation.randomisation import randomisation_check_of
from dpcore.metrics import faithfulness_metrics, seeded_subset
from dpcore.results import RunResult
from dpcore.trained import TrainedModel

#: The models Grad-CAM faithfulness applies to: every image (convolutional) architecture.
CONV_MODELS: tuple[str, ...] = tuple(IMAGE_ARCHITECTURES)


def faithfulness_applies(task: str | None, model: Any) -> bool:
    """Whether Grad-CAM faithfulness is defined for ``model`` (a ModelSpec) on data of
    ``task``: image data and an explainable model (:func:`dpcore.architectures.explainable`)."""
    return task == "image" and explainable(model)


def faithfulness_skip_reason(images: np.ndarray) -> str | None:
    """Why Grad-CAM faithfulness is not computed on ``images`` (float), or None if it is: the
    metrics (saliency-masked inputs, deletion / insertion) are defined on [0, 1] images, and
    the test images of a local-DP run with unclipped noise leave that range."""
    if images.size and (float(images.min()) < 0.0 or float(images.max()) > 1.0):
        return (f"not computed: the (locally privatised) test images have values in "
                f"[{float(images.min()):.3g}, {float(images.max()):.3g}], outside [0, 1]; "
                "set data.ldp_params.clip: true to clip them (post-processing)")
    return None


def measure_faithfulness(backend: Backend, trained: TrainedModel, dataset: Dataset,
                         subset_size: int, seed: int
                         ) -> tuple[dict[str, Any] | None, str | None]:
    """Grad-CAM faithfulness metrics of ``trained`` (explained by ``backend``) on
    ``subset_size`` seeded test images of ``dataset``
    (:func:`dpcore.metrics.faithfulness_metrics`, with curves, ``subset_seed``,
    ``randomisation_check`` and ``calibrated``).

    Returns:
        (metrics, None); (None, why skipped) for test images outside [0, 1]
        (:func:`faithfulness_skip_reason`); (None, None) for models the metrics do not apply
        to (:func:`faithfulness_applies`: text or non-convolutional models).
    """
    if not faithfulness_applies(dataset.task, trained.config.model):
        return None, None
    idx = seeded_subset(len(dataset.x_test), subset_size, seed)
    x = as_float01(dataset.x_test[idx])
    reason = faithfulness_skip_reason(x)
    if reason is not None:
        return None, reason
    proba = backend.predict_proba(trained.model, x)
    target = proba.argmax(axis=1)
    saliency = backend.gradcam(trained.model, x, target)
    metrics = faithfulness_metrics(
        x, saliency, lambda batch: backend.predict_proba(trained.model, batch), target,
        labels=dataset.y_test[idx], curves=True,
    )
    metrics["subset_seed"] = seed
    metrics["randomisation_check"] = randomisation_check_of(backend, trained, x, target,
                                                            saliency)
    metrics["calibrated"] = calibrated_faithfulness_of(backend, trained, dataset, idx, x,
                                                       saliency, target, seed)
    return metrics, None


def faithfulness_of(backend: Backend, trained: TrainedModel, dataset: Dataset,
                    subset_size: int, seed: int) -> dict[str, Any] | None:
    """The metrics of :func:`measure_faithfulness`, or None where they were not computed."""
    return measure_faithfulness(backend, trained, dataset, subset_size, seed)[0]


def record_faithfulness(result: RunResult, backend: Backend, trained: TrainedModel,
                        dataset: Dataset, subset_size: int, seed: int) -> None:
    """Store :func:`measure_faithfulness` in ``result.faithfulness``; where it was skipped for
    the test images' range, the reason goes to ``result.metrics["faithfulness_note"]``."""
    result.faithfulness, reason = measure_faithfulness(backend, trained, dataset, subset_size,
                                                       seed)
    if reason is not None:
        result.metrics["faithfulness_note"] = reason


__all__ = ["CONV_MODELS", "faithfulness_applies", "faithfulness_of", "faithfulness_skip_reason",
           "measure_faithfulness", "record_faithfulness"]
