"""A local-DP run's test metrics on clean and on privatised test images, through the backend
contract (``predict_outputs``)."""

from __future__ import annotations

from typing import Any

from dpcore.backend import Backend
from dpcore.data.dataset import Dataset
from dpcore.scoring import scored_metrics
from dpcore.trained import TrainedModel


def ldp_test_metrics(backend: Backend, trained: TrainedModel, dataset: Dataset, headline: str
                     ) -> dict[str, Any]:
    """A local-DP run's test metrics on its test images both ways (``dataset``'s
    ``ldp_test_images``): ``{"headline": "clean" | "privatised", "clean": {...},
    "privatised": {...}}``, each with ``n``, ``accuracy``, ``auc``, ``per_class`` and
    ``scoring``, scored as the run's own metrics (:func:`dpcore.scoring.scored_metrics`, one
    forward pass for logits and probabilities). ``headline`` names the set the run's own
    ``metrics`` use (``data.ldp_test_inputs``)."""
    out: dict[str, Any] = {"headline": headline}
    for name, images in (dataset.ldp_test_images or {}).items():
        logits, proba = backend.predict_outputs(trained.model, images)
        summary = scored_metrics(proba, logits, dataset.y_test, dataset.class_names)
        out[name] = {key: summary[key]
                     for key in ("n", "accuracy", "auc", "per_class", "scoring")}
    return out


__all__ = ["ldp_test_metrics"]
