"""Step 1 of the checklist: the layer description, with its shape rule on the class (no weights:
no weight shapes, no weight kind, no fast rule)."""

from __future__ import annotations

from dataclasses import dataclass

from dpcore.layers import LAYER_TYPES, Layer, Shape, Tracer


@LAYER_TYPES.register()
@dataclass(frozen=True)
class ToyScale(Layer):
    """Multiplies its input by ``factor`` (no weights, so no fast-engine rule is needed)."""

    name: str
    factor: float = 0.5

    def output_shape(self, shape: Shape, t: Tracer) -> Shape:
        return shape
