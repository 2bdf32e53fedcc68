"""Activation functions of the model zoos, described once and evaluated in numpy as a reference.

The tempered sigmoid of Papernot et al. (2021), "Tempered Sigmoid Activations for Deep Learning
with Differential Privacy", is ``f(x) = s * sigmoid(T * x) - o``. With ``s = 2, T = 2, o = 1``
it equals ``tanh(x)`` exactly (``2 * sigmoid(2x) - 1 = tanh(x)``).

Both backends build their activation layers from an :class:`ActivationSpec`; the numpy
function :func:`reference` is the slow, obviously correct version the tests compare against.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import expit

from dpcore.config import ACTIVATIONS, ModelSpec
from dpcore.errors import ConfigError


@dataclass(frozen=True)
class ActivationSpec:
    """One activation function, identical in both frameworks.

    Attributes:
        kind: ``relu``, ``tanh`` or ``tempered_sigmoid``.
        scale: s of the tempered sigmoid (unused by ``relu`` and ``tanh``).
        inverse_temperature: T of the tempered sigmoid.
        offset: o of the tempered sigmoid.
    """

    kind: str = "relu"
    scale: float = 2.0
    inverse_temperature: float = 2.0
    offset: float = 1.0

    def __post_init__(self) -> None:
        if self.kind not in ACTIVATIONS:
            raise ConfigError(
                f"activation={self.kind!r} is not known; valid: {', '.join(ACTIVATIONS)}"
            )

    @classmethod
    def from_model_spec(cls, spec: ModelSpec) -> ActivationSpec:
        """The activation a :class:`~dpcore.config.ModelSpec` asks for."""
        return cls(
            kind=spec.activation,
            scale=float(spec.tempered_scale),
            inverse_temperature=float(spec.tempered_inverse_temperature),
            offset=float(spec.tempered_offset),
        )


def tempered_sigmoid(
    x: np.ndarray, scale: float = 2.0, inverse_temperature: float = 2.0, offset: float = 1.0
) -> np.ndarray:
    """``scale * sigmoid(inverse_temperature * x) - offset``, elementwise (numerically stable)."""
    return scale * expit(inverse_temperature * np.asarray(x)) - offset


def reference(spec: ActivationSpec, x: np.ndarray) -> np.ndarray:
    """Evaluate ``spec`` on ``x`` in numpy (the reference for both backends' layers)."""
    x = np.asarray(x)
    if spec.kind == "relu":
        return np.maximum(x, 0)
    if spec.kind == "tanh":
        return np.tanh(x)
    return tempered_sigmoid(x, spec.scale, spec.inverse_temperature, spec.offset)
