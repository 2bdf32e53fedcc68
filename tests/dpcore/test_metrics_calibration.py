"""Temperature scaling (Guo et al. 2017) against hand values: the scaled softmax, the NLL, a
fitted T above 1 for over-confident predictions, and the faithfulness figures after scaling."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpcore.errors import DataError
from dpcore.metrics.calibration import (
    calibrated_faithfulness,
    fit_temperature,
    negative_log_likelihood,
    temperature_scale,
)


def test_temperature_scaling_against_hand_values() -> None:
    # softmax(log p / 2) of (0.8, 0.2): sqrt(0.8) : sqrt(0.2) = 2 : 1
    p = np.array([[0.8, 0.2]])
    assert temperature_scale(p, 2.0) == pytest.approx(np.array([[2 / 3, 1 / 3]]))
    assert temperature_scale(p, 1.0) == pytest.approx(p)
    # T = 0.5 sharpens: 0.64 : 0.04 = 16 : 1
    assert temperature_scale(p, 0.5) == pytest.approx(np.array([[16 / 17, 1 / 17]]))
    proba = np.array([[0.8, 0.2], [0.4, 0.6]])
    assert negative_log_likelihood(proba, np.array([0, 0])) == pytest.approx(
        -(math.log(0.8) + math.log(0.4)) / 2)
    with pytest.raises(DataError, match="temperature=0"):
        temperature_scale(proba, 0)


def test_a_fitted_temperature_softens_over_confident_predictions() -> None:
    """Logits of a model that is right 70% of the time but says 0.99: T > 1, NLL drops."""
    rng = np.random.default_rng(0)
    n = 2000
    labels = rng.integers(0, 2, size=n)
    right = rng.uniform(size=n) < 0.7
    predicted = np.where(right, labels, 1 - labels)
    proba = np.full((n, 2), 0.01)
    proba[np.arange(n), predicted] = 0.99
    temperature = fit_temperature(proba, labels)
    assert temperature > 1.0
    # the optimum puts the predicted class at the accuracy: 0.99^(1/T) share = 0.7
    scaled = temperature_scale(proba, temperature)
    assert scaled[np.arange(n), predicted].mean() == pytest.approx(right.mean(), abs=1e-3)
    assert negative_log_likelihood(proba, labels, temperature) < negative_log_likelihood(
        proba, labels)
    # under-confident (right 95% at 0.6): T < 1
    right = rng.uniform(size=n) < 0.95
    predicted = np.where(right, labels, 1 - labels)
    proba = np.full((n, 2), 0.4)
    proba[np.arange(n), predicted] = 0.6
    assert fit_temperature(proba, labels) < 1.0


def test_faithfulness_after_scaling_against_hand_values() -> None:
    """Two images, class 0 explained. T = 2 maps (0.8, 0.2) -> 2/3 and (0.5, 0.5) -> 1/2,
    (0.2, 0.8) -> 1/3, (0.9, 0.1) -> 3/4."""
    proba = np.array([[0.8, 0.2], [0.2, 0.8]])
    masked = np.array([[0.5, 0.5], [0.9, 0.1]])
    out = calibrated_faithfulness(proba, masked, np.array([0, 0]), 2.0)
    # image 1 drops 2/3 -> 1/2: (1/6) / (2/3) = 25%; image 2 rises 1/3 -> 3/4: no drop
    assert out["average_drop"] == pytest.approx(100 * 0.25 / 2)
    assert out["increase_in_confidence"] == pytest.approx(50.0)
    assert out["original_score"] == pytest.approx((2 / 3 + 1 / 3) / 2)
    assert out["masked_score"] == pytest.approx((1 / 2 + 3 / 4) / 2)
    assert out["temperature"] == 2.0
