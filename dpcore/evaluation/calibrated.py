"""Grad-CAM faithfulness after temperature scaling (Guo et al. 2017,
:mod:`dpcore.metrics.calibration`), fitted on images disjoint from the measured ones, through
the backend contract (``predict_proba``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from dpcore.backend import Backend
from dpcore.data.dataset import Dataset
from dpcore.data.images import as_float01
from dpcore.metrics import mask_inputs, predict_in_batches
from dpcore.metrics.calibration import (
    calibrated_faithfulness,
    fit_temperature,
    negative_log_likelihood,
)
from dpcore.trained import TrainedModel

#: Fewest test images outside the faithfulness subset that temperature scaling is fitted on;
#: with fewer, the subset itself is split in two (fit on one half, measure on the other).
MIN_CALIBRATION_IMAGES = 100


def calibrated_faithfulness_of(backend: Backend, trained: TrainedModel, dataset: Dataset,
                               idx: np.ndarray, x: np.ndarray, saliency: np.ndarray,
                               target: np.ndarray, seed: int) -> dict[str, Any]:
    """Average Drop and Increase in Confidence after temperature scaling, fitted on images
    disjoint from the ones they are measured on (the faithfulness subset ``idx`` of
    ``dataset``'s test split: images ``x``, maps ``saliency``, classes ``target``).

    The split: the data set's validation split when it has one (``Dataset.x_val``, e.g.
    ``imagefolder:`` with ``val: validation``; ``fit_split`` ``"validation"``), else the test
    images *outside* the faithfulness subset ``idx`` (disjoint from the measured images; for
    the data sets without a validation split, holding one out of train would change every
    stored run, and T, one scalar that changes no prediction's class, is fitted on no
    image the model trained on). When fewer than :data:`MIN_CALIBRATION_IMAGES` remain (a
    small test set), the subset is split by a seeded permutation: T is fitted on one half and
    the calibrated figures are measured on the other (``n`` says how many). The result says
    which in ``fit_on`` (text) and ``fit_split`` (``validation``, ``test`` or
    ``faithfulness subset``), with ``n_fit``, the NLL before and after (nats) and
    ``temperature``.
    """

    def predict(batch: np.ndarray) -> np.ndarray:
        return backend.predict_proba(trained.model, batch)

    rest = np.setdiff1d(np.arange(len(dataset.x_test)), idx)
    measured = np.arange(len(idx))
    if dataset.x_val is not None and dataset.y_val is not None:
        fit_x, fit_y = as_float01(dataset.x_val), dataset.y_val
        fit_split, fit_on = "validation", "the validation split"
    elif rest.size >= MIN_CALIBRATION_IMAGES:
        fit_x, fit_y = as_float01(dataset.x_test[rest]), dataset.y_test[rest]
        fit_split, fit_on = "test", "test images outside the faithfulness subset"
    else:
        order = np.random.default_rng(seed).permutation(len(idx))
        half = len(idx) // 2
        fit, measured = np.sort(order[:half]), np.sort(order[half:])
        fit_x, fit_y = x[fit], dataset.y_test[idx][fit]
        fit_split = "faithfulness subset"
        fit_on = ("half of the faithfulness subset (seeded); the calibrated figures are "
                  "measured on the other half")
    fit_proba = predict_in_batches(predict, fit_x)
    temperature = fit_temperature(fit_proba, fit_y)
    xs, maps = x[measured], saliency[measured]
    out = calibrated_faithfulness(predict_in_batches(predict, xs),
                                  predict_in_batches(predict, mask_inputs(xs, maps)),
                                  target[measured], temperature)
    out.update({"fit_on": fit_on, "fit_split": fit_split, "n_fit": int(len(fit_y)),
                "n": int(len(measured)),
                "nll_before": negative_log_likelihood(fit_proba, fit_y),
                "nll_after": negative_log_likelihood(fit_proba, fit_y, temperature),
                "method": "temperature scaling (Guo et al. 2017), NLL fitted by scipy's "
                          "bounded scalar minimiser"})
    return out


__all__ = ["MIN_CALIBRATION_IMAGES", "calibrated_faithfulness_of"]
