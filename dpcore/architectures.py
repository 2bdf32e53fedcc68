"""The model zoo described once, framework-neutrally, as a small layer graph.

Each architecture (``cnn4``, ``resnet18``, ``vgg11``, ``vgg16``, ``alexnet``, ``scatter-linear``,
``scatter-cnn``, ``textcnn``) is a tuple of layer descriptions (:class:`Conv2D`,
:class:`GroupNorm`, :class:`Residual`, :class:`Scattering2D`, ...; defined in
:mod:`dpcore.layers`, re-exported here). A ``custom`` model is the same kind of tuple, parsed
from the config's ``model.layers`` (:func:`dpcore.layers.parse_layers`). ``tfpipe.models``
and ``torchpipe.models`` each interpret this one description, so the two frameworks cannot
drift apart: same layers, same names, same padding, same weight shapes.

Each layer type states its own shape rule and weights (:class:`dpcore.layers.Layer`); each
backend registers one builder per type (``LAYER_BUILDERS.register``). An architecture is one
function registered in :data:`IMAGE_ARCHITECTURES` (or :data:`TEXT_ARCHITECTURES`).

Conventions (the contract of both backends):

* Image tensors are described channels-last, ``(H, W, C)``; token inputs are ``(L,)``.
* Convolution padding follows TensorFlow: ``same`` pads ``max((ceil(n/s)-1)*s + k - n, 0)``
  in total, the extra pixel at the bottom/right (:func:`same_padding`); ``valid`` pads none.
* Max-pooling is always ``valid`` (no padding), so both frameworks agree exactly.
* A :class:`Flatten` flattens in ``(H, W, C)`` order (PyTorch permutes to channels-last first).
* Every layer name is unique across the whole graph; a weight's neutral key is
  ``"<layer name>.<parameter>"`` (see :mod:`dpcore.weights`).
* GroupNorm replaces BatchNorm (BatchNorm mixes examples, which breaks per-example privacy);
  its group count is :func:`group_count` and its epsilon is 1e-5 in both frameworks.

This module is pure Python (no numpy, no framework), so it can be used to compute weight shapes
without loading TensorFlow or PyTorch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from dpcore.activations import ActivationSpec
from dpcore.config import ModelSpec
from dpcore.errors import ConfigError
from dpcore.layers import (
    GROUPNORM_EPSILON,
    LAYER_TYPES,
    Activation,
    Conv1D,
    Conv2D,
    Dense,
    Embedding,
    Flatten,
    GlobalAvgPool2D,
    GlobalMaxPool1D,
    GroupNorm,
    Layer,
    MaxPool2D,
    Residual,
    Scattering2D,
    Shape,
    Tracer,
    conv_output_size,
    parse_layers,
    resolve_layers,
    scattering_channels,
)
from dpcore.registry import Registry
from dpcore.suggest import did_you_mean

MAX_GROUPS = 32

CUSTOM_MODEL = "custom"
"""``model.name`` of a model declared in the config (``model.layers``)."""


CONV_TYPES = (Conv2D, Conv1D)
"""Layer types Grad-CAM may target (the last one is the default target)."""


@dataclass(frozen=True)
class Architecture:
    """One fully specified network: layers, input, output size and activation.

    Attributes:
        name: registry name.
        input_shape: ``(H, W, C)`` for images, ``(L,)`` for token ids.
        n_classes: number of logits.
        activation: the activation used by every :class:`Activation` layer.
        layers: the layer graph, in forward order.
    """

    name: str
    input_shape: Shape
    n_classes: int
    activation: ActivationSpec
    layers: tuple[Layer, ...]

    @property
    def is_text(self) -> bool:
        """True if the input is a sequence of integer token ids."""
        return len(self.input_shape) == 1

    def walk(self) -> Iterator[Layer]:
        """Every layer, residual bodies and shortcuts included, in forward order."""
        yield from _walk(self.layers)

    def trace(self) -> dict[str, tuple[Shape, Shape]]:
        """Layer name -> (input shape, output shape), per example (each layer's
        :meth:`~dpcore.layers.Layer.output_shape`).

        Raises:
            ConfigError: if the input is too small for the architecture (a map size < 1),
                or layer names are not unique.
        """
        shapes: dict[str, tuple[Shape, Shape]] = {}
        out = Tracer(self.name, tuple(self.input_shape), shapes).trace(
            self.layers, tuple(self.input_shape))
        if out != (self.n_classes,):
            raise ConfigError(
                f"model {self.name!r} ends with shape {out}, expected ({self.n_classes},)"
            )
        return shapes

    def weight_shapes(self) -> dict[str, Shape]:
        """Neutral weight key -> shape, in forward order (see :mod:`dpcore.weights`)."""
        shapes = self.trace()
        out: dict[str, Shape] = {}
        for layer in self.walk():
            out.update((f"{layer.name}.{param}", shape)
                       for param, shape in layer.weight_shapes(shapes[layer.name][0]).items())
        return out

    def weight_kinds(self) -> dict[str, str]:
        """Layer name -> weight kind (``conv2d``, ``conv1d``, ``dense``, ...), param layers only."""
        return {layer.name: kind for layer in self.walk()
                if (kind := layer.weight_kind()) is not None}

    def last_conv(self) -> str:
        """Name of the last convolution in forward order (the default Grad-CAM target)."""
        convs = [layer.name for layer in self.walk() if isinstance(layer, CONV_TYPES)]
        if not convs:
            raise ConfigError(f"model {self.name!r} has no convolution to target")
        return convs[-1]

    def gradcam_layer(self) -> str:
        """The default Grad-CAM target: :meth:`last_conv`, or for a model without a
        convolution that starts with a :class:`Scattering2D` (``scatter-linear``), the
        scattering output, its only spatial feature map (see :func:`scatter_linear`)."""
        try:
            return self.last_conv()
        except ConfigError:
            scatter = [layer.name for layer in self.walk() if isinstance(layer, Scattering2D)]
            if not scatter:
                raise
            return scatter[-1]

    def feature_layer(self) -> str:
        """Name of the top-level layer whose output is the last spatial feature map.

        That is the layer just before the first Flatten / global pooling (for ResNet-18 the
        last block's activation, like torchvision's ``layer4``).
        """
        for i, layer in enumerate(self.layers):
            if isinstance(layer, Flatten | GlobalAvgPool2D | GlobalMaxPool1D) and i > 0:
                return self.layers[i - 1].name
        raise ConfigError(f"model {self.name!r} has no flatten/pooling after its features")


def _walk(layers: tuple[Layer, ...]) -> Iterator[Layer]:
    for layer in layers:
        yield layer
        if isinstance(layer, Residual):
            yield from _walk(layer.body)
            yield from _walk(layer.shortcut)


# --------------------------------------------------------------------------- shape arithmetic
def same_padding(size: int, kernel: int, stride: int) -> tuple[int, int]:
    """TensorFlow's ``same`` padding along one axis: (before, after), extra pixel after.

    Written by hand because PyTorch's ``padding='same'`` only supports stride 1 and pads the
    extra pixel on the other side; this reproduces ``tf.nn.conv2d(padding='SAME')`` exactly.
    """
    out = math.ceil(size / stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


def group_count(channels: int) -> int:
    """GroupNorm groups for ``channels``: the largest divisor of it that is <= 32.

    32 groups is the GroupNorm paper's default (Wu & He, 2018) and what Opacus' examples use;
    channel counts scaled by a width multiplier need not be multiples of 32, hence the divisor.
    """
    return max(g for g in range(1, min(MAX_GROUPS, channels) + 1) if channels % g == 0)


# --------------------------------------------------------------------------- the zoo
#: Builds an image model's layer graph: ``(spec, input shape (H, W, C), n_classes)``.
ImageArchitecture = Callable[[ModelSpec, Shape, int], tuple[Layer, ...]]
#: Builds a text model's layer graph: ``(spec, input shape (L,), n_classes, vocab_size)``.
TextArchitecture = Callable[[ModelSpec, Shape, int, int], tuple[Layer, ...]]

#: ``model.name`` -> the layer graph of an image model, in registration order.
IMAGE_ARCHITECTURES: Registry[str, ImageArchitecture] = Registry(
    "image architectures", key="model.name")
#: ``model.name`` -> the layer graph of a text model (token ids in), in registration order.
TEXT_ARCHITECTURES: Registry[str, TextArchitecture] = Registry(
    "text architectures", key="model.name")


def model_names() -> tuple[str, ...]:
    """Every registered ``model.name`` (image architectures, then text ones), in
    registration order; ``custom`` (:data:`CUSTOM_MODEL`) is not one of them."""
    return (*IMAGE_ARCHITECTURES, *TEXT_ARCHITECTURES)


def _scaled(base: int, width: float) -> int:
    """A channel (or unit) count scaled by the width multiplier, at least 1."""
    return max(1, int(round(base * width)))


def _conv_gn_act(name: str, filters: int, kernel: int = 3, stride: int = 1) -> list[Layer]:
    """Conv (no bias: the GroupNorm's beta replaces it) -> GroupNorm -> activation."""
    return [
        Conv2D(name, filters, kernel, stride, "same", use_bias=False),
        GroupNorm(f"{name}_gn", group_count(filters)),
        Activation(f"{name}_act"),
    ]


@IMAGE_ARCHITECTURES.register("cnn4")
def cnn4(spec: ModelSpec, input_shape: Shape, n_classes: int) -> tuple[Layer, ...]:
    """The MNIST convnet of the TF Privacy and Opacus tutorials.

    conv 16@8x8 stride 2 same -> act -> maxpool 2 stride 1 -> conv 32@4x4 stride 2 valid -> act
    -> maxpool 2 stride 1 -> flatten -> dense 32 -> act -> dense n_classes. The width multiplier
    scales the 16/32 channels and the 32 hidden units. Needs H, W >= 13.
    """
    w = spec.width
    return (
        Conv2D("conv1", _scaled(16, w), 8, 2, "same"),
        Activation("conv1_act"),
        MaxPool2D("pool1", 2, 1),
        Conv2D("conv2", _scaled(32, w), 4, 2, "valid"),
        Activation("conv2_act"),
        MaxPool2D("pool2", 2, 1),
        Flatten("flatten"),
        Dense("fc1", _scaled(32, w)),
        Activation("fc1_act"),
        Dense("fc2", n_classes),
    )


@IMAGE_ARCHITECTURES.register("resnet18")
def resnet18(spec: ModelSpec, input_shape: Shape, n_classes: int) -> tuple[Layer, ...]:
    """ResNet-18 (BasicBlock x [2, 2, 2, 2]) with GroupNorm and a small-image stem.

    Stem: 3x3 conv stride 1 (no max-pool), as for 28-64 px inputs. Stages of 64-128-256-512
    channels (times width), the first block of stages 2-4 strides by 2 with a 1x1 conv +
    GroupNorm shortcut (subsample, then 1x1 conv: the standard projection, see below).
    Block ``layer{s}_{b}``: conv1-gn1-act1-conv2-gn2, add, act2.
    Head: global average pool -> dense n_classes.
    """
    w = spec.width
    c_in = _scaled(64, w)
    layers: list[Layer] = _conv_gn_act("conv1", c_in)
    for stage, (base, stride) in enumerate(((64, 1), (128, 2), (256, 2), (512, 2)), start=1):
        c_out = _scaled(base, w)
        for b in range(2):
            s = stride if b == 0 else 1
            blk = f"layer{stage}_{b}"
            body = (
                Conv2D(f"{blk}_conv1", c_out, 3, s, "same", use_bias=False),
                GroupNorm(f"{blk}_gn1", group_count(c_out)),
                Activation(f"{blk}_act1"),
                Conv2D(f"{blk}_conv2", c_out, 3, 1, "same", use_bias=False),
                GroupNorm(f"{blk}_gn2", group_count(c_out)),
            )
            shortcut: tuple[Layer, ...] = ()
            if s != 1 or c_in != c_out:
                # The usual 1x1 stride-s projection, written as a 1x1 stride-s subsampling
                # (max-pool of size 1) followed by a 1x1 stride-1 conv: the same function, but
                # TF 2.15's oneDNN Conv2DBackpropFilter corrupts memory on a 1x1 kernel with
                # stride 2 (process abort; seen with TF_ENABLE_ONEDNN_OPTS on, the default).
                shortcut = (
                    *([MaxPool2D(f"{blk}_down_pool", 1, s)] if s != 1 else []),
                    Conv2D(f"{blk}_down", c_out, 1, 1, "same", use_bias=False),
                    GroupNorm(f"{blk}_down_gn", group_count(c_out)),
                )
            layers += [Residual(blk, body, shortcut), Activation(f"{blk}_act2")]
            c_in = c_out
    layers += [GlobalAvgPool2D("pool"), Dense("fc", n_classes)]
    return tuple(layers)


VGG_CONFIGS: dict[str, tuple[int | str, ...]] = {
    "vgg11": (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"),
    "vgg16": (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
              512, 512, 512, "M"),
}
"""Simonyan & Zisserman's configurations A (VGG-11) and D (VGG-16); "M" is a 2x2 max-pool."""


def _vgg(config: str) -> Callable[[ModelSpec, Shape, int], tuple[Layer, ...]]:
    def build(spec: ModelSpec, input_shape: Shape, n_classes: int) -> tuple[Layer, ...]:
        w = spec.width
        size = min(input_shape[0], input_shape[1])
        layers: list[Layer] = []
        n_conv = n_pool = 0
        for item in VGG_CONFIGS[config]:
            if item == "M":
                if size // 2 < 2:  # small images: skip a pool that would leave < 2 px
                    continue
                n_pool += 1
                layers.append(MaxPool2D(f"pool{n_pool}", 2, 2))
                size //= 2
            else:
                n_conv += 1
                layers += _conv_gn_act(f"conv{n_conv}", _scaled(int(item), w))
        layers += [
            GlobalAvgPool2D("gap"),
            Dense("fc1", _scaled(256, w)),
            Activation("fc1_act"),
            Dense("fc2", n_classes),
        ]
        return tuple(layers)

    build.__doc__ = (
        f"{config.upper()} for small images: 3x3 convs (no bias) + GroupNorm + activation; a "
        "2x2 max-pool is skipped when it would leave a map below 2 px (so 32 px keeps 2x2, "
        "28 px keeps 3x3); head: global average pool -> dense 256 -> act -> dense n_classes."
    )
    return build


IMAGE_ARCHITECTURES.register("vgg11")(_vgg("vgg11"))
IMAGE_ARCHITECTURES.register("vgg16")(_vgg("vgg16"))


@IMAGE_ARCHITECTURES.register("alexnet")
def alexnet(spec: ModelSpec, input_shape: Shape, n_classes: int) -> tuple[Layer, ...]:
    """AlexNet for small images: 5 convs (64-192-384-256-256, GroupNorm) and 3 dense layers.

    conv1 5x5, pool 3/2, conv2 5x5, pool 3/2, conv3-5 3x3, pool 3/2, flatten, dense 512,
    dense 256, dense n_classes (activation after every conv and hidden dense). All convs are
    stride 1 'same'; a pool is skipped when it would leave a map below 2 px.
    """
    w = spec.width
    size = min(input_shape[0], input_shape[1])
    layers: list[Layer] = []
    n_pool = 0

    def pool() -> None:
        nonlocal size, n_pool
        if (size - 3) // 2 + 1 < 2:
            return
        n_pool += 1
        layers.append(MaxPool2D(f"pool{n_pool}", 3, 2))
        size = (size - 3) // 2 + 1

    layers += _conv_gn_act("conv1", _scaled(64, w), 5)
    pool()
    layers += _conv_gn_act("conv2", _scaled(192, w), 5)
    pool()
    layers += _conv_gn_act("conv3", _scaled(384, w), 3)
    layers += _conv_gn_act("conv4", _scaled(256, w), 3)
    layers += _conv_gn_act("conv5", _scaled(256, w), 3)
    pool()
    layers += [
        Flatten("flatten"),
        Dense("fc1", _scaled(512, w)), Activation("fc1_act"),
        Dense("fc2", _scaled(256, w)), Activation("fc2_act"),
        Dense("fc3", n_classes),
    ]
    return tuple(layers)


SCATTER_J = 2
SCATTER_L = 8
SCATTER_GROUPS = 27
"""Tramer & Boneh's ScatterNet: J=2, L=8 (81 channels per input channel), GroupNorm of 27
groups (their best GroupNorm setting; it divides 81 C for any channel count C)."""


def _scatter_front() -> list[Layer]:
    """ScatterNet J=2, L=8, then a data-independent GroupNorm without weights.

    Tramer & Boneh normalise the scattering output either with GroupNorm (``affine=False``)
    or with per-channel means and variances of the training set, released privately (their
    "BN", whose privacy cost they compose with DP-SGD's). The bench uses GroupNorm: it
    standardises each example with its own statistics only, so it touches no other example
    and costs no privacy (nothing to add to the ledger), and it has no weights to clip.
    """
    return [
        Scattering2D("scatter", SCATTER_J, SCATTER_L),
        GroupNorm("scatter_gn", SCATTER_GROUPS, affine=False),
    ]


@IMAGE_ARCHITECTURES.register("scatter-linear")
def scatter_linear(spec: ModelSpec, input_shape: Shape, n_classes: int) -> tuple[Layer, ...]:
    """ScatterNet + linear (Tramer & Boneh, ICLR 2021, "Differentially Private Learning Needs
    Better Features", Section 3 and their ``ScatterLinear``).

    scattering J=2 L=8 -> GroupNorm(27, no weights) -> flatten -> dense n_classes. The only
    trainable weights are the dense layer's. Grad-CAM, which needs a spatial map, explains the
    scattering output (:meth:`Architecture.gradcam_layer`): the class score's gradient,
    averaged over the H/4 x W/4 positions, weights the 81 C scattering channels. The width
    multiplier and the activation do not apply (there is no hidden layer). Needs H, W >= 8.
    """
    return (*_scatter_front(), Flatten("flatten"), Dense("fc", n_classes))


@IMAGE_ARCHITECTURES.register("scatter-cnn")
def scatter_cnn(spec: ModelSpec, input_shape: Shape, n_classes: int) -> tuple[Layer, ...]:
    """ScatterNet + small CNN (Tramer & Boneh, ICLR 2021; their ``MNIST_CNN`` and
    ``CIFAR10_CNN`` built on scattered inputs, the ``--use_scattering`` rows of their tables).

    scattering J=2 L=8 -> GroupNorm(27, no weights), then the CNN of their table for the input:

    * grey images (their MNIST / Fashion-MNIST CNN): conv 16@3x3 stride 2 -> act ->
      conv 32@3x3 -> act -> flatten -> dense 32 -> act -> dense n_classes;
    * colour images (their CIFAR-10 CNN): conv 64@3x3 -> act -> maxpool 2 stride 2 ->
      conv 64@3x3 -> act -> flatten -> dense n_classes.

    All convolutions are ``same`` (their padding 1 on 3x3 kernels). Their code uses tanh:
    set ``model.activation=tanh`` to follow it. The width multiplier scales the conv channels
    and the hidden units. Grad-CAM targets ``conv2``. Needs H, W >= 8.
    """
    w = spec.width
    layers = _scatter_front()
    if input_shape[-1] == 1:
        layers += [
            Conv2D("conv1", _scaled(16, w), 3, 2, "same"), Activation("conv1_act"),
            Conv2D("conv2", _scaled(32, w), 3, 1, "same"), Activation("conv2_act"),
            Flatten("flatten"),
            Dense("fc1", _scaled(32, w)), Activation("fc1_act"),
            Dense("fc2", n_classes),
        ]
    else:
        layers += [
            Conv2D("conv1", _scaled(64, w), 3, 1, "same"), Activation("conv1_act"),
            MaxPool2D("pool1", 2, 2),
            Conv2D("conv2", _scaled(64, w), 3, 1, "same"), Activation("conv2_act"),
            Flatten("flatten"),
            Dense("fc", n_classes),
        ]
    return tuple(layers)


TEXTCNN_EMBED_DIM = 64
TEXTCNN_FILTERS = 128
TEXTCNN_KERNEL = 5
TEXTCNN_HIDDEN = 64


@TEXT_ARCHITECTURES.register("textcnn")
def textcnn(
    spec: ModelSpec, input_shape: Shape, n_classes: int, vocab_size: int
) -> tuple[Layer, ...]:
    """A small text CNN for IMDB (Kim, 2014, one filter width).

    embedding(vocab, 64) -> conv1d 128@5 valid -> act -> global max pool -> dense 64 -> act ->
    dense n_classes. Width scales the embedding dimension, filters and hidden units.
    """
    w = spec.width
    return (
        Embedding("embedding", vocab_size, _scaled(TEXTCNN_EMBED_DIM, w)),
        Conv1D("conv1", _scaled(TEXTCNN_FILTERS, w), TEXTCNN_KERNEL, 1, "valid"),
        Activation("conv1_act"),
        GlobalMaxPool1D("pool"),
        Dense("fc1", _scaled(TEXTCNN_HIDDEN, w)),
        Activation("fc1_act"),
        Dense("fc2", n_classes),
    )


__all__ = [
    "CONV_TYPES", "CUSTOM_MODEL", "GROUPNORM_EPSILON", "IMAGE_ARCHITECTURES", "LAYER_TYPES",
    "TEXT_ARCHITECTURES", "Activation", "Architecture", "Conv1D", "Conv2D", "Dense",
    "Embedding", "Flatten", "GlobalAvgPool2D", "GlobalMaxPool1D", "GroupNorm", "Layer",
    "MaxPool2D", "Residual", "Scattering2D", "Shape", "Tracer", "architecture",
    "check_layer_names", "conv_output_size", "custom_layers", "explainable", "group_count",
    "model_names", "parse_layers", "same_padding", "scattering_channels",
]


def explainable(spec: ModelSpec) -> bool:
    """True if Grad-CAM applies to ``spec``'s model: a registered image architecture, or a
    custom model with a convolution or a scattering (a spatial map to explain)."""
    if spec.name in IMAGE_ARCHITECTURES:
        return True
    if spec.name != CUSTOM_MODEL or spec.layers is None:
        return False
    return any(isinstance(layer, (*CONV_TYPES, Scattering2D))
               for layer in _walk(parse_layers(spec.layers)))


def custom_layers(spec: ModelSpec, n_classes: int, vocab_size: int | None
                  ) -> tuple[Layer, ...]:
    """The layers of a ``custom`` model (``spec.layers``), resolved for the data."""
    return resolve_layers(parse_layers(spec.layers), n_classes, vocab_size)


def architecture(
    spec: ModelSpec, input_shape: tuple[int, ...], n_classes: int,
    vocab_size: int | None = None,
) -> Architecture:
    """Resolve ``spec`` into a validated :class:`Architecture` (shapes checked).

    Args:
        spec: model name, activation and width.
        input_shape: ``(H, W, C)`` for image models, ``(L,)`` for ``textcnn``.
        n_classes: number of logits, >= 1.
        vocab_size: number of token ids (``textcnn`` only; ids lie in ``[0, vocab_size)``).

    Raises:
        ConfigError: unknown name (the message lists valid names), bad shape, missing
            ``vocab_size`` for ``textcnn``, or an input too small for the network.
    """
    name = spec.name
    if name not in model_names() and name != CUSTOM_MODEL:
        raise ConfigError(f"model.name={name!r} is not known"
                          f"{did_you_mean(name, (*model_names(), CUSTOM_MODEL))}; valid: "
                          f"{', '.join(model_names())}, or {CUSTOM_MODEL} with model.layers")
    shape = tuple(input_shape)
    if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in shape):
        raise ConfigError(f"input_shape={shape!r} must be positive integers")
    if isinstance(n_classes, bool) or not isinstance(n_classes, int) or n_classes < 1:
        raise ConfigError(f"n_classes={n_classes!r} is not valid; valid: an integer >= 1")
    if name == CUSTOM_MODEL:
        layers = custom_layers(spec, n_classes, vocab_size)
    elif name in TEXT_ARCHITECTURES:
        if len(shape) != 1:
            raise ConfigError(
                f"model {name!r} takes token ids: input_shape must be (L,), got {shape}"
            )
        if vocab_size is None or isinstance(vocab_size, bool) or vocab_size < 1:
            raise ConfigError(
                f"model {name!r} needs vocab_size (an integer >= 1), got {vocab_size!r}"
            )
        layers = TEXT_ARCHITECTURES[name](spec, shape, n_classes, int(vocab_size))
    else:
        if len(shape) != 3:
            raise ConfigError(
                f"model {name!r} takes images: input_shape must be (H, W, C), got {shape}"
            )
        layers = IMAGE_ARCHITECTURES[name](spec, shape, n_classes)
    arch = Architecture(name, shape, n_classes, ActivationSpec.from_model_spec(spec), layers)
    arch.trace()  # validates sizes and names now, with a clear message
    check_layer_names(arch, spec.freeze, "model.freeze")
    check_layer_names(arch, spec.pretrained_skip, "model.pretrained_skip")
    return arch


def check_layer_names(arch: Architecture, names: Iterable[str], key: str) -> None:
    """ConfigError naming the first of ``names`` that is not a layer of ``arch`` with weights."""
    with_weights = arch.weight_kinds()
    for name in names:
        if name not in with_weights:
            raise ConfigError(f"{key}: {name!r} is not a layer with weights of model "
                              f"{arch.name!r}; valid: {', '.join(with_weights)}")
