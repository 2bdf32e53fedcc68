"""Class probabilities and logits of a torch model of the zoo, batched (the backend contract)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch
from torch import nn

from dpcore.predicting import PREDICT_BATCH_SIZE, predict_in_batches, predict_outputs_in_batches
from dpcore.trained import TrainedModel
from torchpipe.device import model_device


def is_text_model(model: nn.Module) -> bool:
    """True for models that take ``[N, L]`` token ids (their neutral input shape is ``(L,)``)."""
    return len(getattr(model, "input_shape", (0, 0, 0))) == 1


def _from_numpy(array: np.ndarray) -> torch.Tensor:
    """``torch.from_numpy`` without torch's warning for a read-only array (the fixed front's
    memoised features are read-only, :mod:`dpcore.frontcache`): the model inputs made here are
    only read (no in-place operation on an input), so sharing the memory is safe."""
    if array.flags.writeable:
        return torch.from_numpy(array)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(array)


def to_tensor(x: np.ndarray, text: bool, device: torch.device | None = None,
              memory_format: torch.memory_format = torch.contiguous_format) -> torch.Tensor:
    """Model inputs as a torch tensor: NHWC float32 -> NCHW float32 (in ``memory_format``:
    NCHW-contiguous by default; ``torch.channels_last`` keeps the NHWC memory, no copy);
    token ids -> int64; on ``device`` when given (see :mod:`torchpipe.device`)."""
    if text:
        tensor = _from_numpy(np.asarray(x, dtype=np.int64))
    else:
        images = _from_numpy(np.ascontiguousarray(x, dtype=np.float32))
        tensor = images.permute(0, 3, 1, 2).contiguous(memory_format=memory_format)
    return tensor if device is None else tensor.to(device)


def labels_tensor(y: np.ndarray, device: torch.device | None = None) -> torch.Tensor:
    """Class labels as an int64 tensor, on ``device`` when given."""
    tensor = torch.from_numpy(np.asarray(y, np.int64))
    return tensor if device is None else tensor.to(device)


def logits(model: nn.Module, x: np.ndarray) -> np.ndarray:
    """Logits (float32 [n, K]) of one batch of model inputs (NHWC or ids), in eval mode."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            return model(to_tensor(x, is_text_model(model), model_device(model))).cpu().numpy()
    finally:
        model.train(was_training)


def probabilities(model: nn.Module, x: np.ndarray) -> np.ndarray:
    """Softmax probabilities (float32 [n, K]) of one batch of model inputs (NHWC or ids)."""
    return outputs(model, x)[1]


def outputs(model: nn.Module, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(logits, softmax probabilities), float32 [n, K], of one batch of model inputs from one
    forward pass (the probabilities: torch's softmax of those logits)."""
    z = logits(model, x)
    return z, torch.softmax(torch.from_numpy(z), dim=-1).numpy()


def predict_proba(model: TrainedModel | nn.Module | Any, x: np.ndarray,
                  batch_size: int = PREDICT_BATCH_SIZE) -> np.ndarray:
    """Softmax probabilities [N, K] (float32) of ``x``, in batches of ``batch_size``.

    Args:
        model: a :class:`~dpcore.trained.TrainedModel` of this backend or a torch model of the
            zoo (outputs logits; takes NCHW, the conversion from NHWC is done here).
        x: NHWC images (``uint8`` 0..255 or float32 in [0, 1]) or ``[N, L]`` token ids.
        batch_size: examples per forward pass (memory only).
    """
    module = model.model if isinstance(model, TrainedModel) else model
    task = "text" if is_text_model(module) else "image"
    return predict_in_batches(lambda xb: probabilities(module, xb), x, task, batch_size)


def predict_logits(model: TrainedModel | nn.Module | Any, x: np.ndarray,
                   batch_size: int = PREDICT_BATCH_SIZE) -> np.ndarray:
    """Logits [N, K] (float32) of ``x``, in batches of ``batch_size``: what
    :func:`predict_proba` applies the softmax to (they keep the ranking a saturated float32
    softmax loses; see :func:`dpcore.metrics.classification.log_odds`).

    Args: as :func:`predict_proba`.
    """
    module = model.model if isinstance(model, TrainedModel) else model
    task = "text" if is_text_model(module) else "image"
    return predict_in_batches(lambda xb: logits(module, xb), x, task, batch_size)


def predict_outputs(model: TrainedModel | nn.Module | Any, x: np.ndarray,
                    batch_size: int = PREDICT_BATCH_SIZE) -> tuple[np.ndarray, np.ndarray]:
    """(:func:`predict_logits`, :func:`predict_proba`) of ``x`` from one forward pass per
    batch, each exactly what those functions give.

    Args: as :func:`predict_proba`.
    """
    module = model.model if isinstance(model, TrainedModel) else model
    task = "text" if is_text_model(module) else "image"
    return predict_outputs_in_batches(lambda xb: outputs(module, xb), x, task, batch_size)
