"""Checks that refuse models whose DP-SGD epsilon would be false, framework-neutral.

A backend calls :func:`check_dp_model` (or :func:`check_dp_layer_types` on its list of layer
type names) before it trains with DP-SGD. This module never imports TensorFlow or PyTorch: it
reads layer type names by duck typing (``nn.Module.modules()``, ``tf.Module.submodules``).

What is refused, and why:

* **BatchNorm** (``BatchNorm1d/2d/3d``, ``SyncBatchNorm``, Keras ``BatchNormalization``): in
  training mode it normalises each example with statistics of the whole batch, so one
  example's output (and gradient) depends on the other examples. Per-example clipping then
  no longer bounds one example's influence on the update, and the running statistics are
  updated from the data without noise. Opacus's ``ModuleValidator`` refuses it for the same
  reason; TF Privacy does not check. The model zoo uses GroupNorm instead.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from dpcore.errors import PrivacyError

#: Matches the type names of batch-normalisation layers in both frameworks.
BATCH_NORM_PATTERN = re.compile(r"batch_?norm", re.IGNORECASE)

BATCH_NORM_REASON = (
    "BatchNorm normalises each example with statistics of the whole batch, so one example's "
    "gradient depends on the others and per-example clipping no longer bounds its influence "
    "(its running statistics are also updated from the data without noise); the reported "
    "epsilon would be false. Use GroupNorm (as the model zoo does) or LayerNorm"
)


def batch_norm_layers(layer_types: Iterable[str]) -> list[str]:
    """The names in ``layer_types`` that are batch-normalisation layers (in order, repeated)."""
    return [name for name in layer_types if BATCH_NORM_PATTERN.search(str(name))]


def check_dp_layer_types(layer_types: Iterable[str], *, model_name: str = "the model") -> None:
    """Raise PrivacyError if a layer type would make DP-SGD's epsilon false.

    Args:
        layer_types: class names of every layer/module of the model (nested ones included),
            e.g. ``[type(m).__name__ for m in model.modules()]``.
        model_name: named in the message.

    Raises:
        PrivacyError: naming the offending layer types and the privacy reason.
    """
    found = batch_norm_layers(layer_types)
    if found:
        kinds = ", ".join(sorted(set(found)))
        raise PrivacyError(
            f"{model_name} has {len(found)} batch-normalisation layer(s) ({kinds}) and cannot "
            f"be trained with DP-SGD: {BATCH_NORM_REASON}"
        )


def layer_type_names(model: Any) -> list[str]:
    """Class names of every layer of a torch ``nn.Module`` or a Keras/``tf.Module`` model.

    Duck-typed (no framework import): ``model.modules()`` (torch, the model itself included),
    else ``model.submodules`` (``tf.Module``, every nested layer), else ``model.layers``.

    Raises:
        TypeError: if ``model`` exposes none of these.
    """
    modules = getattr(model, "modules", None)
    if callable(modules):
        return [type(m).__name__ for m in modules()]
    submodules = getattr(model, "submodules", None)
    if submodules is not None:
        return [type(model).__name__, *(type(m).__name__ for m in submodules)]
    layers = getattr(model, "layers", None)
    if layers is not None:
        out = [type(model).__name__]
        for layer in layers:
            out += layer_type_names(layer) if hasattr(layer, "layers") else [type(layer).__name__]
        return out
    raise TypeError(f"cannot list the layers of a {type(model).__name__}")


def check_dp_model(model: Any, *, model_name: str | None = None) -> None:
    """:func:`check_dp_layer_types` on a framework model (see :func:`layer_type_names`).

    Call it before DP-SGD training only: a non-private run may use any layer.

    Raises:
        PrivacyError: the model holds a layer that DP-SGD cannot account for.
    """
    check_dp_layer_types(layer_type_names(model),
                         model_name=model_name or f"model {type(model).__name__}")
