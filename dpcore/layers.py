"""The layer descriptions of the model zoo and the parser of a custom model's ``model.layers``.

:mod:`dpcore.architectures` composes these descriptions into architectures; both backends
interpret them (see its conventions). This module imports nothing of the bench but
:mod:`dpcore.errors`, so that :mod:`dpcore.config` can validate ``model.layers`` when a config
is read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dpcore.errors import ConfigError, PrivacyConfigError

GROUPNORM_EPSILON = 1e-5

#: Why a layer that mixes the examples of a batch is refused (``model.layers``, and the
#: ``model.batch_norm``-like keys of :data:`dpcore.config.REFUSED_KEYS`).
BATCHNORM_REASON = (
    "the model's normalisation layers are fixed to GroupNorm, not an option: BatchNorm mixes "
    "the examples of a batch, so one example's gradient depends on the others and "
    "per-example clipping no longer bounds its influence; the reported epsilon would be false"
)


# --------------------------------------------------------------------------- layer descriptions
@dataclass(frozen=True)
class Conv2D:
    """2-D convolution on ``(H, W, C)`` maps; kernel ``kernel x kernel``, TF-style padding."""

    name: str
    filters: int
    kernel: int
    stride: int = 1
    padding: str = "same"
    use_bias: bool = True


@dataclass(frozen=True)
class Conv1D:
    """1-D convolution on ``(L, C)`` sequences; TF-style padding."""

    name: str
    filters: int
    kernel: int
    stride: int = 1
    padding: str = "valid"
    use_bias: bool = True


@dataclass(frozen=True)
class GroupNorm:
    """Group normalisation over the channel axis.

    With ``affine`` (the default) it has learned per-channel gamma and beta; without, it only
    standardises each group of each example (no weights), as Tramer & Boneh's ScatterNet
    models do (``nn.GroupNorm(..., affine=False)``).
    """

    name: str
    groups: int
    epsilon: float = GROUPNORM_EPSILON
    affine: bool = True


@dataclass(frozen=True)
class Scattering2D:
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


@dataclass(frozen=True)
class Activation:
    """The architecture's activation function (relu, tanh or tempered sigmoid)."""

    name: str


@dataclass(frozen=True)
class MaxPool2D:
    """Max-pooling, ``valid`` padding (no padding)."""

    name: str
    pool: int
    stride: int


@dataclass(frozen=True)
class Flatten:
    """Flatten to ``(features,)`` in channels-last order."""

    name: str


@dataclass(frozen=True)
class GlobalAvgPool2D:
    """Mean over H and W: ``(H, W, C) -> (C,)``."""

    name: str


@dataclass(frozen=True)
class GlobalMaxPool1D:
    """Max over the sequence: ``(L, C) -> (C,)``."""

    name: str


@dataclass(frozen=True)
class Dense:
    """Fully connected layer ``(in,) -> (units,)``; no activation of its own."""

    name: str
    units: int
    use_bias: bool = True


@dataclass(frozen=True)
class Embedding:
    """Token embedding ``(L,) int -> (L, dim)``."""

    name: str
    vocab_size: int
    dim: int


@dataclass(frozen=True)
class Residual:
    """``body(x) + shortcut(x)`` (identity shortcut when ``shortcut`` is empty).

    ``name`` names the sum (the block's output before any following activation).
    """

    name: str
    body: tuple[Layer, ...]
    shortcut: tuple[Layer, ...] = ()


Layer = (
    Conv2D | Conv1D | GroupNorm | Activation | MaxPool2D | Flatten | GlobalAvgPool2D
    | GlobalMaxPool1D | Dense | Embedding | Residual | Scattering2D
)

# --------------------------------------------------------------------------- custom models
#: ``model.layers`` type names -> layer description (the names the YAML uses).
LAYER_TYPES: dict[str, type] = {
    cls.__name__: cls for cls in (
        Conv2D, Conv1D, GroupNorm, Activation, MaxPool2D, Flatten, GlobalAvgPool2D,
        GlobalMaxPool1D, Dense, Embedding, Residual, Scattering2D)
}


def register_layer_type(cls: type) -> type:
    """Class decorator: make ``cls`` (a frozen dataclass whose first field is ``name``) a
    ``model.layers`` type, named by its class name in the YAML. Its shape rule
    (:func:`dpcore.architectures.register_shape_rule`) and one builder per backend
    (``register_layer_builder`` in ``tfpipe.models`` / ``torchpipe.models``) make it buildable."""
    LAYER_TYPES[cls.__name__] = cls
    return cls


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
        raise ConfigError(f"{where}: layer type {kind!r} is not known; valid: "
                          f"{', '.join(LAYER_TYPES)}")
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


