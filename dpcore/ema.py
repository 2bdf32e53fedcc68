"""Exponential moving average of the weights (``train.ema_decay``), kept in numpy.

Framework-neutral: the average is of neutral-layout weights, so both backends average the same
way. It costs one weight copy per step: negligible for cnn4, about 45 MB for resnet18, still
small next to a DP step of that model.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from dpcore.errors import ConfigError


def ema_decay_at(step: int, decay: float) -> float:
    """Decay of the EMA update after optimizer step ``step`` (1-based).

    ``min(decay, (1 + step) / (10 + step))``: the warm-up of TensorFlow's
    ``ExponentialMovingAverage(num_updates=step)``, so that early averages are not dominated by
    the initial weights. Both backends use it (the decision is made here, not in a backend).
    """
    if step < 1:
        raise ConfigError(f"EMA step={step} must be >= 1")
    return float(min(decay, (1.0 + step) / (10.0 + step)))


class WeightEma:
    """Exponential moving average of the weights, kept in float64 so long averages do not drift.

    Starts at the initial weights; after step t, ``ema <- d_t * ema + (1 - d_t) * w_t`` with
    ``d_t = ema_decay_at(t, decay)``.
    """

    def __init__(self, initial: Mapping[str, np.ndarray], decay: float) -> None:
        self.decay = float(decay)
        self.average = {k: np.asarray(v, dtype=np.float64).copy() for k, v in initial.items()}

    def update(self, weights: Mapping[str, np.ndarray], step: int) -> None:
        """Fold in the weights after optimizer step ``step`` (1-based)."""
        d = ema_decay_at(step, self.decay)
        for key, avg in self.average.items():
            avg *= d
            avg += (1.0 - d) * np.asarray(weights[key], dtype=np.float64)

    def weights(self) -> dict[str, np.ndarray]:
        """The averaged weights as float32 arrays."""
        return {k: v.astype(np.float32) for k, v in self.average.items()}
