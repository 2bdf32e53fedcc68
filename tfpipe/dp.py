"""DP-SGD on TensorFlow Privacy's machinery, with physical chunks and one noise draw per batch.

TF Privacy's ``DPKeras*Optimizer`` computes per-microbatch gradients with ``tape.jacobian`` over
the whole batch (quadratic work, and out of memory for cnn4 at 1024 microbatches), divides by
the actual microbatch count, and with ``gradient_accumulation_steps`` adds noise at every
sub-step. The bench runs its harmonised algorithm instead (README, "What it does"), still on
the library's pieces:

* the privatising step is a TF Privacy :class:`~tensorflow_privacy.DPQuery`
  (:class:`SeededGaussianSumQuery` subclasses ``GaussianSumQuery``; :class:`LaplaceSumQuery`
  and :class:`PlainSumQuery` are ``SumAggregationDPQuery`` subclasses): its clipping
  (``preprocess_record``, vectorised over a chunk by :meth:`preprocess_batch`), its
  ``accumulate_preprocessed_record`` for the running sum, and its ``get_noised_result`` once
  per logical batch;
* the optimizer is a subclass of TF Privacy's generic DP Keras optimizer classes
  (``GenericDPSGDOptimizer`` / ``GenericDPAdamOptimizer``, i.e. ``DPKerasSGDOptimizer`` /
  ``DPKerasAdamOptimizer`` with an explicit query) that adds chunk accumulation and divides
  the noised sum by the *expected* batch size;
* per-example gradients come from ``tf.vectorized_map`` over one chunk at a time (linear work;
  memory bounded by the chunk size).

Noise is drawn from a ``tf.random.Generator`` keyed by the run's noise key
(:mod:`dpcore.noise_key`: deterministic for ``noise_key: seed``); with ``noise_key: secret`` a
Gaussian coordinate is the sum of four draws divided by two (:func:`hardened_normal`).
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any

import dp_accounting
import tensorflow as tf
from tensorflow_privacy.privacy.dp_query import dp_query, gaussian_query, no_privacy_query
from tensorflow_privacy.privacy.optimizers import dp_optimizer_keras

from dpcore.config import TrainSpec
from dpcore.errors import ConfigError
from dpcore.mechanisms import NOISE_SAMPLERS
from dpcore.noise_key import NoiseKey
from dpcore.registry import Registry
from dpcore.stepengine import StepMechanism

#: The DP query of each noise sampler of :data:`dpcore.mechanisms.NOISE_SAMPLERS`, by name
#: (``StepMechanism.noise_kind``); built as ``cls(clip_norm, noise_scale, key)``.
QUERIES: Registry[str, type[dp_query.SumAggregationDPQuery]] = Registry(
    "TF Privacy DP queries", key="noise sampler")

#: Adam's epsilon in both backends (Keras's default; torchpipe.dp.KerasAdam applies it where
#: Keras does, so the two update rules are identical).
ADAM_EPSILON = 1e-7
ADAM_BETAS = (0.9, 0.999)

Records = list[tf.Tensor]


# ------------------------------------------------------------------------------ clipping
def per_example_norms(records: Sequence[tf.Tensor], kind: str) -> tf.Tensor:
    """Flat per-example norms [n] of per-example records (each ``[n, ...]``).

    Args:
        records: one tensor per variable, example axis first.
        kind: ``"l2"`` (sqrt of the sum of squares over all variables) or ``"l1"``.
    """
    parts = []
    for record in records:
        axes = list(range(1, len(record.shape)))
        if kind == "l2":
            parts.append(tf.reduce_sum(tf.square(record), axis=axes))
        elif kind == "l1":
            parts.append(tf.reduce_sum(tf.abs(record), axis=axes))
        else:
            raise ConfigError(f"clip norm kind {kind!r} is not known; valid: l2, l1")
    total = tf.add_n(parts)
    return tf.sqrt(total) if kind == "l2" else total


def clip_per_example(records: Sequence[tf.Tensor], clip: tf.Tensor, kind: str) -> Records:
    """Scale each example's record by ``clip / max(norm, clip)`` (= ``min(1, clip / norm)``).

    The L2 case is ``tf.clip_by_global_norm`` (what ``GaussianSumQuery.preprocess_record``
    applies to one record) evaluated for every example of the chunk at once: that function's
    ``L2Loss`` op has no vectorisation rule, so it cannot run inside ``tf.vectorized_map``.
    """
    norms = per_example_norms(records, kind)
    clip = tf.cast(clip, norms.dtype)
    factors = clip / tf.maximum(norms, clip)
    out = []
    for record in records:
        shape = tf.concat([tf.shape(factors), tf.ones([len(record.shape) - 1], tf.int32)], 0)
        out.append(record * tf.cast(tf.reshape(factors, shape), record.dtype))
    return out


def _laplace_noise(generator: tf.random.Generator, shape: tf.Tensor, scale: tf.Tensor,
                   dtype: tf.DType) -> tf.Tensor:
    """Laplace(0, scale) samples as scale * (E1 - E2), E_i ~ Exp(1) (hand-written: TF's
    ``tf.random.Generator`` has no Laplace sampler). ``-log1p(-u)`` with u in [0, 1) is finite."""
    e1 = -tf.math.log1p(-generator.uniform(shape, dtype=dtype))
    e2 = -tf.math.log1p(-generator.uniform(shape, dtype=dtype))
    return tf.cast(scale, dtype) * (e1 - e2)


def hardened_normal(generator: tf.random.Generator, shape: tf.Tensor, stddev: tf.Tensor
                    ) -> tf.Tensor:
    """N(0, stddev^2) samples as the sum of four N(0, stddev^2) draws divided by two.

    Holohan & Braghin 2021 ("Secure random sampling in differential privacy", section 5.1):
    summing 2n draws raises the cost of the floating-point attack on one Gaussian draw
    (Jin et al. 2022) to about 2^(p (2n - 1)) for p-bit mantissas; n = 2 is what Opacus's
    ``secure_mode`` draws. Hand-written: neither TF nor TF Privacy offers it. A mitigation,
    not a proof of DP in floating point.
    """
    total = generator.normal(shape, stddev=stddev)
    for _ in range(3):
        total += generator.normal(shape, stddev=stddev)
    return total / 2.0


# ------------------------------------------------------------------------------ DP queries
@QUERIES.register("gaussian")
class SeededGaussianSumQuery(gaussian_query.GaussianSumQuery):
    """``GaussianSumQuery`` whose noise comes from a keyed generator, with chunk clipping.

    Clipping, accumulation and the noised result are the library's; only the random source is
    replaced (the library draws from TF's global seed): a generator keyed by the run's noise
    key (``key``, :mod:`dpcore.noise_key`), hardened (:func:`hardened_normal`) when
    ``key.hardened``.
    """

    per_example = True

    def __init__(self, l2_norm_clip: float, stddev: float, key: NoiseKey) -> None:
        super().__init__(l2_norm_clip, stddev)
        self._generator = tf.random.Generator.from_seed(key.value)
        self.hardened = key.hardened  # the four-draw sampler (secret keys)

    def preprocess_batch(self, params: Any, records: Sequence[tf.Tensor]) -> Records:
        """``preprocess_record`` applied to every example of a chunk (example axis first)."""
        return clip_per_example(records, params, "l2")

    def get_noised_result(self, sample_state: Any, global_state: Any) -> tuple[Any, Any, Any]:
        """The sum plus N(0, stddev^2) per coordinate, and the step's DpEvent."""
        def add_noise(v: tf.Tensor) -> tf.Tensor:
            if self.hardened:
                noise = hardened_normal(self._generator, tf.shape(v), global_state.stddev)
            else:
                noise = self._generator.normal(tf.shape(v), stddev=global_state.stddev)
            return v + tf.cast(noise, v.dtype)

        result = tf.nest.map_structure(add_noise, sample_state)
        event = dp_accounting.GaussianDpEvent(self._stddev / self._l2_norm_clip)
        return result, global_state, event


@QUERIES.register("laplace")
class LaplaceSumQuery(dp_query.SumAggregationDPQuery):
    """Sum query with per-record L1 clipping and Laplace noise (Laplace DP-SGD).

    Each record is scaled to L1 norm at most ``l1_norm_clip`` (flat over all tensors), so the
    sum has L1 sensitivity ``l1_norm_clip``; Laplace noise of scale ``scale`` per coordinate
    then gives the Laplace mechanism with noise multiplier ``scale / l1_norm_clip``.
    """

    _GlobalState = collections.namedtuple("_GlobalState", ["l1_norm_clip", "scale"])
    per_example = True

    def __init__(self, l1_norm_clip: float, scale: float, key: NoiseKey) -> None:
        self._l1_norm_clip = l1_norm_clip
        self._scale = scale
        # no hardened Laplace draw: the snapping mechanism (Mironov 2012) needs a bounded
        # output, which a gradient sum has not (dpcore.noise_key says so in the record)
        self._generator = tf.random.Generator.from_seed(key.value)

    def initial_global_state(self) -> Any:
        """Implements ``DPQuery.initial_global_state``."""
        return self._GlobalState(tf.cast(self._l1_norm_clip, tf.float32),
                                 tf.cast(self._scale, tf.float32))

    def derive_sample_params(self, global_state: Any) -> Any:
        """The L1 clip norm."""
        return global_state.l1_norm_clip

    def preprocess_record(self, params: Any, record: Any) -> Any:
        """One record scaled to L1 norm at most ``params``."""
        flat = tf.nest.flatten(record)
        clipped = clip_per_example([t[None] for t in flat], params, "l1")
        return tf.nest.pack_sequence_as(record, [t[0] for t in clipped])

    def preprocess_batch(self, params: Any, records: Sequence[tf.Tensor]) -> Records:
        """:meth:`preprocess_record` applied to every example of a chunk."""
        return clip_per_example(records, params, "l1")

    def get_noised_result(self, sample_state: Any, global_state: Any) -> tuple[Any, Any, Any]:
        """The sum plus Laplace(0, scale) per coordinate, and the step's DpEvent."""
        def add_noise(v: tf.Tensor) -> tf.Tensor:
            return v + _laplace_noise(self._generator, tf.shape(v), global_state.scale, v.dtype)

        result = tf.nest.map_structure(add_noise, sample_state)
        event = dp_accounting.LaplaceDpEvent(self._scale / self._l1_norm_clip)
        return result, global_state, event


class PlainSumQuery(no_privacy_query.NoPrivacySumQuery):
    """The non-private step: no per-example gradients, no clipping, no noise."""

    per_example = False

    def preprocess_batch(self, params: Any, records: Sequence[tf.Tensor]) -> Records:
        """Identity (nothing is clipped)."""
        return list(records)


def make_query(mechanism: StepMechanism, key: NoiseKey | None
               ) -> dp_query.SumAggregationDPQuery:
    """The DP query that implements ``mechanism`` (noise keyed by ``key``, the run's
    :func:`dpcore.noise_key.noise_key`; None for a step without noise): its noise sampler's
    entry of :data:`QUERIES`."""
    if mechanism.clip_kind is None:
        return PlainSumQuery()
    if key is None:
        raise ConfigError(f"a {mechanism.noise_kind!r} DP step needs a noise key; none given")
    sampler = NOISE_SAMPLERS.get(str(mechanism.noise_kind))
    if sampler is not None and sampler.clip_norm == mechanism.clip_kind \
            and sampler.name in QUERIES:
        return QUERIES[sampler.name](mechanism.clip_norm, mechanism.noise_scale, key)
    raise ConfigError(
        f"clip {mechanism.clip_kind!r} with noise {mechanism.noise_kind!r} is not supported; "
        "valid: l2 + gaussian, l1 + laplace, or no clipping and no noise"
    )


# ------------------------------------------------------------------------------ optimizers
def _make_chunked_class(dp_cls: type) -> type:
    """Subclass a TF Privacy DP optimizer class with chunk accumulation (noise once)."""

    class ChunkedDPOptimizer(dp_cls):  # type: ignore[misc, valid-type]
        """TF Privacy DP optimizer fed per-example gradients chunk by chunk.

        Use: ``state = opt.initial_sample_state(vars)``; per chunk
        ``state = opt.accumulate_chunk(state, records)``; then
        ``opt.apply_gradients(zip(opt.noised_mean(state, B), vars))``.
        """

        def initial_sample_state(self, var_list: Sequence[tf.Variable]) -> Records:
            """Zeros shaped like the variables (the query's empty sum)."""
            return list(self._dp_sum_query.initial_sample_state(list(var_list)))

        def accumulate_chunk(self, sample_state: Records, records: Sequence[tf.Tensor]
                             ) -> Records:
            """Add a chunk: per-example records ``[n, ...]`` are clipped by the query and
            summed; a non-private query takes the chunk's summed gradient as one record."""
            query = self._dp_sum_query
            if query.per_example:
                params = query.derive_sample_params(self._global_state)
                clipped = query.preprocess_batch(params, records)
                summed = [tf.reduce_sum(r, axis=0) for r in clipped]
            else:
                summed = list(records)
            return list(query.accumulate_preprocessed_record(sample_state, summed))

        def add_to_sum(self, sample_state: Records, record: Sequence[tf.Tensor]) -> Records:
            """Add one already-clipped record (the audit's canary gradient, computed and
            clipped by dpcore) to the sum, before the noise: the canary hook."""
            return list(self._dp_sum_query.accumulate_preprocessed_record(
                sample_state, list(record)))

        def noised_mean(self, sample_state: Records, expected_batch_size: int) -> Records:
            """The query's noised sum (noise drawn once), divided by the expected batch size."""
            noised, _, _ = self._dp_sum_query.get_noised_result(sample_state, self._global_state)
            self._was_dp_gradients_called = True
            return [tf.truediv(g, tf.cast(expected_batch_size, g.dtype)) for g in noised]

    ChunkedDPOptimizer.__name__ = f"Chunked{dp_cls.__name__}"
    return ChunkedDPOptimizer


ChunkedDPSGDOptimizer = _make_chunked_class(dp_optimizer_keras.GenericDPSGDOptimizer)
ChunkedDPAdamOptimizer = _make_chunked_class(dp_optimizer_keras.GenericDPAdamOptimizer)


def make_optimizer(train: TrainSpec, query: dp_query.DPQuery) -> Any:
    """The chunked TF Privacy optimizer of ``train.optimizer`` around ``query``."""
    if train.optimizer == "sgd":
        return ChunkedDPSGDOptimizer(dp_sum_query=query, learning_rate=train.lr,
                                     momentum=train.momentum)
    if train.optimizer == "adam":
        return ChunkedDPAdamOptimizer(dp_sum_query=query, learning_rate=train.lr,
                                      beta_1=ADAM_BETAS[0], beta_2=ADAM_BETAS[1],
                                      epsilon=ADAM_EPSILON)
    raise ConfigError(f"train.optimizer={train.optimizer!r} is not known; valid: sgd, adam")


# ------------------------------------------------------------------------------ gradients
def example_losses(model: tf.keras.Model, x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
    """Per-example softmax cross-entropy [n] (nats) of the model's logits."""
    logits = model(x, training=True)
    return tf.nn.sparse_softmax_cross_entropy_with_logits(tf.cast(y, tf.int32), logits)


def per_example_gradients(
    model: tf.keras.Model, variables: Sequence[tf.Variable], x: tf.Tensor, y: tf.Tensor,
) -> tuple[tf.Tensor, Records]:
    """Losses [n] and per-example gradients (one ``[n, *var.shape]`` tensor per variable).

    ``tf.vectorized_map`` over the examples of one chunk: work linear in the chunk size.
    """
    def one(args: tuple[tf.Tensor, tf.Tensor]) -> tuple[tf.Tensor, Records]:
        xi, yi = args
        with tf.GradientTape() as tape:
            loss = example_losses(model, xi[None], yi[None])[0]
        grads = tape.gradient(loss, list(variables),
                              unconnected_gradients=tf.UnconnectedGradients.ZERO)
        return loss, [tf.convert_to_tensor(g) for g in grads]

    # pfor logs "Conv2DBackpropFilter uses a while_loop. Fix that!" for every convolution: its
    # per-example filter gradient is a loop over the chunk inside the vectorised graph (TF's
    # own implementation; correct, and fast enough: see the timings in the report).
    tf_logger = tf.get_logger()
    level = tf_logger.level
    tf_logger.setLevel("ERROR")
    try:
        return tf.vectorized_map(one, (x, y), fallback_to_while_loop=True)
    finally:
        tf_logger.setLevel(level)


def microbatch_means(records: Sequence[tf.Tensor], k: int) -> Records:
    """Average the per-example records ``[n, ...]`` over consecutive groups of ``k``.

    The mean gradient of a microbatch is the gradient of its mean loss: what TF Privacy's
    optimizers clip per microbatch (``num_microbatches = n / k``). ``k`` must divide ``n``
    (the config rules guarantee it). ``k = 1`` returns the records unchanged.
    """
    if k == 1:
        return list(records)
    return [tf.reduce_mean(tf.reshape(r, tf.concat([[-1, k], tf.shape(r)[1:]], 0)), axis=1)
            for r in records]


def summed_gradient(
    model: tf.keras.Model, variables: Sequence[tf.Variable], x: tf.Tensor, y: tf.Tensor,
    weights: tf.Tensor | None = None,
) -> tuple[tf.Tensor, Records]:
    """Losses [n] and the gradient of their sum (the non-private step's record); with
    ``weights`` [n], of their weighted sum (0: a padding row, which adds nothing)."""
    with tf.GradientTape() as tape:
        losses = example_losses(model, x, y)
        total = tf.reduce_sum(losses if weights is None else losses * weights)
    grads = tape.gradient(total, list(variables),
                          unconnected_gradients=tf.UnconnectedGradients.ZERO)
    return losses, [tf.convert_to_tensor(g) for g in grads]
