"""The layer types of the model zoo and of a custom model's ``model.layers``: each one frozen
dataclass, registered in :data:`LAYER_TYPES`, that describes a layer and states its rules.

A layer type is a subclass of :class:`Layer` decorated with ``@LAYER_TYPES.register()``
(its ``model.layers`` name is its class name). It declares, on the class, everything the core
needs: its per-example output shape (:meth:`Layer.output_shape`, channels last), its weights
in the neutral layout (:meth:`Layer.weight_shapes`) and their kind (:meth:`Layer.weight_kind`,
the layout of :mod:`dpcore.weights`). Each backend registers one builder per type
(``LAYER_BUILDERS.register`` in ``tfpipe.models`` / ``torchpipe.models``); nothing else is
written per layer type. :mod:`dpcore.architectures` composes these descriptions into
architectures.

This module imports nothing of the bench but :mod:`dpcore.errors`, :mod:`dpcore.registry` and
:mod:`dpcore.suggest`, so that :mod:`dpcore.config` can validate ``model.layers`` when a
config is read.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dpcore.errors import ConfigError, PrivacyConfigError
from dpcore.registry import Registry
from dpcore.suggest import did_you_mean

GROUPNORM_EPSILON = 1e-5

#: Why a layer that mixes the examples of a batch is refused (``model.layers``, and the
#: ``model.batch_norm``-like keys of :data:`dpcore.config.REFUSED_KEYS`).
BATCHNORM_REASON = (
    "the model's normalisation layers are fixed to GroupNorm, not an option: BatchNorm mixes "
    "the examples of a batch, so one example's gradient depends on the others and "
    "per-example clipping no longer bounds its influence; the reported epsilon would be false"
)

Shape = tuple[int, ...]


# --------------------------------------------------------------------------- shape arithmetic
def conv_output_size(size: int, kernel: int, stride: int, padding: str) -> int:
    """Output length of a convolution/pooling along one axis (TF semantics)."""
    if padding == "same":
        return math.ceil(size / stride)
    if padding == "valid":
        return (size - kernel) // stride + 1
    raise ConfigError(f"padding={padding!r} is not known; valid: same, valid")


def scattering_channels(J: int, L: int) -> int:
    """Scattering coefficients per input channel of a 2nd-order 2-D scattering:
    ``1 + J L + L**2 J (J - 1) / 2`` (81 for J=2, L=8; kymatio's count)."""
    return 1 + J * L + L * L * J * (J - 1) // 2


@dataclass(frozen=True)
class Tracer:
    """What a shape rule may use besides its layer: the model's name and input shape (for
    messages), the shapes traced so far, and :meth:`trace` for nested layers (a
    :class:`Residual`'s branches).

    Attributes:
        model: the architecture's name.
        input_shape: the model's per-example input shape.
        shapes: layer name -> (input shape, output shape), filled by :meth:`trace`.
    """

    model: str
    input_shape: Shape
    shapes: dict[str, tuple[Shape, Shape]]

    def trace(self, layers: tuple[Layer, ...], shape: Shape) -> Shape:
        """The output shape of ``layers`` applied to ``shape``; records every layer's shapes.

        Raises:
            ConfigError: a layer name used twice, or a shape a layer's rule refuses.
        """
        for layer in layers:
            if layer.name in self.shapes:
                raise ConfigError(f"model {self.model!r}: layer name {layer.name!r} is "
                                  "used twice")
            out = layer.output_shape(shape, self)
            self.shapes[layer.name] = (shape, out)
            shape = out
        return shape

    def need_rank(self, layer: Layer, shape: Shape, rank: int) -> None:
        """Refuse an input of ``layer`` that is not of rank ``rank`` per example.

        Raises:
            ConfigError: naming the layer, the shape and the model's input shape.
        """
        if len(shape) != rank:
            raise ConfigError(
                f"model {self.model!r}: layer {layer.name!r} needs a rank-{rank} input per "
                f"example, got shape {shape} (input_shape={tuple(self.input_shape)})"
            )

    def too_small(self, layer: Layer, shape: Shape) -> ConfigError:
        """The error for an input map too small for ``layer`` (to raise)."""
        return ConfigError(
            f"input_shape={tuple(self.input_shape)} is too small for model {self.model!r}: "
            f"layer {layer.name!r} receives a map of shape {shape}; use a larger image size "
            "(data.image_size, e.g. --set data.image_size=16)"
        )


# --------------------------------------------------------------------------- layer types
class Layer:
    """Base of the layer descriptions: a frozen dataclass whose first field is ``name`` (unique
    in its model; a weight's neutral key is ``"<name>.<parameter>"``).

    A subclass implements :meth:`output_shape`; one with weights also :meth:`weight_shapes`
    and :meth:`weight_kind`.
    """

    name: str

    def output_shape(self, shape: Shape, t: Tracer) -> Shape:
        """The per-example output shape (channels last) for input ``shape``.

        Raises:
            ConfigError: an input this layer cannot take (:meth:`Tracer.need_rank`,
                :meth:`Tracer.too_small`).
        """
        raise NotImplementedError

    def weight_shapes(self, in_shape: Shape) -> dict[str, Shape]:
        """``{parameter: shape}`` of this layer's weights for input ``in_shape``, in the
        neutral layout (:mod:`dpcore.weights`) and a fixed order; empty: no weights."""
        return {}

    def weight_kind(self) -> str | None:
        """The neutral weight kind of this layer (``conv2d``, ``dense``, ...; the rows of
        :mod:`dpcore.weights`), None when it has no weights."""
        return None


def _layer_type(cls: type) -> type[Layer]:
    """Refuse a class that cannot be a layer type (what :data:`LAYER_TYPES` stores)."""
    if not (isinstance(cls, type) and issubclass(cls, Layer) and dataclasses.is_dataclass(cls)
            and cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
            and dataclasses.fields(cls)[0].name == "name"):
        raise TypeError(f"{cls!r} is not a layer type; valid: a frozen dataclass subclassing "
                        "dpcore.layers.Layer whose first field is name")
    return cls


#: ``model.layers`` type name (the class name) -> layer type, in registration order.
LAYER_TYPES: Registry[str, type[Layer]] = Registry(
    "layer types", key="model.layers type", key_of=lambda cls: cls.__name__,
    make=_layer_type)


def _bias(out: dict[str, Shape], layer: Conv2D | Conv1D | Dense, units: int
          ) -> dict[str, Shape]:
    if layer.use_bias:
        out["bias"] = (units,)
    return out


@LAYER_TYPES.register()
@dataclass(frozen=True)
class Conv2D(Layer):
    """2-D convolution on ``(H, W, C)`` maps; kernel ``kernel x kernel``, TF-style padding."""

    name: str
    filters: int
    kernel: int
    stride: int = 1
    padding: str = "same"
    use_bias: bool = True

    def output_shape(self, shape: Shape, t: Tracer) -> Shape:
        t.need_rank(self, shape, 3)
        h, w = (conv_output_size(n, self.kernel, self.stride, self.padding) for n in shape[:2])
        if h < 1 or w < 1:
            raise t.too_small(self, shape)
        return (h, w, self.filters)

    def weight_shapes(self, in_shape: Shape) -> dict[str, Shape]:
        return _bias({"kernel": (self.kernel, self.kernel, in_shape[-1], self.filters)},
                     self, self.filters)

    def weight_kind(self) -> str | None:
        return "conv2d"


@LAYER_TYPES.register()
@dataclass(frozen=True)
class Conv1D(Layer):
    """1-D convolution on ``(L, C)`` sequences; TF-style padding."""

    name: str
    filters: int
    kernel: int
    stride: int = 1
    padding: str = "valid"
    use_bias: bool = True

    def output_shape(self, shape: Shape, t: Tracer) -> Shape:
        t.need_rank(self, shape, 2)
        n = conv_output_size(shape[0], self.kernel, self.stride, self.padding)
        if n < 1:
            raise t.too_small(self, shape)
        return (n, self.filters)

    def weight_shapes(self, in_shape: Shape) -> dict[str, Shape]:
        return _bias({"kernel": (self.kernel, in_shape[-1], self.filters)}, self,
                     self.filters)

    def weight_kind(self) -> str | None:
        return "conv1d"


@LAYER_TYPES.register()
@dataclass(frozen=True)
class GroupNorm(Layer):
    """Group normalisation over the channel axis.

    With ``affine`` (the default) it has learned per-channel gamma and beta; without, it only
    standardises each group of each example (no weights), as Tramer & Boneh's ScatterNet
    models do (``nn.GroupNorm(..., affine=False)``).
    """

    name: str
    groups: int
    epsilon: float = GROUPNORM_EPSILON
    affine: bool = True

    def output_shape(self, shape: Shape, t: Tracer) -> Shape:
        if shape[-1] % self.groups:
            raise ConfigError(
                f"model {t.model!r}: layer {self.name!r} has {self.groups} groups, "
                f"which do not divide its {shape[-1]} channels"
            )
        return shape

    def weight_shapes(self, in_shape: Shape) -> dict[str, Shape]:
        return {"gamma": (in_shape[-1],), "beta": (in_shape[-1],)} if self.affine else {}

    def weight_kind(self) -> str | None:
        return "groupnorm" if self.affine else None


@LAYER_TYPES.register()
@dataclass(frozen=True)
class Activation(Layer):
    """The architecture's activation function (relu, tanh or tempered sigmoid)."""

    name: str

    def output_shape(self, shape: Shape, t: Tracer) -> Shape:
        return shape


@LAYER_TYPES.register()
@dataclass(frozen=True)
class MaxPool2D(Layer):
    """Max-pooling, ``valid`` padding (no padding)."""

    name: str
    pool: int
    stride: int

    def output_shape(self, shape: Shape, t: Tracer) -> Shape:
        t.need_rank(self, shape, 3)
        h, w = (conv_output_size(n, self.pool, self.stride, "valid") for n in shape[:2])
        if h < 1 or w < 1:
            raise t.too_small(self, shape)
        return (h, w, shape[2])


@LAYER_TYPES.register()
@dataclass(frozen=True)
class Flatten(Layer):
    """Flatten to ``(features,)`` in channels-last order."""

    name: str

    def output_shape(self, shape: Shape, t: Tracer) -> Shape:
        return (math.prod(shape),)


@LAYER_TYPES.register()
@dataclass(frozen=True)
class GlobalAvgPool2D(Layer):
    """Mean over H and W: ``(H, W, C) -> (C,)``."""

    name: str

    def output_shape(self, shape: Shape, t: Tracer) -> Shape:
        t.need_rank(self, shape, 3)
        return (shape[2],)


@LAYER_TYPES.register()
@dataclass(frozen=True)
class GlobalMaxPool1D(Layer):
    """Max over the sequence: ``(L, C) -> (C,)``."""

    name: str

    def output_shape(self, shape: Shape, t: Tracer) -> Shape:
        t.need_rank(self, shape, 2)
        return (shape[1],)


@LAYER_TYPES.register()
@dataclass(frozen=True)
class Dense(Layer):
    """Fully connected layer ``(in,) -> (units,)``; no activation of its own."""

    name: str
    units: int
    use_bias: bool = True

    def output_shape(self, shape: Shape, t: Tracer) -> Shape:
        t.need_rank(self, shape, 1)
        return (self.units,)

    def weight_shapes(self, in_shape: Shape) -> dict[str, Shape]:
        return _bias({"kernel": (in_shape[-1], self.units)}, self, self.units)

    def weight_kind(self) -> str | None:
        return "dense"


@LAYER_TYPES.register()
@dataclass(frozen=True)
class Embedding(Layer):
    """Token embedding ``(L,) int -> (L, dim)``."""

    name: str
    vocab_size: int
    dim: int

    def output_shape(self, shape: Shape, t: Tracer) -> Shape:
        t.need_rank(self, shape, 1)
        return (shape[0], self.dim)

    def weight_shapes(self, in_shape: Shape) -> dict[str, Shape]:
        return {"embeddings": (self.vocab_size, self.dim)}

    def weight_kind(self) -> str | None:
        return "embedding"


@LAYER_TYPES.register()
@dataclass(frozen=True)
class Residual(Layer):
    """``body(x) + shortcut(x)`` (identity shortcut when ``shortcut`` is empty).

    ``name`` names the sum (the block's output before any following activation).
    """

    name: str
    body: tuple[Layer, ...]
    shortcut: tuple[Layer, ...] = ()

    def output_shape(self, shape: Shape, t: Tracer) -> Shape:
        body = t.trace(self.body, shape)
        short = t.trace(self.shortcut, shape)
        if body != short:
            raise ConfigError(
                f"model {t.model!r}: residual {self.name!r} adds shapes {body} and {short}"
            )
        return body


@LAYER_TYPES.register()
@dataclass(frozen=True)
class Scattering2D(Layer):
    """A fixed (never trained) 2-D wavelet scattering transform (Bruna & Mallat, 2013).

    Computed by kymatio (``kymatio.torch.Scattering2D`` / ``kymatio.tensorflow.Scattering2D``,
    the same filters and algorithm in both frameworks) on each input channel separately:
    ``(H, W, C) -> (H // 2**J, W // 2**J, C * K)`` with ``K = scattering_channels(J, L)``
    coefficients per input channel (81 for J=2, L=8: order 0, then 16 of order 1, then 64 of
    order 2, in kymatio's order). Output channel ``c * K + k`` is coefficient ``k`` of input
    channel ``c`` in both frameworks. It has no weights: it is not clipped, noised or
    trained, and gradients never need to flow through it (it is the first layer).
    """

    name: str
    J: int = 2
    L: int = 8

    def output_shape(self, shape: Shape, t: Tracer) -> Shape:
        t.need_rank(self, shape, 3)
        if min(shape[:2]) < 2 ** (self.J + 1):
            # kymatio reflect-pads by up to 2**J px per side, which needs a larger map
            raise ConfigError(
                f"input_shape={tuple(t.input_shape)} is too small for model {t.model!r}: its "
                f"scattering (J={self.J}) needs images of at least "
                f"{2 ** (self.J + 1)}x{2 ** (self.J + 1)} px (e.g. --set data.image_size=16)"
            )
        return (shape[0] // 2 ** self.J, shape[1] // 2 ** self.J,
                shape[2] * scattering_channels(self.J, self.L))


# --------------------------------------------------------------------------- custom models
#: Layer types refused with the privacy reason (compared lower-case without ``_``/``-``).
REFUSED_LAYER_TYPES = frozenset({
    "batchnorm", "batchnorm1d", "batchnorm2d", "batchnorm3d", "batchnormalization",
    "syncbatchnorm", "batchnormalisation",
})

#: Field value meaning "resolved when the model is built" (``Dense.units`` -> number of
#: classes, ``Embedding.vocab_size`` -> the data set's vocabulary).
_FROM_DATA = -1


def parse_layers(raw: Any, where: str = "model.layers") -> tuple[Layer, ...]:
    """Parse a ``model.layers`` list into layer descriptions (one-line ConfigError otherwise).

    Each item is a mapping with ``type`` (a :data:`LAYER_TYPES` name), an optional ``name``
    (default ``<type in lower case><k>``, k counting that type from 1) and the fields of that
    layer's description, e.g. ``{type: Conv2D, filters: 16, kernel: 3, stride: 2,
    padding: same}``; a ``Residual`` holds ``body`` and ``shortcut`` lists of the same form.
    A ``Dense`` without ``units`` gets one unit per class, an ``Embedding`` without
    ``vocab_size`` the data set's vocabulary. ``Activation`` layers apply ``model.activation``.

    Raises:
        PrivacyConfigError: a BatchNorm layer (it mixes the examples of a batch).
        ConfigError: anything else that is not a valid layer, naming it.
    """
    counts: dict[str, int] = {}
    return _parse(raw, where, counts)


def _parse(raw: Any, where: str, counts: dict[str, int]) -> tuple[Layer, ...]:
    if not isinstance(raw, list | tuple) or not raw:
        raise ConfigError(f"{where}={raw!r} is not valid; valid: a non-empty list of layers "
                          "such as {type: Conv2D, filters: 16, kernel: 3}")
    return tuple(_parse_one(item, f"{where}[{i}]", counts) for i, item in enumerate(raw))


def _parse_one(item: Any, where: str, counts: dict[str, int]) -> Layer:
    if not isinstance(item, Mapping) or "type" not in item:
        raise ConfigError(f"{where}={item!r} is not valid; valid: a mapping with a 'type' "
                          f"({', '.join(LAYER_TYPES)})")
    kind = item["type"]
    if str(kind).lower().replace("_", "").replace("-", "") in REFUSED_LAYER_TYPES:
        raise PrivacyConfigError(f"{where}: layer type {kind!r} is refused: {BATCHNORM_REASON}; "
                                 "use GroupNorm")
    cls = LAYER_TYPES.get(str(kind))
    if cls is None:
        raise ConfigError(f"{where}: layer type {kind!r} is not known"
                          f"{did_you_mean(kind, LAYER_TYPES)}; valid: {', '.join(LAYER_TYPES)}")
    specs = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(item) - set(specs) - {"type"})
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)} for {kind}; valid: "
                          f"{', '.join(k for k in specs)}")
    counts[kind] = counts.get(kind, 0) + 1
    values: dict[str, Any] = {"name": item.get("name", f"{str(kind).lower()}{counts[kind]}")}
    if not isinstance(values["name"], str) or not values["name"]:
        raise ConfigError(f"{where}: name={values['name']!r} is not valid; valid: a non-empty "
                          "string")
    for key, f in specs.items():
        if key == "name":
            continue
        required = f.default is dataclasses.MISSING
        if key not in item:
            if required and (cls, key) in ((Dense, "units"), (Embedding, "vocab_size")):
                values[key] = _FROM_DATA
            elif required:
                raise ConfigError(f"{where}: {kind} needs {key!r}")
            continue
        values[key] = _field_value(item[key], f, f"{where}.{key}", counts)
    return cls(**values)


def _field_value(value: Any, f: dataclasses.Field[Any], where: str,
                 counts: dict[str, int]) -> Any:
    """One checked field value (by the field's declared type)."""
    kind = str(f.type)
    if "Layer" in kind:  # Residual.body / shortcut
        return () if value in (None, []) and f.name == "shortcut" else _parse(value, where,
                                                                               counts)
    if kind == "bool":
        if not isinstance(value, bool):
            raise ConfigError(f"{where}={value!r} is not valid; valid: true or false")
        return value
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{where}={value!r} is not valid; valid: an integer >= 1")
        return value
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise ConfigError(f"{where}={value!r} is not valid; valid: a number > 0")
        return float(value)
    if f.name == "padding" and value not in ("same", "valid"):
        raise ConfigError(f"{where}={value!r} is not valid; valid: same, valid")
    return value


def resolve_layers(layers: tuple[Layer, ...], n_classes: int, vocab_size: int | None
                   ) -> tuple[Layer, ...]:
    """``layers`` with the values taken from the data filled in (see :func:`parse_layers`)."""
    out: list[Layer] = []
    for layer in layers:
        if isinstance(layer, Dense) and layer.units == _FROM_DATA:
            layer = dataclasses.replace(layer, units=n_classes)
        elif isinstance(layer, Embedding) and layer.vocab_size == _FROM_DATA:
            if vocab_size is None or vocab_size < 1:
                raise ConfigError(f"layer {layer.name!r} (Embedding) needs vocab_size: give it, "
                                  "or train on a text data set")
            layer = dataclasses.replace(layer, vocab_size=vocab_size)
        elif isinstance(layer, Residual):
            layer = dataclasses.replace(
                layer, body=resolve_layers(layer.body, n_classes, vocab_size),
                shortcut=resolve_layers(layer.shortcut, n_classes, vocab_size))
        out.append(layer)
    return tuple(out)


