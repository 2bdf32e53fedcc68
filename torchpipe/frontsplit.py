"""Split a torch model of the zoo at the end of its fixed front end (see
:mod:`dpcore.frontcache`): the front as a numpy function, the head as a module over its
output that shares the full model's modules (hence its weights)."""

from __future__ import annotations

from collections.abc import Sequence as SequenceOf

import numpy as np
import torch

from dpcore.errors import ConfigError
from dpcore.frontcache import FixedFront
from torchpipe.device import model_device
from torchpipe.models import Sequence, ZooModel
from torchpipe.predict import to_tensor


def split_fixed_front(model: ZooModel, names: SequenceOf[str]) -> FixedFront:
    """``model`` split after its leading modules ``names`` (neutral names, in order).

    The head is a :class:`~torchpipe.models.Sequence` of the remaining top-level modules (the
    same objects), with ``input_shape`` the features' (H, W, C); the features are NHWC float32
    numpy arrays, as :func:`~torchpipe.predict.to_tensor` takes them back.

    Raises:
        ConfigError: ``names`` are not the model's leading modules.
    """
    children = list(model.layers.items())
    n = len(names)
    leading = tuple(name for name, _ in children[:n])
    if n == 0 or leading != tuple(names):
        raise ConfigError(f"cannot split model {model.arch_name!r} after {list(names)}: its "
                          f"leading modules are {list(leading)}")
    front = Sequence(children[:n])
    head = Sequence(children[n:])
    device = model_device(model)
    with torch.no_grad():
        probe = front(torch.zeros((1, model.input_shape[2], *model.input_shape[:2]),
                                  device=device))
    head.input_shape = (int(probe.shape[2]), int(probe.shape[3]), int(probe.shape[1]))

    def features(x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            out = front(to_tensor(x, False, device))
        return out.permute(0, 2, 3, 1).contiguous().cpu().numpy()

    return FixedFront(names=tuple(names), features=features, head=head)
