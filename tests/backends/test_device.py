"""The device path (GPUs): each backend records where it computed in the result's
``perf``; the torch backend picks the first visible GPU and moves inputs to the model's device.
Only the CPU branch can run here (no GPU); the choice rule is tested by faking CUDA's answer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from compare import api
from torchpipe import device as torch_device
from torchpipe.predict import labels_tensor, to_tensor

TINY = {"data": {"name": "digits", "image_size": 16}, "model": {"name": "cnn4"},
        "privacy": {"mechanism": "dpsgd-gaussian", "noise_multiplier": 1.0},
        "train": {"steps": 2, "batch_size": 32, "lr": 0.1}}


def test_training_device_is_the_first_gpu_when_cuda_answers(monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    monkeypatch.delenv(torch_device.DEVICE_ENV, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert torch_device.training_device() == torch.device("cuda", 0)
    monkeypatch.setenv(torch_device.DEVICE_ENV, "cpu")  # the switch wins over a visible GPU
    assert torch_device.training_device() == torch.device("cpu")


def test_training_device_is_the_cpu_without_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(torch_device.DEVICE_ENV, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert torch_device.training_device() == torch.device("cpu")
    assert torch_device.device_record(torch.device("cpu")) == {"device": "cpu"}


def test_inputs_follow_the_requested_device() -> None:
    images = np.zeros((2, 4, 4, 1), np.float32)
    assert to_tensor(images, False, torch.device("cpu")).shape == (2, 1, 4, 4)
    assert to_tensor(images, False, torch.device("meta")).device.type == "meta"
    assert labels_tensor(np.array([1, 0]), torch.device("meta")).device.type == "meta"
    assert torch_device.model_device(torch.nn.Linear(2, 2).to("meta")).type == "meta"
    assert torch_device.model_device(torch.nn.ReLU()) == torch.device("cpu")


@pytest.mark.parametrize(("backend", "expected"), [("torch", "cpu"), ("tf", "/device:CPU:0")])
def test_each_backend_records_its_device(tmp_path: Path, backend: str, expected: str) -> None:
    result = api.train(TINY, backend, out=tmp_path, faithfulness_subset=0)
    assert result.status == "finished"
    assert result.perf["device"] == expected
