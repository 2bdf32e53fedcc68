"""Temperature scaling (Guo et al. 2017, "On calibration of modern neural networks", Sec. 4.2)
and the faithfulness figures it changes.

An over-confident model (mean probability near 1) bounds Average Drop and Increase in
Confidence: a saturated softmax has no room to rise, and masking either keeps it at 1 or
flips it. Temperature scaling divides the logits by one scalar T > 0 fitted to minimise the
negative log-likelihood on held-out labelled images; it changes no prediction's argmax (so
no accuracy), only the confidence. T > 1 softens an over-confident model.

The backends return probabilities, not logits; ``log p`` is the logit vector up to a constant
per row, which the softmax ignores, so ``softmax(log p / T)`` is the temperature-scaled
output exactly (probabilities are clipped at :data:`MIN_PROBABILITY` before the log, so a
float32 probability that underflowed to 0 stays finite).

The fit is scipy's bounded scalar minimiser over beta = 1 / T (the NLL is convex in beta: a
log-sum-exp minus a linear term), so it finds the one minimum in the bounds.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.special import log_softmax

from dpcore.errors import DataError
from dpcore.metrics._checks import as_labels
from dpcore.metrics.faithfulness import average_drop, increase_in_confidence

#: Probabilities are clipped to at least this before the log (float32 underflow).
MIN_PROBABILITY = 1e-12
#: The temperatures the fit may return: T in [1/20, 20].
TEMPERATURE_BOUNDS = (0.05, 20.0)


def _log_probabilities(proba: np.ndarray) -> np.ndarray:
    p = np.asarray(proba, dtype=np.float64)
    if p.ndim != 2 or p.shape[0] < 1 or p.shape[1] < 2:
        raise DataError(f"probabilities of shape {p.shape}: need [N, K] with N >= 1, K >= 2")
    return np.log(np.clip(p, MIN_PROBABILITY, 1.0))


def temperature_scale(proba: np.ndarray, temperature: float) -> np.ndarray:
    """``softmax(log(proba) / temperature)`` row-wise: float64 [N, K]."""
    if not temperature > 0:
        raise DataError(f"temperature={temperature!r} is not valid; valid: > 0")
    return np.exp(log_softmax(_log_probabilities(proba) / float(temperature), axis=1))


def negative_log_likelihood(proba: np.ndarray, labels: np.ndarray,
                            temperature: float = 1.0) -> float:
    """Mean NLL in nats of ``labels`` under ``proba`` scaled by ``temperature``."""
    logp = _log_probabilities(proba)
    y = as_labels(labels, logp.shape[0], logp.shape[1], name="labels")
    scaled = log_softmax(logp / float(temperature), axis=1)
    return float(-scaled[np.arange(y.size), y].mean())


def fit_temperature(proba: np.ndarray, labels: np.ndarray) -> float:
    """The temperature T in :data:`TEMPERATURE_BOUNDS` minimising the NLL of ``labels``
    under ``temperature_scale(proba, T)`` (Guo et al.'s fit, on a held-out split)."""
    logp = _log_probabilities(proba)
    y = as_labels(labels, logp.shape[0], logp.shape[1], name="labels")
    rows = np.arange(y.size)

    def nll(beta: float) -> float:
        scaled = log_softmax(logp * beta, axis=1)
        return float(-scaled[rows, y].mean())

    low, high = TEMPERATURE_BOUNDS
    result = minimize_scalar(nll, bounds=(1.0 / high, 1.0 / low), method="bounded",
                             options={"xatol": 1e-6})
    return float(1.0 / result.x)


def calibrated_faithfulness(proba: np.ndarray, masked_proba: np.ndarray, target: np.ndarray,
                            temperature: float) -> dict[str, Any]:
    """Average Drop and Increase in Confidence (%) recomputed on temperature-scaled
    probabilities of the same images (``proba``) and their saliency-masked copies
    (``masked_proba``), for the ``target`` classes; with the mean scores before masking
    (``original_score``) and after (``masked_score``), and ``temperature``."""
    p = temperature_scale(proba, temperature)
    m = temperature_scale(masked_proba, temperature)
    if p.shape != m.shape:
        raise DataError(f"probabilities {p.shape} and masked probabilities {m.shape} differ")
    c = as_labels(target, p.shape[0], p.shape[1], name="target")
    rows = np.arange(c.size)
    Y, O = p[rows, c], m[rows, c]  # noqa: E741 (the paper's names)
    return {"temperature": float(temperature), "average_drop": average_drop(Y, O),
            "increase_in_confidence": increase_in_confidence(Y, O),
            "original_score": float(Y.mean()), "masked_score": float(O.mean())}


__all__ = ["MIN_PROBABILITY", "TEMPERATURE_BOUNDS", "calibrated_faithfulness",
           "fit_temperature", "negative_log_likelihood", "temperature_scale"]
