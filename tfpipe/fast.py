"""The fast TF DP engine (``perf.engine: fast``): Book-Keeping clipping, per-example
clipping without per-example gradients of the whole model. Mirror of :mod:`torchpipe.fast`.

The reference engine (:class:`tfpipe.engine.TfStepEngine`) gets per-example gradients from
``tf.vectorized_map`` over a chunk; TF vectorises ``Conv2DBackpropFilter`` as a loop over the
examples, which makes it slow. This engine is Book-Keeping (BK) clipping (Bu, Wang, Zha,
Karypis, ICML 2023; :mod:`dpcore.fastrules` states the rule): the same clipped sum from one
ordinary forward and one backward pass, hand-written per layer (TF Privacy's
fast-gradient-clipping registry computes per-example L2 norms only for Dense/Embedding/
LayerNorm, not Conv1D/Conv2D/GroupNorm, and no L1 norms at all, which Laplace DP-SGD needs):

1. the forward pass walks the Keras functional graph with TF Privacy's own traversal
   (``gradient_clipping_utils.model_forward_pass``) and records each parameterised layer's
   input ``a`` and output ``z``;
2. one backward pass gives ``g = dL/dz`` for each of them (``L`` = summed loss; examples are
   independent, so ``g[i]`` is example i's own output gradient);
3. each layer's :class:`FastRule` (registered in :data:`FAST_RULES` for its exact Keras
   class; one rule may cover several classes) turns ``(a, g)`` into per-example norms of its
   parameter gradients by one of its routes (:data:`dpcore.fastrules.ROUTES`: the ghost norm,
   per-example gradients from one grouped weight-gradient op, or from an explicit unfold and
   one batched product): the route measured fastest at warm-up, or replayed from
   ``perf.routes`` (:class:`FastTfStepEngine`, :mod:`dpcore.fastroutes`), else BK's rule
   (``2 T^2 < p d``); summed over layers they give each example's flat norm and its clip
   factor ``C / max(norm, C)`` (the reference's factor, :func:`tfpipe.dp.clip_per_example`);
4. each layer's ``sum_i factor_i grad_i`` from the same pass: where the rule made per-example
   gradients, one contraction of the kept ones with the factors; else one ordinary
   weight-gradient op of the layer alone from ``(a, factor * g)`` (``sum_i c_i grad(loss_i)
   = grad(sum_i c_i loss_i)``; no gradient flows back through the model a second time).

Steps 3-4 are :func:`clip_records`, the one place where the layers' ``(a, g)`` pairs become
norms and clipped sums (rows appended to a layer's ``a`` and ``g`` there are clipped and summed
like examples).

The chunk's clipped sum is added with the TF Privacy query's ``accumulate_preprocessed_record``;
noise (once per logical batch), the division by the expected batch size and the optimizer step
are the reference engine's. The update is therefore the reference one up to float rounding
(tested to rel 1e-5 on every route).

Rules exist for Dense, Conv2D, Conv1D, Embedding, GroupNormalization and LayerNormalization.
A model with another trainable layer type (or a fused activation, a grouped or causal
convolution) is not supported: :func:`unsupported_layers` names its layers;
:func:`dpcore.backend.choose_engine` then falls back to the reference engine when no engine
was asked for (recorded in ``engine_used`` / ``fast_engine_fallback``) and refuses an
explicit ``perf.engine: fast`` with an error naming them.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow_privacy.privacy.fast_gradient_clipping import gradient_clipping_utils

from dpcore.config import PerfSpec, RunConfig
from dpcore.errors import ConfigError
from dpcore.fastroutes import LayerRoutes, RouteBook, size_class
from dpcore.fastrules import GHOST, PER_EXAMPLE, UNFOLD, RouteRule
from dpcore.registry import Registry
from dpcore.stepengine import StepMechanism
from tfpipe import canaries as tfcanaries
from tfpipe.engine import TfStepEngine

#: ``perf_details["per_example_gradients"]`` of a run on this engine.
DESCRIPTION = ("Book-Keeping: layer-wise norms (ghost norm or per-example gradients, the route "
               "measured fastest per layer) from one forward/backward pass (tfpipe.fast), "
               "clip-weighted sum from the same pass")

#: Largest patch size K = kh kw c_in whose patches are taken by an identity convolution.
IDENTITY_CONV_MAX_K = 128

#: One variable's share of a layer's result.
VarTensors = list[tuple[tf.Variable, tf.Tensor]]


@dataclass
class LayerNorms:
    """One layer's share of the per-example norms.

    Attributes:
        sums: [n] sums of squares (L2) or of absolute values (L1) of its parameter gradients.
        kept: the per-example gradients [n, *shape] made for ``sums`` (kept for the clipped
            sum), or None where nothing per-example was made (a ghost norm).
    """

    sums: tf.Tensor
    kept: VarTensors | None = None


def _sum_abs_or_sq(t: tf.Tensor, kind: str) -> tf.Tensor:
    """Per-example sum of squares (l2) or of absolute values (l1) over all but axis 0."""
    axes = list(range(1, len(t.shape)))
    return tf.reduce_sum(tf.square(t) if kind == "l2" else tf.abs(t), axis=axes)


def _scaled(g: tf.Tensor, factors: tf.Tensor) -> tf.Tensor:
    """``g`` with example i multiplied by ``factors[i]``."""
    return g * tf.reshape(tf.cast(factors, g.dtype), [-1] + [1] * (len(g.shape) - 1))


def _kept(per_example: VarTensors, kind: str) -> LayerNorms:
    """Norm contributions of materialised per-example gradients, which are kept."""
    return LayerNorms(tf.add_n([_sum_abs_or_sq(t, kind) for _, t in per_example]),
                      per_example)


class FastRule(RouteRule):
    """How one layer type turns its input ``a`` and output gradient ``g`` (example axis first)
    into per-example gradient norms and the clip-weighted sum of per-example gradients.

    Subclasses implement :meth:`norms` for each of their :attr:`ROUTES` and, where a norm may
    be a ghost norm, :meth:`weight_gradients`; :meth:`problem` names a configuration the rule
    cannot handle; :meth:`routes` and :meth:`default_route` come from
    :class:`dpcore.fastrules.RouteRule`.
    """

    def problem(self, layer: Any) -> str | None:
        """Why this rule cannot handle ``layer`` (None: it can)."""
        return None

    def share_key(self, layer: Any, a: tf.Tensor, g: tf.Tensor) -> Hashable:
        """Layers with equal keys cost the same on every route (timed once)."""
        return (type(layer).__name__, tuple(a.shape), tuple(g.shape))

    def norms(self, layer: Any, a: tf.Tensor, g: tf.Tensor, kind: str,
              route: str | None = None) -> LayerNorms:
        """Per example [n]: sum of squares (``kind="l2"``) or of absolute values (``"l1"``)
        of the gradients of all the layer's variables, by ``route`` (one of
        :meth:`routes`; None: :meth:`default_route`)."""
        raise NotImplementedError

    def weight_gradients(self, layer: Any, a: tf.Tensor, g: tf.Tensor) -> VarTensors:
        """The layer's summed variable gradients for output gradient ``g`` (one op each)."""
        raise NotImplementedError

    def weighted_sum(self, layer: Any, a: tf.Tensor, g: tf.Tensor, factors: tf.Tensor,
                     kept: VarTensors | None) -> VarTensors:
        """``sum_i factors[i] * grad_i`` for each of the layer's variables: from ``kept``
        per-example gradients when there are any, else :meth:`weight_gradients` of
        ``factors * g``."""
        if kept is not None:
            return [(v, tf.tensordot(tf.cast(factors, t.dtype), t, 1)) for v, t in kept]
        return self.weight_gradients(layer, a, _scaled(g, factors))


#: Keras layer class -> its rule (exact classes). ``@FAST_RULES.register(keras.layers.Conv2D)``
#: on a :class:`FastRule` subclass files one instance of it under each class given.
FAST_RULES: Registry[type, FastRule] = Registry(
    "TF fast rules", key="Keras layer class", make=lambda rule_class: rule_class())


@FAST_RULES.register(tf.keras.layers.Dense)
class DenseRule(FastRule):
    """``Dense`` on rank-2 inputs (T = 1, so BK's rule always gives the ghost norm): the
    per-example kernel gradient is the outer product ``a[i] g[i]^T``, so both its L2 and its
    L1 norm factorise (Goodfellow 2015): ``||a g^T|| = ||a|| ||g||`` for either norm;
    nothing per-example is materialised. Weighted sum: ``a^T (c g)``."""

    ROUTES = (GHOST,)
    GHOST_FOR_L1 = True  # ||a g^T|| = ||a|| ||g|| for both norms

    def problem(self, layer: Any) -> str | None:
        rank = layer.input.shape.rank
        return None if rank == 2 else f"Dense on a rank-{rank} input"

    def dims(self, layer: Any, a: tf.Tensor, g: tf.Tensor) -> tuple[int, int, int]:
        return 1, a.shape[-1], g.shape[-1]

    def norms(self, layer: Any, a: tf.Tensor, g: tf.Tensor, kind: str,
              route: str | None = None) -> LayerNorms:
        total = _sum_abs_or_sq(a, kind) * _sum_abs_or_sq(g, kind)
        if layer.use_bias:
            total += _sum_abs_or_sq(g, kind)
        return LayerNorms(total)

    def weight_gradients(self, layer: Any, a: tf.Tensor, g: tf.Tensor) -> VarTensors:
        out = [(layer.kernel, tf.matmul(a, g, transpose_a=True))]
        if layer.use_bias:
            out.append((layer.bias, tf.reduce_sum(g, axis=0)))
        return out


@FAST_RULES.register(tf.keras.layers.Conv2D)
class Conv2DRule(FastRule):
    """``Conv2D`` (channels last, groups 1): with ``P[i]`` the [T, K] input patches of example
    i (T output positions, K = kh kw c_in, ``tf.image.extract_patches`` order = the kernel's)
    and ``G[i]`` its [T, C] output gradient, the kernel gradient is ``P[i]^T G[i]``. Routes:

    * ``unfold``: the patches ``P`` (:meth:`_patches`) and one batched product ``P^T G``,
      kept for the weighted sum (first: the rule's route where it takes no ghost norm);
    * ``per_example``: every example's kernel gradient from one ``conv2d_backprop_filter``
      with the examples as groups (input [1, H, W, n c_in], output gradient
      [1, H', W', n C], n groups: no patches are made), kept (a height-1 image, as Conv1D
      makes, was measured 3x slower than the unfold on IMDB's textcnn, TF 2.15, oneDNN);
    * ``ghost`` (L2): ``||P^T G||^2 = sum_pq (P P^T)_pq (G G^T)_pq``; weighted sum by the
      layer's ``conv2d_backprop_filter`` of ``c g``.
    """

    ROUTES = (UNFOLD, PER_EXAMPLE, GHOST)

    def problem(self, layer: Any) -> str | None:
        if layer.groups != 1 or layer.data_format != "channels_last":
            return "grouped or channels-first convolution"
        return None

    @staticmethod
    def _as_2d(layer: Any, a: tf.Tensor, g: tf.Tensor
               ) -> tuple[tf.Tensor, tf.Tensor, tuple[int, int], list[int], list[int]]:
        """``(a, g, (kh, kw), strides, dilations)`` in the NHWC form of a 2-D convolution."""
        return (a, g, tuple(layer.kernel_size), [1, *layer.strides, 1],
                [1, *layer.dilation_rate, 1])

    def _patches(self, layer: Any, a: tf.Tensor, kernel_size: tuple[int, int],
                 strides: list[int], dilations: list[int]) -> tf.Tensor:
        """[n, T, K] input patches. For K <= :data:`IDENTITY_CONV_MAX_K` they are the layer's
        convolution with an identity kernel (exact: each output sums one product by 1.0;
        ~10x faster than ``tf.image.extract_patches`` on cnn4's conv1, measured), else
        ``tf.image.extract_patches`` (same order: kh, kw, c_in)."""
        kh, kw = kernel_size
        k = kh * kw * a.shape[-1]
        if k <= IDENTITY_CONV_MAX_K:
            eye = tf.reshape(tf.eye(k, dtype=a.dtype), [kh, kw, a.shape[-1], k])
            patches = tf.nn.conv2d(a, eye, strides=strides, padding=layer.padding.upper(),
                                   dilations=dilations)
        else:
            patches = tf.image.extract_patches(
                a, sizes=[1, kh, kw, 1], strides=strides, rates=dilations,
                padding=layer.padding.upper())
        return tf.reshape(patches, [tf.shape(a)[0], -1, k])

    @staticmethod
    def _grouped(layer: Any, a: tf.Tensor, g: tf.Tensor, kernel_size: tuple[int, int],
                 strides: list[int], dilations: list[int]) -> tf.Tensor:
        """[n, kh, kw, c_in, C] per-example kernel gradients from one grouped
        ``conv2d_backprop_filter`` (example i is group i: its c_in input and C output
        channels)."""
        kh, kw = kernel_size
        n = tf.shape(a)[0]
        c_in, c_out = a.shape[-1], g.shape[-1]
        grouped_a = tf.reshape(tf.transpose(a, [1, 2, 0, 3]), [1, a.shape[1], a.shape[2], -1])
        grouped_g = tf.reshape(tf.transpose(g, [1, 2, 0, 3]), [1, g.shape[1], g.shape[2], -1])
        kernel = tf.compat.v1.nn.conv2d_backprop_filter(
            grouped_a, tf.stack([kh, kw, c_in, n * c_out]), grouped_g, strides=strides,
            padding=layer.padding.upper(), dilations=dilations)
        return tf.transpose(tf.reshape(kernel, [kh, kw, c_in, n, c_out]), [3, 0, 1, 2, 4])

    def dims(self, layer: Any, a: tf.Tensor, g: tf.Tensor) -> tuple[int, int, int]:
        a, g, (kh, kw), _, _ = self._as_2d(layer, a, g)
        return g.shape[1] * g.shape[2], kh * kw * a.shape[-1], g.shape[-1]

    def share_key(self, layer: Any, a: tf.Tensor, g: tf.Tensor) -> Hashable:
        return (type(layer).__name__, tuple(a.shape), tuple(g.shape), tuple(layer.kernel_size),
                tuple(layer.strides), tuple(layer.dilation_rate), layer.padding)

    def norms(self, layer: Any, a: tf.Tensor, g: tf.Tensor, kind: str,
              route: str | None = None) -> LayerNorms:
        route = route or self.default_route(layer, a, g, kind)
        a, g, kernel_size, strides, dilations = self._as_2d(layer, a, g)
        g2 = tf.reshape(g, [tf.shape(g)[0], -1, g.shape[-1]])
        bias = [(layer.bias, tf.reduce_sum(g2, axis=1))] if layer.use_bias else []
        if route == PER_EXAMPLE:
            kernel = self._grouped(layer, a, g, kernel_size, strides, dilations)
            return _kept([(layer.kernel, tf.reshape(kernel, [-1, *layer.kernel.shape])),
                          *bias], kind)
        p = self._patches(layer, a, kernel_size, strides, dilations)
        if route == GHOST:
            total = tf.reduce_sum(tf.matmul(p, p, transpose_b=True)
                                  * tf.matmul(g2, g2, transpose_b=True), axis=[1, 2])
            for _, b in bias:
                total += _sum_abs_or_sq(b, kind)
            return LayerNorms(total)
        kernel = tf.reshape(tf.matmul(p, g2, transpose_a=True), [-1, *layer.kernel.shape])
        return _kept([(layer.kernel, kernel), *bias], kind)

    def weight_gradients(self, layer: Any, a: tf.Tensor, g: tf.Tensor) -> VarTensors:
        a, g, (kh, kw), strides, dilations = self._as_2d(layer, a, g)
        kernel = tf.compat.v1.nn.conv2d_backprop_filter(
            a, [kh, kw, a.shape[-1], g.shape[-1]], g, strides=strides,
            padding=layer.padding.upper(), dilations=dilations)
        out = [(layer.kernel, tf.reshape(kernel, tf.shape(layer.kernel)))]
        if layer.use_bias:
            out.append((layer.bias, tf.reduce_sum(g, axis=[0, 1, 2])))
        return out


@FAST_RULES.register(tf.keras.layers.Conv1D)
class Conv1DRule(Conv2DRule):
    """``Conv1D`` (channels last, groups 1, ``valid`` or ``same`` padding): the 2-D rule on
    a height-1 image (``[n, L, C]`` -> ``[n, 1, L, C]``, kernel ``(1, k)``); the [1, k, c_in,
    c_out] kernel gradient is reshaped to Keras's [k, c_in, c_out] (the same memory order)."""

    def problem(self, layer: Any) -> str | None:
        if layer.padding == "causal":
            return "causal padding"
        return super().problem(layer)

    @staticmethod
    def _as_2d(layer: Any, a: tf.Tensor, g: tf.Tensor
               ) -> tuple[tf.Tensor, tf.Tensor, tuple[int, int], list[int], list[int]]:
        return (a[:, None], g[:, None], (1, layer.kernel_size[0]),
                [1, 1, layer.strides[0], 1], [1, 1, layer.dilation_rate[0], 1])


@FAST_RULES.register(tf.keras.layers.Embedding)
class EmbeddingRule(FastRule):
    """``Embedding`` (always a ghost norm: nothing of size V D per example): example i's
    gradient of the [V, D] table is zero except in the rows of the tokens it holds, row v
    being ``sum_{t: id[i,t] = v} g[i, t]``. Those rows are summed per distinct (example,
    token) pair (``tf.unique`` + ``unsorted_segment_sum``: at most n T rows of D values,
    never n V D), which gives both norms exactly; the clip-weighted sum is one segment sum
    of the scaled output gradients into the [V, D] table."""

    ROUTES = (GHOST,)
    GHOST_FOR_L1 = True  # the rows of the table gradient are summed exactly, both norms

    def dims(self, layer: Any, a: tf.Tensor, g: tf.Tensor) -> tuple[int, int, int]:
        return a.shape[-1], layer.input_dim, layer.output_dim

    @staticmethod
    def _flat(a: tf.Tensor, g: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Token ids [n T] (int64) and their output gradients [n T, D]."""
        ids = tf.reshape(tf.cast(a, tf.int64), [-1])
        return ids, tf.reshape(g, [-1, g.shape[-1]])

    def norms(self, layer: Any, a: tf.Tensor, g: tf.Tensor, kind: str,
              route: str | None = None) -> LayerNorms:
        ids, rows = self._flat(a, g)
        n = tf.shape(a, out_type=tf.int64)[0]
        example = tf.reshape(tf.broadcast_to(tf.range(n)[:, None], tf.shape(a, tf.int64)), [-1])
        vocab = tf.constant(layer.input_dim, tf.int64)
        pairs, pair_of_position = tf.unique(example * vocab + ids)
        per_pair = tf.math.unsorted_segment_sum(rows, pair_of_position, tf.size(pairs))
        return LayerNorms(tf.math.unsorted_segment_sum(_sum_abs_or_sq(per_pair, kind),
                                                       pairs // vocab, n))

    def weight_gradients(self, layer: Any, a: tf.Tensor, g: tf.Tensor) -> VarTensors:
        ids, rows = self._flat(a, g)
        return [(layer.embeddings, tf.math.unsorted_segment_sum(rows, ids, layer.input_dim))]


@FAST_RULES.register(tf.keras.layers.GroupNormalization, tf.keras.layers.LayerNormalization)
class NormalizationRule(FastRule):
    """``GroupNormalization`` on the channel axis and ``LayerNormalization``: gamma's
    per-example gradient is ``sum g[i] xhat[i]`` over the axes it is shared along (``xhat`` =
    the normalised input, Keras's formula recomputed), beta's ``sum g[i]``; both are small
    ([n, C]: BK's rule never favours a ghost norm over so little), made and kept."""

    def problem(self, layer: Any) -> str | None:
        rank = layer.input.shape.rank
        if isinstance(layer, tf.keras.layers.GroupNormalization):
            return (None if layer.axis in (-1, rank - 1)
                    else "GroupNormalization not on the channel axis")
        axes = [axis % rank for axis in layer.axis]
        return None if axes == sorted(axes) and 0 not in axes else \
            "LayerNormalization over unsorted axes or the example axis"

    @staticmethod
    def _xhat(layer: Any, a: tf.Tensor) -> tuple[tf.Tensor, list[int]]:
        """The normalised input and the axes the parameters are shared along."""
        rank = len(a.shape)
        if isinstance(layer, tf.keras.layers.GroupNormalization):
            channels = a.shape[-1]
            grouped = tf.reshape(a, [tf.shape(a)[0], -1, layer.groups,
                                     channels // layer.groups])
            mean, variance = tf.nn.moments(grouped, axes=[1, 3], keepdims=True)
            xhat = tf.reshape((grouped - mean) * tf.math.rsqrt(variance + layer.epsilon),
                              tf.shape(a))
            return xhat, list(range(1, rank - 1))
        axes = [axis % rank for axis in layer.axis]
        mean, variance = tf.nn.moments(a, axes=axes, keepdims=True)
        xhat = (a - mean) * tf.math.rsqrt(variance + layer.epsilon)
        return xhat, [axis for axis in range(1, rank) if axis not in axes]

    def norms(self, layer: Any, a: tf.Tensor, g: tf.Tensor, kind: str,
              route: str | None = None) -> LayerNorms:
        xhat, shared = self._xhat(layer, a)
        out = []
        if layer.scale:
            out.append((layer.gamma, tf.reduce_sum(g * xhat, axis=shared)))
        if layer.center:
            out.append((layer.beta, tf.reduce_sum(g, axis=shared)))
        return _kept(out, kind)


def _layer_problem(layer: tf.keras.layers.Layer) -> str | None:
    """Why ``layer`` cannot be handled (None if it can, or if it has no trainable weights)."""
    if not layer.trainable_weights:
        return None
    rule = FAST_RULES.get(type(layer))
    if rule is None:
        return f"{layer.name} ({type(layer).__name__}: no per-example rule)"
    if getattr(layer, "activation", None) not in (None, tf.keras.activations.linear):
        return f"{layer.name} (fused activation)"
    problem = rule.problem(layer)
    return None if problem is None else f"{layer.name} ({problem})"


def unsupported_layers(model: tf.keras.Model) -> list[str]:
    """Trainable layers of ``model`` that the fast engine cannot handle (empty: supported)."""
    problems = []
    for layer in model.submodules:
        if isinstance(layer, tf.keras.layers.Layer) and not isinstance(layer, tf.keras.Model):
            problem = _layer_problem(layer)
            if problem:
                problems.append(problem)
    return problems


#: One recorded layer: the layer, its input ``a``, its output gradient ``g``.
LayerRecord = tuple[Any, tf.Tensor, tf.Tensor]


def record_layers(model: tf.keras.Model, x: tf.Tensor, y: tf.Tensor
                  ) -> tuple[tf.Tensor, list[LayerRecord]]:
    """Book-Keeping's one forward and one backward pass: the losses [n] and, per layer with
    trainable weights in forward order, ``(layer, a, g)`` with ``g = dL/dz`` of the summed
    loss (the forward pass walks the Keras graph with TF Privacy's traversal)."""
    records: list[tuple[Any, tf.Tensor, tf.Tensor]] = []
    with tf.GradientTape() as tape:
        def generator(layer: Any, args: Sequence[tf.Tensor], kwargs: dict[str, Any]
                      ) -> tuple[tf.Tensor, None]:
            output = layer(*args, **kwargs)
            if layer.trainable_weights:
                tape.watch(output)
                records.append((layer, args[0], output))
            return output, None

        logits, _ = gradient_clipping_utils.model_forward_pass(model, x, generator)
        losses = tf.nn.sparse_softmax_cross_entropy_with_logits(tf.cast(y, tf.int32), logits)
        total = tf.reduce_sum(losses)
    output_grads = tape.gradient(total, [out for _, _, out in records],
                                 unconnected_gradients=tf.UnconnectedGradients.ZERO)
    return losses, [(layer, a, g) for (layer, a, _), g
                    in zip(records, output_grads, strict=True)]


def clip_records(records: Sequence[LayerRecord], variables: Sequence[tf.Variable],
                 clip: tf.Tensor | float, kind: str, routes: Mapping[str, str] | None = None,
                 weights: tf.Tensor | None = None) -> list[tf.Tensor]:
    """``sum_i w_i min(1, clip / ||grad_i||) grad_i`` (one tensor per variable, in the order
    of ``variables``) from each layer's ``(layer, a, g)``: the one place where the layers'
    inputs and output gradients become per-example norms and clipped sums.

    Row i of every layer's ``a`` and ``g`` is one example (rows appended to all of them are
    clipped and summed as more examples). The clip factor is
    :func:`tfpipe.dp.clip_per_example`'s, ``clip / max(norm, clip)``, with the norm flat over
    all variables (``kind`` ``"l2"`` or ``"l1"``). ``routes``: layer name -> route (a layer
    not named takes its rule's default); ``weights`` [n]: each row's weight (1: an example,
    0: a padding row; None: all 1).
    """
    if kind not in ("l2", "l1"):
        raise ConfigError(f"clip norm kind {kind!r} is not known; valid: l2, l1")
    chosen = routes or {}
    rules = [FAST_RULES.get(type(layer)) for layer, _, _ in records]
    layer_norms = [rule.norms(layer, a, g, kind, chosen.get(layer.name))
                   for rule, (layer, a, g) in zip(rules, records, strict=True)]
    norms = tf.add_n([n.sums for n in layer_norms])
    norms = tf.sqrt(norms) if kind == "l2" else norms
    clip = tf.cast(clip, norms.dtype)
    factors = clip / tf.maximum(norms, clip)
    if weights is not None:
        factors *= tf.cast(weights, factors.dtype)
    by_variable: dict[int, tf.Tensor] = {}
    for rule, (layer, a, g), n in zip(rules, records, layer_norms, strict=True):
        for variable, summed in rule.weighted_sum(layer, a, g, factors, n.kept):
            by_variable[id(variable)] = summed
    return [by_variable[id(v)] for v in variables]


def add_canary_rows(records: Sequence[LayerRecord], weights: tf.Tensor | None,
                  canary: tfcanaries.CanaryInput | None
                  ) -> tuple[list[LayerRecord], tf.Tensor | None]:
    """In the graph: the chunk's records with the audit's canary rows appended
    (:func:`tfpipe.canaries.with_canary_rows`) and the rows' weights (``weights`` [n], None:
    all 1; the canaries' 1)."""
    if canary is None:
        return list(records), weights
    n = tf.shape(records[0][1])[0] if records else tf.constant(0)
    base = tf.ones([n], tf.float32) if weights is None else tf.cast(weights, tf.float32)
    return (tfcanaries.with_canary_rows(records, canary),
            tf.concat([base, tf.ones([canary["count"]], tf.float32)], axis=0))


def clipped_gradient_sum(model: tf.keras.Model, variables: Sequence[tf.Variable],
                         x: tf.Tensor, y: tf.Tensor, clip: tf.Tensor | float, kind: str,
                         routes: Mapping[str, str] | None = None,
                         weights: tf.Tensor | None = None,
                         canary: tfcanaries.CanaryInput | None = None
                         ) -> tuple[tf.Tensor, list[tf.Tensor]]:
    """Losses [n] and ``sum_i w_i min(1, clip / ||grad_i||) grad_i`` (one tensor per
    variable, in the order of ``variables``) from one forward and one backward pass
    (Book-Keeping; :func:`record_layers`, then :func:`clip_records`). ``canary``: the
    audit's gradient canaries, as more rows of the layers' ``(a, g)`` pairs
    (:func:`add_canary_rows`), clipped and summed as examples (they add no loss). Needs a
    model whose trainable layers are all supported (see :func:`unsupported_layers`).
    """
    losses, records = record_layers(model, x, y)
    records, weights = add_canary_rows(records, weights, canary)
    return losses, clip_records(records, variables, clip, kind, routes, weights)


def routes_of_records(records: Sequence[LayerRecord], kind: str) -> list[LayerRoutes]:
    """Every recorded layer's routes for :class:`RouteBook`, with a thunk per route that runs
    its norm and clipped sum on the layer's ``a`` and ``g`` (results fetched, so that the time
    is the work's: eager records only; in a trace only the routes, dims and default count)."""
    out = []
    for layer, a, g in records:
        rule = FAST_RULES.get(type(layer))

        def run(route: str, rule: FastRule = rule, layer: Any = layer, a: tf.Tensor = a,
                g: tf.Tensor = g) -> Callable[[], Any]:
            factors = tf.fill([int(a.shape[0])], 0.5)

            def once() -> list[np.ndarray]:
                norms = rule.norms(layer, a, g, kind, route)
                sums = [t for _, t in rule.weighted_sum(layer, a, g, factors, norms.kept)]
                return [t.numpy() for t in (norms.sums, *sums)]
            return once

        out.append(LayerRoutes(layer.name, rule.routes(layer, a, kind), rule.dims(layer, a, g),
                               kind, run, rule.share_key(layer, a, g)))
    return out


def layer_routes(model: tf.keras.Model, x: tf.Tensor, y: tf.Tensor, kind: str
                 ) -> list[LayerRoutes]:
    """Every trainable layer's routes on the chunk ``(x, y)``, timeable: one eager forward
    and backward pass (:func:`record_layers`), then :func:`routes_of_records`."""
    return routes_of_records(record_layers(model, x, y)[1], kind)


class FastTfStepEngine(TfStepEngine):
    """:class:`~tfpipe.engine.TfStepEngine` with layer-wise clipping.

    Noise, the division by B and the optimizer step are the reference engine's (TF Privacy
    query and optimizer); each chunk's clipped sum (its canary rows included,
    :func:`add_canary_rows`) comes from :func:`clip_records` and is added with the query's
    ``accumulate_preprocessed_record``. Routes
    (:class:`dpcore.fastroutes.RouteBook`): by Book-Keeping's rule (the default), one traced
    chunk function serves every chunk size (the routes read off the layers' static shapes
    while it is traced); measured (``perf.route_choice: measure``: timed eagerly on the
    first chunk of each size class) or replayed (``perf.routes``), one traced chunk function
    per size class runs them.
    """

    def __init__(self, model: tf.keras.Model, config: RunConfig, mechanism: StepMechanism,
                 perf: PerfSpec) -> None:
        super().__init__(model, config, mechanism, perf)
        self.book = RouteBook(perf.routes, measure=perf.route_choice == "measure")
        self._by_size: dict[int, Callable[..., Any]] = {}
        self._rule_chunk: Callable[..., Any] | None = None
        self._static_layers: list[LayerRoutes] = []

    def _chunk_function(self, size: int, routes: Mapping[str, str] | None
                        ) -> Callable[..., Any]:
        """The traced chunk step with ``routes`` (None: settled by the rule while tracing,
        for size class ``size``)."""
        def chunk(x: tf.Tensor, y: tf.Tensor, weights: tf.Tensor, state: list[tf.Tensor],
                  canary: tfcanaries.CanaryInput) -> tuple[list[tf.Tensor], tf.Tensor]:
            losses, records = record_layers(self.model, x, y)
            chosen = routes
            if chosen is None:
                self._static_layers = routes_of_records(records, self.mechanism.clip_kind)
                chosen = self.book.settle(size, lambda: self._static_layers)
            rows, row_weights = (add_canary_rows(records, weights, canary)  # the audit's
                                 if self.canaries_on else (records, weights))
            summed = clip_records(rows, self.variables, self.mechanism.clip_norm,
                                  self.mechanism.clip_kind, chosen, row_weights)
            state = list(self.query.accumulate_preprocessed_record(state, summed))
            return state, tf.reduce_sum(losses * weights)

        return self._trace(chunk)

    def _switch_canaries_on(self) -> None:
        """The base's, and the chunk steps of every size class traced again."""
        super()._switch_canaries_on()
        self._by_size.clear()
        self._rule_chunk = None

    def _accumulator(self, x: np.ndarray, y: np.ndarray) -> Callable[..., Any]:
        if not self.query.per_example:
            return super()._accumulator(x, y)
        size = size_class(len(y), self.physical)
        if self.book.given is None and not self.book.measure:  # the rule: sizes share it
            if self._rule_chunk is None:
                self._rule_chunk = self._chunk_function(size, None)
            elif self._static_layers and not self.book.has(size):
                self.book.settle(size, lambda: self._static_layers)
            return self._rule_chunk
        if size not in self._by_size:
            m = self.book.policy.max_examples or len(y)
            routes = self.book.settle(size, lambda: layer_routes(
                self.model, tf.constant(x[:m]), tf.constant(y[:m]), self.mechanism.clip_kind))
            self._by_size[size] = self._chunk_function(size, routes)
        return self._by_size[size]

    def perf_record(self) -> dict[str, Any]:
        """The base record, and the routes and how they were chosen
        (:meth:`dpcore.fastroutes.RouteBook.record`)."""
        return {**super().perf_record(), **self.book.record()}
