"""Pre-trained weights for either backend (``model.pretrained``), in the neutral layout.

One weights file starts both frameworks from the same arrays:

* the bench's own ``.npz`` (:func:`dpcore.weights.save_weights`, a checkpoint's weights):
  neutral keys ``<layer>.<param>`` as they are;
* a PyTorch ``state_dict`` (``torch.save(model.state_dict(), path)``), read without torch
  (:mod:`dpcore.torchfile`, so the TensorFlow backend needs no torch either). Its keys are
  mapped by the architecture description: a key ``...<layer>.<weight|bias>`` belongs to the
  layer of that (unique) name, as ``torchpipe.models`` names its modules (Opacus's
  ``_module.`` and DataParallel's ``module.`` prefixes are dropped); for ``resnet18`` the
  names of torchvision's ``resnet18`` are understood too (:data:`STATE_DICT_NAMES`). Arrays
  are converted from PyTorch's layout (OIHW kernels, [out, in] dense kernels).

**torchvision's BatchNorm.** ``resnet18`` here has GroupNorm where torchvision has
BatchNorm (BatchNorm mixes the examples of a batch; Opacus's ``ModuleValidator.fix`` makes
the same replacement, ``GroupNorm(min(32, C), C)``, the group count the bench uses for 64-512
channels). A BatchNorm's ``weight`` and ``bias`` (its learned scale and shift) are loaded as
the GroupNorm's gamma and beta; its ``running_mean``, ``running_var`` and
``num_batches_tracked`` have no GroupNorm counterpart and are dropped (Opacus's fix drops all
of them: its new GroupNorm starts at gamma 1, beta 0). The cost: a network trained with
BatchNorm computes a different function once each example is normalised by its own group
statistics instead of the training set's running ones, so the loaded network is a starting
point for fine-tuning, not the pre-trained classifier; expect its accuracy before fine-tuning
to be far below the original's.

``model.pretrained_skip`` names layers that keep their seeded initialisation (a head for
another number of classes, or torchvision's 7x7 stem where the bench's ``resnet18`` has a 3x3
one); every other weight of the model must be in the file with its shape, or the run stops
with a one-line error naming the key.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from dpcore.architectures import Architecture
from dpcore.errors import ConfigError
from dpcore.registry import Registry
from dpcore.torchfile import read_state_dict
from dpcore.weights import TORCH_PARAM_NAMES, Weights, check_weights, from_torch_layout

#: Prefixes of wrapped torch modules' keys, dropped before mapping.
WRAPPER_PREFIXES = ("_module.", "module.")

#: BatchNorm entries without a GroupNorm counterpart (dropped, see the module docstring).
BATCHNORM_STATISTICS = ("running_mean", "running_var", "num_batches_tracked")


def torchvision_resnet18_key(key: str) -> tuple[str, str] | None:
    """(neutral layer, torch attribute) of a torchvision ``resnet18`` key; None: dropped.

    ``conv1`` / ``bn1`` -> ``conv1`` / ``conv1_gn``; ``layer{s}.{b}.conv{k}`` / ``bn{k}`` ->
    ``layer{s}_{b-0}_conv{k}`` / ``_gn{k}``; ``downsample.0`` / ``.1`` -> ``_down`` /
    ``_down_gn``; ``fc`` -> ``fc``. Raises ConfigError for any other key.
    """
    *path, attr = key.split(".")
    if attr in BATCHNORM_STATISTICS:
        return None
    top = {"conv1": "conv1", "bn1": "conv1_gn", "fc": "fc"}
    if len(path) == 1 and path[0] in top:
        return top[path[0]], attr
    match = re.fullmatch(r"layer(\d)\.(\d)\.(conv\d|bn\d|downsample\.[01])", ".".join(path))
    if match is None:
        raise ConfigError(f"state_dict key {key!r} is not a torchvision resnet18 name")
    stage, block, part = match.groups()
    suffix = {"downsample.0": "down", "downsample.1": "down_gn"}.get(
        part, part.replace("bn", "gn"))
    return f"layer{stage}_{block}_{suffix}", attr


def _is_torchvision_resnet(keys: Mapping[str, object]) -> bool:
    return any(k.startswith("layer1.0.") for k in keys)


#: A foreign naming scheme of an architecture's ``state_dict``: (does this state_dict use
#: the foreign names?, key translator).
ForeignNames = tuple[Callable[[Mapping[str, object]], bool],
                     Callable[[str], tuple[str, str] | None]]

#: Architecture name -> its foreign naming scheme (``STATE_DICT_NAMES.register(name)``).
STATE_DICT_NAMES: Registry[str, ForeignNames] = Registry("foreign state_dict namings",
                                                         key="model.name")
STATE_DICT_NAMES.register("resnet18")((_is_torchvision_resnet, torchvision_resnet18_key))


def zoo_key(key: str) -> tuple[str, str] | None:
    """(layer, attribute) of a ``torchpipe.models`` key: its last two components."""
    parts = key.split(".")
    if len(parts) < 2:
        raise ConfigError(f"state_dict key {key!r} has no layer name; valid: <layer>.<weight>")
    return parts[-2], parts[-1]


def state_dict_to_neutral(state: Mapping[str, np.ndarray], arch: Architecture
                          ) -> tuple[Weights, list[str]]:
    """A torch ``state_dict`` (numpy arrays) in the neutral layout of ``arch``.

    Returns:
        (weights, dropped keys): BatchNorm statistics are dropped (see the module docstring).

    Raises:
        ConfigError: a key naming no layer with weights, or an attribute the layer lacks.
    """
    stripped: dict[str, np.ndarray] = {}
    for key, value in state.items():
        for prefix in WRAPPER_PREFIXES:
            key = key.removeprefix(prefix)
        stripped[key] = value
    detect, foreign = STATE_DICT_NAMES.get(arch.name, (None, None))
    translate = foreign if detect is not None and foreign is not None and detect(stripped) \
        else zoo_key
    kinds = arch.weight_kinds()
    out: Weights = {}
    dropped: list[str] = []
    for key, value in stripped.items():
        target = translate(key)
        if target is None:
            dropped.append(key)
            continue
        layer, attr = target
        kind = kinds.get(layer)
        if kind is None:
            raise ConfigError(f"state_dict key {key!r} names no layer with weights of model "
                              f"{arch.name!r}; valid layers: {', '.join(kinds)}")
        params = {torch_name: neutral for neutral, torch_name in TORCH_PARAM_NAMES[kind].items()}
        if attr not in params:
            raise ConfigError(f"state_dict key {key!r}: a {kind} layer has no {attr!r}; "
                              f"valid: {', '.join(params)}")
        out[f"{layer}.{params[attr]}"] = from_torch_layout(kind, params[attr], np.asarray(value))
    return out, dropped


def read_weights_file(path: Path, arch: Architecture) -> tuple[Weights, str]:
    """The file's weights in the neutral layout and its format (``npz`` or ``state_dict``)."""
    if not path.is_file():
        raise ConfigError(f"model.pretrained={str(path)!r} does not exist; valid: a weights "
                          "file (.npz or a PyTorch state_dict)")
    is_torch = zipfile.is_zipfile(path) and any(
        name.endswith("/data.pkl") for name in zipfile.ZipFile(path).namelist())
    if is_torch:
        return state_dict_to_neutral(read_state_dict(path), arch)[0], "state_dict"
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: np.asarray(data[k]) for k in data.files}, "npz"
    except (ValueError, OSError, zipfile.BadZipFile) as exc:
        raise ConfigError(f"model.pretrained={str(path)!r} is neither a neutral .npz nor a "
                          f"torch.save state_dict ({' '.join(str(exc).split())})") from exc


def pretrained_weights(path: str | Path, arch: Architecture, initial: Mapping[str, np.ndarray],
                       skip: tuple[str, ...] = ()) -> Weights:
    """The weights to start from: the file's, except the ``skip`` layers' (from ``initial``).

    Args:
        path: ``model.pretrained``.
        arch: the model's resolved architecture.
        initial: the run's initial weights (neutral layout), used for the skipped layers.
        skip: ``model.pretrained_skip`` layer names.

    Raises:
        ConfigError: one line naming the file and the bad, missing or extra key or shape.
    """
    path = Path(path).expanduser()
    loaded, _ = read_weights_file(path, arch)
    shapes = arch.weight_shapes()
    skipped = {k for k in shapes if k.rsplit(".", 1)[0] in skip}
    merged = {k: v for k, v in loaded.items() if k not in skipped}
    merged.update({k: initial[k] for k in skipped})
    try:
        return check_weights(shapes, merged)
    except ConfigError as exc:
        raise ConfigError(f"model.pretrained={str(path)!r}: {exc}; list a layer in "
                          "model.pretrained_skip to keep its initialisation instead") from exc
