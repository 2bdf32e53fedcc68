"""Opacus's Conv2d per-sample gradients are wrong when the layer input is channels-last.

Standalone: needs only torch and opacus. Run ``python opacus_channels_last_conv.py``.

One ``nn.Conv2d`` (cnn4's second convolution: 16 -> 32 channels, 4x4 kernel, stride 2, on
13x13 inputs) is wrapped in ``opacus.GradSampleModule`` (hooks mode, the default) and given
the same batch twice: NCHW-contiguous, then in ``torch.channels_last`` memory. Opacus's
``grad_sample`` is compared with per-example gradients from ``torch.func`` (vmap of grad),
and the script prints the relative error ``||opacus - reference|| / ||reference||`` of each.

It then runs cnn4's front (conv1, ReLU, max-pool, conv2) on 1-channel images held as NHWC
(as TensorFlow, numpy and most loaders hold them) and permuted to NCHW for torch, with no
memory format asked for anywhere: the permuted 1-channel view has strides that are also
channels-last, torch's CPU convolution then returns a channels-last output, so conv2's input
is channels-last and its per-sample gradients are wrong (the error the bench met).

Exit status: 1 when the error is present (a relative error above :data:`TOLERANCE`), 0
when Opacus gets every case right.
"""

from __future__ import annotations

import copy
import sys
import warnings

import opacus
import torch
from opacus import GradSampleModule
from torch import nn

#: Relative error above which the per-sample gradients count as wrong (float32 round-off of
#: this layer's gradients is about 1e-7).
TOLERANCE = 1e-4


def relative_error(model: nn.Sequential, x: torch.Tensor, index: int) -> float:
    """||Opacus grad_sample - per-example reference|| / ||reference|| of the weight of
    ``model[index]`` (a Conv2d) for the batch ``x``, as given (its memory format kept)."""
    reference_model = copy.deepcopy(model)
    params = {name: p.detach() for name, p in reference_model.named_parameters()}

    def loss_of_one(p: dict[str, torch.Tensor], xi: torch.Tensor) -> torch.Tensor:
        out = torch.func.functional_call(reference_model, p, (xi.unsqueeze(0),))
        return out.square().sum() / 2

    reference = torch.func.vmap(torch.func.grad(loss_of_one), in_dims=(None, 0))(
        params, x.contiguous())[f"{index}.weight"]
    wrapped = GradSampleModule(model, batch_first=True, loss_reduction="sum")
    with warnings.catch_warnings():  # "Full backward hook is firing ...": no input needs grad
        warnings.simplefilter("ignore", UserWarning)
        (wrapped(x).square().sum() / 2).backward()
    sampled = model[index].weight.grad_sample
    return float((sampled - reference).norm() / reference.norm())


def one_conv(memory_format: torch.memory_format) -> float:
    """Error of cnn4's conv2 alone (16 -> 32 channels, 4x4, stride 2) on a random 13x13
    batch given in ``memory_format``."""
    torch.manual_seed(0)
    layer = nn.Sequential(nn.Conv2d(16, 32, kernel_size=4, stride=2))
    x = torch.randn(8, 16, 13, 13).contiguous(memory_format=memory_format)
    return relative_error(layer, x, 0)


def cnn4_front_on_nhwc_images() -> tuple[float, bool]:
    """cnn4's front (conv1, ReLU, max-pool, conv2) on 1-channel 28x28 images held as NHWC
    and permuted to NCHW, with no memory format asked for anywhere: conv2's error, and
    whether conv1's output (conv2's input, after ReLU and pooling) came out channels-last."""
    torch.manual_seed(0)
    front = nn.Sequential(nn.Conv2d(1, 16, kernel_size=8, stride=2, padding=3), nn.ReLU(),
                          nn.MaxPool2d(2, stride=1), nn.Conv2d(16, 32, kernel_size=4, stride=2))
    x = torch.rand(8, 28, 28, 1).permute(0, 3, 1, 2)  # NHWC data, NCHW view (no copy)
    conv2_input = front[:3](x)
    channels_last = (conv2_input.is_contiguous(memory_format=torch.channels_last)
                     and not conv2_input.is_contiguous())
    return relative_error(front, x, 3), channels_last


def main() -> int:
    print(f"torch {torch.__version__}, opacus {opacus.__version__}")
    contiguous = one_conv(torch.contiguous_format)
    channels_last = one_conv(torch.channels_last)
    front, front_channels_last = cnn4_front_on_nhwc_images()
    print(f"conv alone, contiguous input:    relative error {contiguous:.3g}")
    print(f"conv alone, channels-last input: relative error {channels_last:.3g}")
    print(f"cnn4 conv1-relu-pool-conv2 on permuted NHWC images: conv2 relative error "
          f"{front:.3g} (conv2 input channels-last: {front_channels_last})")
    wrong = max(channels_last, front) > TOLERANCE or contiguous > TOLERANCE
    print("per-sample gradients WRONG on channels-last input" if wrong
          else "per-sample gradients right in both memory formats")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
