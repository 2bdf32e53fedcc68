"""The PyTorch model zoo: interprets :mod:`dpcore.architectures` with standard torch modules.

Every model is an ``nn.Module`` taking NCHW float32 images (or ``[N, L]`` int64 token ids for
``textcnn``) and returning logits. It reproduces the Keras model of ``tfpipe.models`` exactly:

* TF ``same`` padding is applied explicitly (``nn.ZeroPad2d`` before a ``padding=0`` conv when
  it is asymmetric, e.g. stride 2 with an even kernel), since ``nn.Conv2d`` pads symmetrically;
* flattening is done in channels-last order (permute, then flatten), so dense kernels after a
  flatten match Keras';
* GroupNorm epsilon is 1e-5 in both.

Only layers Opacus' grad samplers support carry parameters (Conv2d, Conv1d, Linear, GroupNorm,
Embedding); kymatio's scattering (:class:`Scattering`) has none (its filters are buffers);
activations are separate, non-inplace modules, so hooks and Captum work. Each
module built from a described layer carries that layer's neutral name in ``dp_name``; that is
how :func:`get_weights`, :func:`set_weights` and :func:`get_layer` find it, also inside an
Opacus ``GradSampleModule``. Each layer description type has one builder, registered with
``@LAYER_BUILDERS.register(LayerType)`` in :data:`LAYER_BUILDERS`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from kymatio.torch import Scattering2D as KymatioScattering2D
from torch import nn

from dpcore import architectures as A
from dpcore.activations import ActivationSpec
from dpcore.config import ModelSpec
from dpcore.errors import ConfigError
from dpcore.registry import Registry
from dpcore.weights import (
    TORCH_PARAM_NAMES,
    Weights,
    check_weights,
    from_torch_layout,
    init_weights,
    to_torch_layout,
)


class TemperedSigmoid(nn.Module):
    """``scale * sigmoid(inverse_temperature * x) - offset`` (Papernot et al., 2021)."""

    def __init__(
        self, scale: float = 2.0, inverse_temperature: float = 2.0, offset: float = 1.0
    ) -> None:
        super().__init__()
        self.scale = float(scale)
        self.inverse_temperature = float(inverse_temperature)
        self.offset = float(offset)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the tempered sigmoid elementwise."""
        return self.scale * torch.sigmoid(self.inverse_temperature * x) - self.offset

    def extra_repr(self) -> str:
        return f"s={self.scale}, T={self.inverse_temperature}, o={self.offset}"


class FlattenChannelsLast(nn.Module):
    """Flatten ``[N, C, ...]`` in channels-last order (as Keras does on NHWC)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[N, C, H, W] -> [N, H*W*C]`` (or ``[N, C, L] -> [N, L*C]``)."""
        return torch.flatten(torch.movedim(x, 1, -1), 1)


class GlobalAvgPool2d(nn.Module):
    """Mean over H and W: ``[N, C, H, W] -> [N, C]``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Average the spatial axes."""
        return x.mean(dim=(2, 3))


class GlobalMaxPool1d(nn.Module):
    """Max over the sequence: ``[N, C, L] -> [N, C]``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Maximum over the last axis."""
        return x.amax(dim=2)


class ChannelsFirst1d(nn.Module):
    """``[N, L, C] -> [N, C, L]`` (embedding output to Conv1d layout)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Swap the sequence and channel axes."""
        return x.transpose(1, 2)


class Scattering(nn.Module):
    """kymatio's 2-D scattering on NCHW images: ``[N, C, H, W] -> [N, C K, H/2^J, W/2^J]``.

    Output channel ``c K + k`` is coefficient ``k`` of input channel ``c`` (the order
    ``tfpipe.models.Scattering`` produces). kymatio keeps its filters as buffers, so the
    module has no parameters: Opacus and the fast engine skip it, and it moves with ``.to()``.
    """

    def __init__(self, J: int, L: int, shape: tuple[int, int]) -> None:
        super().__init__()
        self.scattering = KymatioScattering2D(J=J, shape=shape, L=L)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Scatter each channel of each image; merge the channel and coefficient axes."""
        s = self.scattering(x.contiguous())  # kymatio refuses a non-contiguous tensor
        return s.reshape(s.shape[0], s.shape[1] * s.shape[2], s.shape[3], s.shape[4])


class Sequence(nn.Module):
    """Apply named modules in order (an ``nn.Sequential`` whose names are the neutral ones)."""

    def __init__(self, modules: list[tuple[str, nn.Module]]) -> None:
        super().__init__()
        self.layers = nn.ModuleDict(modules)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Run the layers in order."""
        for module in self.layers.values():
            x = module(x)
        return x


class Residual(nn.Module):
    """``body(x) + shortcut(x)``; identity shortcut when it has no layers."""

    def __init__(self, body: Sequence, shortcut: Sequence | None) -> None:
        super().__init__()
        self.body = body
        self.shortcut = shortcut

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Sum the two branches (out of place, so autograd hooks see both)."""
        short = x if self.shortcut is None else self.shortcut(x)
        return self.body(x) + short


class ZooModel(Sequence):
    """A model of this zoo: a :class:`Sequence` plus the architecture's name and input shape.

    Attributes:
        arch_name: registry name.
        input_shape: ``(H, W, C)`` or ``(L,)``: the neutral (channels-last) per-example shape;
            the module itself takes ``[N, C, H, W]`` float32 or ``[N, L]`` int64.
    """

    def __init__(self, arch: A.Architecture, modules: list[tuple[str, nn.Module]]) -> None:
        super().__init__(modules)
        self.arch_name = arch.name
        self.input_shape = tuple(arch.input_shape)


def activation_module(spec: ActivationSpec) -> nn.Module:
    """A fresh (never shared, never inplace) module computing ``spec``."""
    if spec.kind == "relu":
        return nn.ReLU(inplace=False)
    if spec.kind == "tanh":
        return nn.Tanh()
    return TemperedSigmoid(spec.scale, spec.inverse_temperature, spec.offset)


def _tag(module: nn.Module, name: str) -> nn.Module:
    module.dp_name = name
    return module


@dataclass(frozen=True)
class TorchContext:
    """What a torch layer builder may use besides its layer: the neutral traced shapes, the
    architecture's activation, and :meth:`modules` to build nested layers (a
    :class:`~dpcore.layers.Residual`'s branches)."""

    shapes: dict[str, tuple[A.Shape, A.Shape]]
    activation: ActivationSpec

    def modules(self, layers: tuple[A.Layer, ...]) -> list[tuple[str, nn.Module]]:
        """Torch modules for the described layers, in forward order, with their names."""
        out: list[tuple[str, nn.Module]] = []
        for layer in layers:
            out += LAYER_BUILDERS[type(layer)](layer, self.shapes[layer.name][0], self)
        return out


#: Builds one described layer: ``builder(layer, neutral input shape, ctx) -> [(name, module)]``
#: (the module of the layer itself tagged by :func:`tagged`, plus any helper modules such as
#: an asymmetric padding, in forward order).
TorchBuilder = Callable[[Any, A.Shape, TorchContext], list[tuple[str, nn.Module]]]

#: Layer type (:data:`dpcore.layers.LAYER_TYPES`) -> its torch builder (exact types).
LAYER_BUILDERS: Registry[type, TorchBuilder] = Registry("torch builders", key="layer type")
#: Layer type -> why the fast DP engine (:mod:`torchpipe.fast`) has no per-example rule
#: for what its builder makes: a declaration that runs of a model with it use the reference
#: engine (:func:`dpcore.backend.choose_engine` finds the module itself and records it).
FAST_FALLBACKS: Registry[type, str] = Registry("torch fast-engine fallbacks", key="layer type")


def tagged(layer: A.Layer, module: nn.Module) -> list[tuple[str, nn.Module]]:
    """A builder's result for a layer built as one module: ``module`` under the layer's
    neutral name, tagged with it (``dp_name``, how :func:`get_layer` and the weight
    functions find it)."""
    return [(layer.name, _tag(module, layer.name))]


#: Spatial axes -> (torch convolution, the module padding it asymmetrically).
_CONVS: dict[int, tuple[type[nn.Module], Callable[[tuple[int, ...]], nn.Module]]] = {
    1: (nn.Conv1d, lambda pads: nn.ConstantPad1d(pads, 0.0)),
    2: (nn.Conv2d, nn.ZeroPad2d),
}


@LAYER_BUILDERS.register(A.Conv2D, A.Conv1D)
def _conv(layer: A.Conv2D | A.Conv1D, in_shape: A.Shape, ctx: TorchContext
          ) -> list[tuple[str, nn.Module]]:
    """TF padding: ``same`` pads by :func:`dpcore.architectures.same_padding` per spatial
    axis, in the convolution when symmetric on every axis, else by a padding module first."""
    n_axes = len(in_shape) - 1
    conv_cls, pad_cls = _CONVS[n_axes]
    pads = [A.same_padding(n, layer.kernel, layer.stride) if layer.padding == "same"
            else (0, 0) for n in in_shape[:n_axes]]
    out: list[tuple[str, nn.Module]] = []
    padding = pads[0][0]
    if {p for pair in pads for p in pair} != {padding}:
        padding = 0  # torch's padding modules take the last axis first: (left, right, top, ...)
        out.append((f"{layer.name}_pad", pad_cls(tuple(p for pair in pads[::-1] for p in pair))))
    conv = conv_cls(in_shape[-1], layer.filters, layer.kernel, layer.stride, padding=padding,
                    bias=layer.use_bias)
    return out + tagged(layer, conv)


@LAYER_BUILDERS.register(A.GroupNorm)
def _group_norm(layer: A.GroupNorm, in_shape: A.Shape, ctx: TorchContext
                ) -> list[tuple[str, nn.Module]]:
    return tagged(layer, nn.GroupNorm(layer.groups, in_shape[-1], eps=layer.epsilon,
                                       affine=layer.affine))


@LAYER_BUILDERS.register(A.Scattering2D)
def _scattering(layer: A.Scattering2D, in_shape: A.Shape, ctx: TorchContext
                ) -> list[tuple[str, nn.Module]]:
    return tagged(layer, Scattering(layer.J, layer.L, (in_shape[0], in_shape[1])))


@LAYER_BUILDERS.register(A.Activation)
def _activation(layer: A.Activation, in_shape: A.Shape, ctx: TorchContext
                ) -> list[tuple[str, nn.Module]]:
    return tagged(layer, activation_module(ctx.activation))


@LAYER_BUILDERS.register(A.MaxPool2D)
def _max_pool2d(layer: A.MaxPool2D, in_shape: A.Shape, ctx: TorchContext
                ) -> list[tuple[str, nn.Module]]:
    return tagged(layer, nn.MaxPool2d(layer.pool, layer.stride))


#: Reshaping layers: one argument-free module class each.
_RESHAPES: dict[type, type[nn.Module]] = {
    A.Flatten: FlattenChannelsLast, A.GlobalAvgPool2D: GlobalAvgPool2d,
    A.GlobalMaxPool1D: GlobalMaxPool1d,
}


@LAYER_BUILDERS.register(*_RESHAPES)
def _reshape(layer: A.Flatten | A.GlobalAvgPool2D | A.GlobalMaxPool1D, in_shape: A.Shape,
             ctx: TorchContext) -> list[tuple[str, nn.Module]]:
    return tagged(layer, _RESHAPES[type(layer)]())


@LAYER_BUILDERS.register(A.Dense)
def _dense(layer: A.Dense, in_shape: A.Shape, ctx: TorchContext
           ) -> list[tuple[str, nn.Module]]:
    return tagged(layer, nn.Linear(in_shape[-1], layer.units, bias=layer.use_bias))


@LAYER_BUILDERS.register(A.Embedding)
def _embedding(layer: A.Embedding, in_shape: A.Shape, ctx: TorchContext
               ) -> list[tuple[str, nn.Module]]:
    return [*tagged(layer, nn.Embedding(layer.vocab_size, layer.dim)),
            (f"{layer.name}_ncl", ChannelsFirst1d())]


@LAYER_BUILDERS.register(A.Residual)
def _residual(layer: A.Residual, in_shape: A.Shape, ctx: TorchContext
              ) -> list[tuple[str, nn.Module]]:
    body = Sequence(ctx.modules(layer.body))
    short = Sequence(ctx.modules(layer.shortcut)) if layer.shortcut else None
    return tagged(layer, Residual(body, short))


def from_architecture(arch: A.Architecture) -> ZooModel:
    """Build the torch model for a resolved :class:`~dpcore.architectures.Architecture`."""
    return ZooModel(arch, TorchContext(arch.trace(), arch.activation).modules(arch.layers))


def build_model(
    spec: ModelSpec, input_shape: tuple[int, ...], n_classes: int, seed: int | None = None,
    *, vocab_size: int | None = None,
) -> ZooModel:
    """Build the named model as an ``nn.Module`` that outputs logits.

    Args:
        spec: model name, activation (with tempered-sigmoid parameters) and width.
        input_shape: ``(H, W, C)`` for images (the module takes NCHW float32), ``(L,)`` for
            ``textcnn`` (the module takes ``[N, L]`` int64 token ids).
        n_classes: number of logits.
        seed: if given, the weights are :func:`dpcore.weights.init_weights` of this seed, the
            same arrays ``tfpipe.models.build_model`` loads for this seed; if ``None``,
            PyTorch's default initialisation with torch's global random state.
        vocab_size: number of token ids (``textcnn`` only).

    Raises:
        ConfigError: unknown model name (lists valid names), bad shapes, missing vocab_size.
    """
    arch = A.architecture(spec, input_shape, n_classes, vocab_size)
    model = from_architecture(arch)
    if seed is not None:
        set_weights(model, init_weights(arch.weight_shapes(), seed))
    freeze_layers(model, spec.freeze)
    return model


def freeze_layers(model: nn.Module, names: Iterable[str]) -> None:
    """Turn off ``requires_grad`` of the named layers' parameters (``model.freeze``).

    Opacus (``GradSampleModule``, ``DPOptimizer``) and the fast engine (:mod:`torchpipe.fast`)
    compute, clip and update only parameters that require gradients: a frozen layer gets no
    update and its parameters are not part of the per-example clipping norm.
    """
    for name in names:
        for param in get_layer(model, name).parameters():
            param.requires_grad_(False)


def _builder(name: str) -> Callable[..., ZooModel]:
    def build(
        spec: ModelSpec, input_shape: tuple[int, ...], n_classes: int, seed: int | None = None,
        *, vocab_size: int | None = None,
    ) -> ZooModel:
        if spec.name != name:
            raise ConfigError(f"builder {name!r} was given model.name={spec.name!r}")
        return build_model(spec, input_shape, n_classes, seed, vocab_size=vocab_size)

    build.__name__ = f"build_{name}"
    build.__doc__ = f"Build ``{name}``; see :func:`build_model`."
    return build


MODELS: dict[str, Callable[..., ZooModel]] = {name: _builder(name) for name in A.model_names()}
"""Model name -> builder with :func:`build_model`'s signature, for the architectures
registered when this module is imported (a derived table: :func:`build_model` builds any
architecture registered later too)."""


# ------------------------------------------------------------------------------ weights
_KINDS: tuple[tuple[type, str], ...] = (
    (nn.Conv2d, "conv2d"),
    (nn.Conv1d, "conv1d"),
    (nn.Linear, "dense"),
    (nn.GroupNorm, "groupnorm"),
    (nn.Embedding, "embedding"),
)


def _named(model: nn.Module) -> Iterator[tuple[str, nn.Module]]:
    """(neutral name, module) for every tagged module, in registration (= forward) order.

    Works on wrapped models too (Opacus ``GradSampleModule``, ``torch.compile``), since the
    tags travel with the modules.
    """
    for module in model.modules():
        name = getattr(module, "dp_name", None)
        if name is not None:
            yield name, module


def _parameters(model: nn.Module) -> dict[str, tuple[str, str, nn.Parameter]]:
    """Neutral key -> (kind, neutral param, torch parameter)."""
    out: dict[str, tuple[str, str, nn.Parameter]] = {}
    for name, module in _named(model):
        kind = next((k for t, k in _KINDS if isinstance(module, t)), None)
        if kind is None:
            if any(True for _ in module.parameters(recurse=False)):
                raise ConfigError(
                    f"module {name!r} ({type(module).__name__}) has parameters but no neutral "
                    "layout; valid: Conv2d, Conv1d, Linear, GroupNorm, Embedding"
                )
            continue
        for param, attr in TORCH_PARAM_NAMES[kind].items():
            tensor = getattr(module, attr, None)
            if tensor is not None:
                out[f"{name}.{param}"] = (kind, param, tensor)
    return out


def get_weights(model: nn.Module) -> Weights:
    """The model's weights in the neutral layout (float32 numpy copies)."""
    return {
        key: from_torch_layout(kind, param, tensor.detach().cpu().numpy()).astype(np.float32)
        for key, (kind, param, tensor) in _parameters(model).items()
    }


def _known_parameters(model: nn.Module, keys: Mapping[str, Any]
                      ) -> dict[str, tuple[str, str, nn.Parameter]]:
    """The model's parameters by neutral key (:func:`_parameters`), after checking that every
    key of ``keys`` is one of them.

    Raises:
        ConfigError: a key that is not one of the model's weights.
    """
    params = _parameters(model)
    unknown = sorted(set(keys) - set(params))
    if unknown:
        raise ConfigError(f"weight key {unknown[0]!r} is not one of the model's; valid: "
                          f"{', '.join(sorted(params))}")
    return params


def neutral_to_parameters(model: nn.Module, vector: Mapping[str, np.ndarray]
                          ) -> dict[int, torch.Tensor]:
    """A neutral-layout vector as tensors in PyTorch's layout, keyed by ``id`` of the
    parameter they belong to (keys not in ``vector`` are left out: zeros).

    Raises:
        ConfigError: a key that is not one of the model's weights.
    """
    params = _known_parameters(model, vector)
    out: dict[int, torch.Tensor] = {}
    for key, value in vector.items():
        kind, param, tensor = params[key]
        native = to_torch_layout(kind, param, np.asarray(value, np.float32))
        out[id(tensor)] = torch.from_numpy(native).to(dtype=tensor.dtype, device=tensor.device)
    return out


def parameter_indices(model: nn.Module, coordinates: Mapping[str, np.ndarray]
                      ) -> dict[str, tuple[nn.Parameter, np.ndarray]]:
    """Neutral coordinates in PyTorch's layout: key -> (its parameter, the flat indices in
    the parameter of the neutral flat indices ``coordinates[key]``, same order).

    Raises:
        ConfigError: a key that is not one of the model's weights.
    """
    params = _known_parameters(model, coordinates)
    out: dict[str, tuple[nn.Parameter, np.ndarray]] = {}
    for key, flat in coordinates.items():
        kind, param, tensor = params[key]
        n = tensor.numel()
        neutral = np.arange(n, dtype=np.int64).reshape(
            from_torch_layout(kind, param, np.empty(tuple(tensor.shape))).shape)
        native = to_torch_layout(kind, param, neutral).reshape(-1)
        position = np.empty(n, np.int64)
        position[native] = np.arange(n, dtype=np.int64)
        out[key] = (tensor, position[np.asarray(flat, np.int64)])
    return out


def set_weights(model: nn.Module, weights: Mapping[str, np.ndarray]) -> None:
    """Load neutral-layout weights; all-or-nothing.

    Raises:
        ConfigError: a missing or extra key, or a shape mismatch (nothing is assigned then).
    """
    params = _parameters(model)
    expected = {
        key: tuple(from_torch_layout(kind, param, np.empty(tuple(t.shape), np.float32)).shape)
        for key, (kind, param, t) in params.items()
    }
    checked = check_weights(expected, weights)
    with torch.no_grad():
        for key, (kind, param, tensor) in params.items():
            value = torch.from_numpy(to_torch_layout(kind, param, checked[key]))
            tensor.copy_(value.to(dtype=tensor.dtype, device=tensor.device))


# ------------------------------------------------------------------------------ layers
def gradcam_layer_name(model: nn.Module, *, target: str = "last_conv") -> str:
    """Name of the Grad-CAM target layer, identical to ``tfpipe.models``' answer.

    Args:
        model: a model of this zoo (possibly wrapped, e.g. by Opacus).
        target: ``last_conv`` (the last convolution's output, pre-activation; the default;
            for a model without a convolution, ``scatter-linear``, the scattering output, as
            :meth:`dpcore.architectures.Architecture.gradcam_layer` says) or ``features``
            (the last spatial feature map, just before flatten/global pooling).
    """
    named = list(_named(model))
    if target == "features":
        zoo = next((m for m in model.modules() if isinstance(m, ZooModel)), None)
        top = [] if zoo is None else [m for m in zoo.layers.values() if hasattr(m, "dp_name")]
        for prev, module in zip(top, top[1:], strict=False):
            if isinstance(module, FlattenChannelsLast | GlobalAvgPool2d | GlobalMaxPool1d):
                return prev.dp_name
        raise ConfigError("model has no flatten/global pooling layer")
    if target != "last_conv":
        raise ConfigError(f"target={target!r} is not known; valid: last_conv, features")
    convs = [name for name, module in named if isinstance(module, nn.Conv2d | nn.Conv1d)]
    if not convs:
        convs = [name for name, module in named if isinstance(module, Scattering)]
    if not convs:
        raise ConfigError("model has no convolution or scattering layer")
    return convs[-1]


def get_layer(model: nn.Module, name: str) -> nn.Module:
    """The module built for the neutral layer ``name``; ConfigError if there is none."""
    named = dict(_named(model))
    if name not in named:
        raise ConfigError(f"model has no layer {name!r}; valid: {', '.join(named)}")
    return named[name]


__all__ = [
    "FAST_FALLBACKS", "LAYER_BUILDERS", "MODELS", "Scattering", "TemperedSigmoid",
    "TorchContext", "ZooModel", "activation_module", "build_model", "freeze_layers",
    "from_architecture", "get_layer", "get_weights", "gradcam_layer_name", "set_weights",
    "tagged",
]
