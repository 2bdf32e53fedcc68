"""Step 3 of the checklist: the torch builder of :class:`ToyScale` (its module tagged with the
layer's name, so the weight functions and Grad-CAM find it)."""

from __future__ import annotations

import torch

from dpcore.layers import Shape
from tests.end_to_end.toy_layer.description import ToyScale
from torchpipe.models import LAYER_BUILDERS, TorchContext, tagged


class TorchScale(torch.nn.Module):
    """``x * factor``."""

    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor


@LAYER_BUILDERS.register(ToyScale)
def build_toy_scale(layer: ToyScale, in_shape: Shape, ctx: TorchContext
                    ) -> list[tuple[str, torch.nn.Module]]:
    return tagged(layer, TorchScale(layer.factor))
