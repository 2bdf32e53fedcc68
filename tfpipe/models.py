"""The Keras model zoo: interprets :mod:`dpcore.architectures` with standard Keras 2 layers.

Every model is a functional ``tf.keras.Model`` taking NHWC float32 images (or ``[N, L]`` int
token ids for ``textcnn``) and returning logits (no softmax). Layer names equal the neutral
weight keys' prefixes, so :func:`get_weights` / :func:`set_weights` speak the layout of
:mod:`dpcore.weights`, shared with ``torchpipe.models``.

Only standard layers are used (Conv2D, MaxPool2D, Dense, GroupNormalization, Embedding,
Conv1D, GlobalAveragePooling2D, GlobalMaxPooling1D, Flatten, Add) plus two parameter-free
layers, :class:`TemperedSigmoid` and :class:`Scattering` (kymatio's scattering transform),
so TF Privacy's vectorised per-example gradients work. Each layer description type has one
builder, registered with ``@LAYER_BUILDERS.register(LayerType)`` in :data:`LAYER_BUILDERS`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf
from kymatio.tensorflow import Scattering2D as KymatioScattering2D

from dpcore import architectures as A
from dpcore.activations import ActivationSpec
from dpcore.config import ModelSpec
from dpcore.errors import ConfigError
from dpcore.registry import Registry
from dpcore.weights import Weights, check_weights, init_weights

keras = tf.keras

#: The start of TensorFlow's warning for ``tf.cast`` of a complex tensor to a real dtype.
COMPLEX_CAST_WARNING = "You are casting an input of type complex64 to an incompatible dtype"


class _ScatteringGradientCastFilter(logging.Filter):
    """Drops TensorFlow's complex-to-real cast warning, which every gradient through kymatio's
    scattering logs dozens of times per call (1,620 of the 1,776 lines of a grid's log).

    kymatio casts the real images to complex64 before its FFT; the gradient of that cast
    (TensorFlow's ``_CastGrad``) casts the complex gradient back to float32, keeping the real
    part, which is the exact gradient with respect to a real input. The bench's models have
    no other complex tensor, so the warning can only be this one. Hand-written: neither
    kymatio nor TensorFlow offers a switch for it.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.getMessage()).startswith(COMPLEX_CAST_WARNING)


tf.get_logger().addFilter(_ScatteringGradientCastFilter())


@keras.utils.register_keras_serializable(package="dpcompare")
class TemperedSigmoid(keras.layers.Layer):
    """``scale * sigmoid(inverse_temperature * x) - offset`` (Papernot et al., 2021)."""

    def __init__(
        self, scale: float = 2.0, inverse_temperature: float = 2.0, offset: float = 1.0,
        **kwargs: object,
    ) -> None:
        super().__init__(**kwargs)
        self.scale = float(scale)
        self.inverse_temperature = float(inverse_temperature)
        self.offset = float(offset)

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        """Apply the tempered sigmoid elementwise."""
        return self.scale * tf.sigmoid(self.inverse_temperature * inputs) - self.offset

    def get_config(self) -> dict[str, object]:
        """Serialisable constructor arguments."""
        return {
            **super().get_config(), "scale": self.scale,
            "inverse_temperature": self.inverse_temperature, "offset": self.offset,
        }


@keras.utils.register_keras_serializable(package="dpcompare")
class Scattering(keras.layers.Layer):
    """kymatio's 2-D scattering on NHWC images: ``[N, H, W, C] -> [N, H/2^J, W/2^J, C K]``.

    kymatio scatters channels-first (``[..., H, W] -> [..., K, h, w]``); this layer moves the
    channels first, scatters, merges ``(C, K)`` into ``C K`` channels (index ``c K + k``, the
    order ``torchpipe.models.Scattering`` produces) and moves them last. It has no weights
    (kymatio's filters are constants), so it is neither trained nor clipped.
    """

    def __init__(self, J: int = 2, L: int = 8, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.J = int(J)
        self.L = int(L)
        self._scattering: KymatioScattering2D | None = None

    def build(self, input_shape: tf.TensorShape) -> None:
        """Make kymatio's filters for the (static) image size."""
        h, w = int(input_shape[1]), int(input_shape[2])
        self._scattering = KymatioScattering2D(J=self.J, shape=(h, w), L=self.L)
        super().build(input_shape)

    def compute_output_shape(self, input_shape: tf.TensorShape) -> tf.TensorShape:
        """``[N, H // 2^J, W // 2^J, C K]``."""
        n, h, w, c = tf.TensorShape(input_shape).as_list()
        return tf.TensorShape([n, h // 2 ** self.J, w // 2 ** self.J,
                               c * A.scattering_channels(self.J, self.L)])

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        """Scatter each channel of each image (float32)."""
        assert self._scattering is not None  # set by build()
        _, h, w, c = self.compute_output_shape(inputs.shape).as_list()
        s = self._scattering.scattering(tf.transpose(tf.cast(inputs, tf.float32), [0, 3, 1, 2]))
        s = tf.transpose(tf.reshape(s, [-1, c, h, w]), [0, 2, 3, 1])
        return tf.ensure_shape(s, [None, h, w, c])

    def get_config(self) -> dict[str, object]:
        """Serialisable constructor arguments."""
        return {**super().get_config(), "J": self.J, "L": self.L}


def activation_layer(spec: ActivationSpec, name: str) -> keras.layers.Layer:
    """The Keras layer computing ``spec``."""
    if spec.kind == "tempered_sigmoid":
        return TemperedSigmoid(spec.scale, spec.inverse_temperature, spec.offset, name=name)
    return keras.layers.Activation(spec.kind, name=name)


@dataclass(frozen=True)
class KerasContext:
    """What a Keras layer builder may use besides its layer: the architecture's activation,
    and :meth:`apply` to build nested layers (a :class:`~dpcore.layers.Residual`'s branches)."""

    activation: ActivationSpec

    def apply(self, layers: tuple[A.Layer, ...], x: tf.Tensor) -> tf.Tensor:
        """Apply the described layers to the symbolic tensor ``x`` (functional API)."""
        for layer in layers:
            x = LAYER_BUILDERS[type(layer)](layer, x, self)
        return x


#: Builds one described layer on the symbolic tensor ``x``: ``builder(layer, x, ctx) -> y``.
KerasBuilder = Callable[[Any, tf.Tensor, KerasContext], tf.Tensor]

#: Layer type (:data:`dpcore.layers.LAYER_TYPES`) -> its Keras builder (exact types).
LAYER_BUILDERS: Registry[type, KerasBuilder] = Registry("Keras builders", key="layer type")
#: Layer type -> why the fast DP engine (:mod:`tfpipe.fast`) has no per-example rule
#: for what its builder makes: a declaration that runs of a model with it use the reference
#: engine (:func:`dpcore.backend.choose_engine` finds the module itself and records it).
FAST_FALLBACKS: Registry[type, str] = Registry("Keras fast-engine fallbacks", key="layer type")


@LAYER_BUILDERS.register(A.Conv2D)
def _conv2d(layer: A.Conv2D, x: tf.Tensor, ctx: KerasContext) -> tf.Tensor:
    return keras.layers.Conv2D(layer.filters, layer.kernel, layer.stride, padding=layer.padding,
                               use_bias=layer.use_bias, name=layer.name)(x)


@LAYER_BUILDERS.register(A.Conv1D)
def _conv1d(layer: A.Conv1D, x: tf.Tensor, ctx: KerasContext) -> tf.Tensor:
    return keras.layers.Conv1D(layer.filters, layer.kernel, layer.stride, padding=layer.padding,
                               use_bias=layer.use_bias, name=layer.name)(x)


@LAYER_BUILDERS.register(A.GroupNorm)
def _group_norm(layer: A.GroupNorm, x: tf.Tensor, ctx: KerasContext) -> tf.Tensor:
    return keras.layers.GroupNormalization(groups=layer.groups, axis=-1, epsilon=layer.epsilon,
                                           center=layer.affine, scale=layer.affine,
                                           name=layer.name)(x)


@LAYER_BUILDERS.register(A.Scattering2D)
def _scattering(layer: A.Scattering2D, x: tf.Tensor, ctx: KerasContext) -> tf.Tensor:
    return Scattering(layer.J, layer.L, name=layer.name)(x)


@LAYER_BUILDERS.register(A.Activation)
def _activation(layer: A.Activation, x: tf.Tensor, ctx: KerasContext) -> tf.Tensor:
    return activation_layer(ctx.activation, layer.name)(x)


@LAYER_BUILDERS.register(A.MaxPool2D)
def _max_pool2d(layer: A.MaxPool2D, x: tf.Tensor, ctx: KerasContext) -> tf.Tensor:
    return keras.layers.MaxPool2D(layer.pool, layer.stride, padding="valid", name=layer.name)(x)


@LAYER_BUILDERS.register(A.Flatten)
def _flatten(layer: A.Flatten, x: tf.Tensor, ctx: KerasContext) -> tf.Tensor:
    return keras.layers.Flatten(name=layer.name)(x)


@LAYER_BUILDERS.register(A.GlobalAvgPool2D)
def _global_avg_pool2d(layer: A.GlobalAvgPool2D, x: tf.Tensor, ctx: KerasContext
                       ) -> tf.Tensor:
    return keras.layers.GlobalAveragePooling2D(name=layer.name)(x)


@LAYER_BUILDERS.register(A.GlobalMaxPool1D)
def _global_max_pool1d(layer: A.GlobalMaxPool1D, x: tf.Tensor, ctx: KerasContext
                       ) -> tf.Tensor:
    return keras.layers.GlobalMaxPooling1D(name=layer.name)(x)


@LAYER_BUILDERS.register(A.Dense)
def _dense(layer: A.Dense, x: tf.Tensor, ctx: KerasContext) -> tf.Tensor:
    return keras.layers.Dense(layer.units, use_bias=layer.use_bias, name=layer.name)(x)


@LAYER_BUILDERS.register(A.Embedding)
def _embedding(layer: A.Embedding, x: tf.Tensor, ctx: KerasContext) -> tf.Tensor:
    return keras.layers.Embedding(layer.vocab_size, layer.dim, name=layer.name)(x)


@LAYER_BUILDERS.register(A.Residual)
def _residual(layer: A.Residual, x: tf.Tensor, ctx: KerasContext) -> tf.Tensor:
    body = ctx.apply(layer.body, x)
    short = ctx.apply(layer.shortcut, x) if layer.shortcut else x
    return keras.layers.Add(name=layer.name)([body, short])


def from_architecture(arch: A.Architecture) -> keras.Model:
    """Build the Keras model for a resolved :class:`~dpcore.architectures.Architecture`."""
    dtype = "int32" if arch.is_text else "float32"
    inputs = keras.Input(shape=arch.input_shape, dtype=dtype, name="input")
    outputs = KerasContext(arch.activation).apply(arch.layers, inputs)
    return keras.Model(inputs, outputs, name=arch.name)


def build_model(
    spec: ModelSpec, input_shape: tuple[int, ...], n_classes: int, seed: int | None = None,
    *, vocab_size: int | None = None,
) -> keras.Model:
    """Build the named model as a Keras functional model that outputs logits.

    Args:
        spec: model name, activation (with tempered-sigmoid parameters) and width.
        input_shape: ``(H, W, C)`` for images (NHWC float32 input), ``(L,)`` for ``textcnn``
            (``[N, L]`` int token ids).
        n_classes: number of logits.
        seed: if given, the weights are :func:`dpcore.weights.init_weights` of this seed, the
            same arrays ``torchpipe.models.build_model`` loads for this seed; if ``None``,
            Keras' default initialisation with TensorFlow's global random state.
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


def freeze_layers(model: keras.Model, names: Iterable[str]) -> None:
    """Mark the named layers not trainable (``model.freeze``).

    Their variables leave ``model.trainable_variables``, which is all the DP step engines
    differentiate, clip and update (:mod:`tfpipe.engine`, :mod:`tfpipe.fast`): a frozen layer
    gets no update and its parameters are not part of the per-example clipping norm.
    """
    for name in names:
        get_layer(model, name).trainable = False


def _builder(name: str) -> Callable[..., keras.Model]:
    def build(
        spec: ModelSpec, input_shape: tuple[int, ...], n_classes: int, seed: int | None = None,
        *, vocab_size: int | None = None,
    ) -> keras.Model:
        if spec.name != name:
            raise ConfigError(f"builder {name!r} was given model.name={spec.name!r}")
        return build_model(spec, input_shape, n_classes, seed, vocab_size=vocab_size)

    build.__name__ = f"build_{name}"
    build.__doc__ = f"Build ``{name}``; see :func:`build_model`."
    return build


MODELS: dict[str, Callable[..., keras.Model]] = {name: _builder(name) for name in A.model_names()}
"""Model name -> builder with :func:`build_model`'s signature, for the architectures
registered when this module is imported (a derived table: :func:`build_model` builds any
architecture registered later too)."""


# ------------------------------------------------------------------------------ weights
_PARAMS: tuple[tuple[type, tuple[str, ...]], ...] = (
    (keras.layers.Conv2D, ("kernel", "bias")),
    (keras.layers.Conv1D, ("kernel", "bias")),
    (keras.layers.Dense, ("kernel", "bias")),
    (keras.layers.GroupNormalization, ("gamma", "beta")),
    (keras.layers.Embedding, ("embeddings",)),
)


def _variables(model: keras.Model) -> dict[str, tf.Variable]:
    """Neutral key -> the model's variable, in layer order."""
    out: dict[str, tf.Variable] = {}
    for layer in model.layers:
        if not layer.weights:
            continue
        for layer_type, params in _PARAMS:
            if isinstance(layer, layer_type):
                for param in params:
                    var = getattr(layer, param, None)
                    if var is not None:
                        out[f"{layer.name}.{param}"] = var
                break
        else:
            raise ConfigError(
                f"layer {layer.name!r} ({type(layer).__name__}) has weights but no neutral "
                "layout; valid: Conv2D, Conv1D, Dense, GroupNormalization, Embedding"
            )
    return out


def get_weights(model: keras.Model) -> Weights:
    """The model's weights in the neutral layout (float32 numpy copies)."""
    return {k: np.array(v.numpy(), dtype=np.float32) for k, v in _variables(model).items()}


def variable_keys(model: keras.Model, variables: Sequence[tf.Variable]) -> list[str | None]:
    """The neutral key of each of ``variables`` (None for a variable with none)."""
    by_id = {id(v): k for k, v in _variables(model).items()}
    return [by_id.get(id(v)) for v in variables]


def neutral_to_variables(model: keras.Model, variables: Sequence[tf.Variable],
                         vector: Mapping[str, np.ndarray]) -> list[tf.Tensor]:
    """A neutral-layout vector (missing keys: zeros) as one tensor per variable of
    ``variables`` (the neutral layout is Keras's own, so only the order changes).

    Raises:
        ConfigError: a key that is not one of the model's weights.
    """
    by_id = {id(v): k for k, v in _variables(model).items()}
    unknown = sorted(set(vector) - set(by_id.values()))
    if unknown:
        raise ConfigError(f"weight key {unknown[0]!r} is not one of the model's; valid: "
                          f"{', '.join(sorted(by_id.values()))}")
    out = []
    for var in variables:
        key = by_id.get(id(var))
        value = vector.get(key) if key is not None else None
        out.append(tf.zeros(var.shape, var.dtype) if value is None
                   else tf.constant(np.asarray(value).reshape(var.shape), var.dtype))
    return out


def set_weights(model: keras.Model, weights: Mapping[str, np.ndarray]) -> None:
    """Load neutral-layout weights; all-or-nothing.

    Raises:
        ConfigError: a missing or extra key, or a shape mismatch (nothing is assigned then).
    """
    variables = _variables(model)
    checked = check_weights({k: tuple(v.shape) for k, v in variables.items()}, weights)
    for key, var in variables.items():
        var.assign(checked[key])


# ------------------------------------------------------------------------------ layers
def gradcam_layer_name(model: keras.Model, *, target: str = "last_conv") -> str:
    """Name of the Grad-CAM target layer, identical to ``torchpipe.models``' answer.

    Args:
        model: a model of this zoo.
        target: ``last_conv`` (the last convolution's output, pre-activation; the default;
            for a model without a convolution, ``scatter-linear``, the scattering output, as
            :meth:`dpcore.architectures.Architecture.gradcam_layer` says) or ``features``
            (the last spatial feature map, just before flatten/global pooling).
    """
    if target == "features":
        for layer in model.layers:
            if isinstance(layer, keras.layers.Flatten | keras.layers.GlobalAveragePooling2D
                          | keras.layers.GlobalMaxPooling1D):
                return layer.inbound_nodes[0].inbound_layers.name
        raise ConfigError(f"model {model.name!r} has no flatten/global pooling layer")
    if target != "last_conv":
        raise ConfigError(f"target={target!r} is not known; valid: last_conv, features")
    convs = [layer.name for layer in model.layers
             if isinstance(layer, keras.layers.Conv2D | keras.layers.Conv1D)]
    if not convs:
        convs = [layer.name for layer in model.layers if isinstance(layer, Scattering)]
    if not convs:
        raise ConfigError(f"model {model.name!r} has no convolution or scattering layer")
    return convs[-1]


def get_layer(model: keras.Model, name: str) -> keras.layers.Layer:
    """The layer called ``name`` (a neutral layer name); ConfigError if there is none."""
    try:
        return model.get_layer(name)
    except ValueError as exc:
        valid = ", ".join(layer.name for layer in model.layers)
        raise ConfigError(f"model {model.name!r} has no layer {name!r}; valid: {valid}") from exc


__all__ = [
    "FAST_FALLBACKS", "LAYER_BUILDERS", "MODELS", "KerasContext", "Scattering",
    "TemperedSigmoid", "activation_layer", "build_model", "freeze_layers", "from_architecture",
    "get_layer", "get_weights", "gradcam_layer_name", "set_weights",
]
