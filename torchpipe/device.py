"""Where the torch backend computes: the first CUDA device when one is visible, else the CPU.

A Ray task started with ``--gpus-per-run`` sees only the GPUs Ray gave it
(``CUDA_VISIBLE_DEVICES``), so "the first visible device" is that task's GPU. Inputs are moved
to the model's device at the boundary (:func:`torchpipe.predict.to_tensor`) and results come
back as numpy arrays on the CPU. The seeded noise generator lives on the same device; a CUDA
generator draws a different (equally seeded) stream than the CPU one, so runs are reproducible
per device, not across devices.

Not testable on this project's CI (no GPU): the code path is kept to this module and a few
``.to(device)`` calls; on a machine without CUDA everything stays on the CPU as before.
``DPCOMPARE_DEVICE=cpu`` forces the CPU on a GPU machine.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn

#: Environment switch: ``cpu`` forces the CPU; anything else (or unset) means automatic.
DEVICE_ENV = "DPCOMPARE_DEVICE"


def training_device() -> torch.device:
    """``cuda:0`` (the first visible GPU) when CUDA is available and not switched off, else
    the CPU."""
    if os.environ.get(DEVICE_ENV, "auto").lower() != "cpu" and torch.cuda.is_available():
        return torch.device("cuda", 0)
    return torch.device("cpu")


def model_device(model: nn.Module) -> torch.device:
    """The device of the model's first parameter (the CPU for a model without parameters)."""
    for parameter in model.parameters():
        return parameter.device
    return torch.device("cpu")


def device_record(device: torch.device) -> dict[str, Any]:
    """What the result's ``perf`` records: the device and, for a GPU, its name."""
    record: dict[str, Any] = {"device": str(device)}
    if device.type == "cuda":
        record["device_name"] = torch.cuda.get_device_name(device)
    return record
