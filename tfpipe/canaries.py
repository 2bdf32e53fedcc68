"""The audit's gradient canaries on TensorFlow: a step's canary records
(:class:`dpcore.audit.canary_records.CanaryRecords`) as the tensors the TF step engines take,
and what the engines do with them inside their compiled chunk step.

* the reference engine appends the canaries' per-example gradients to a chunk's per-example
  gradients (:func:`gradient_rows`), before the TF Privacy query clips them;
* the fast engine appends each canary's row to the ``(a, g)`` pair of the layer that owns its
  coordinate, zero rows to every other layer's (:func:`with_canary_rows`), before the
  layer rules compute norms and clipped sums. The neutral per-example layout is Keras's
  (channels last, a convolution's input unpadded), so entries are placed as given.

Everything is sparse until the graph scatters it, so a chunk's canaries cost what their rows
cost. The inputs have one signature for every chunk (zero canaries included), so the chunk
step is traced once.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from dpcore.audit.canary_records import CanaryRecords, SparseRows
from dpcore.errors import ConfigError

#: The canary input of a chunk step: ``{"count": m, "gradient": [per variable (rows, flat,
#: values)], "rows": {layer: (a rows, a index, a values, g rows, g index, g values)}}``.
CanaryInput = dict[str, Any]


def _sparse_spec(rank: int | None) -> tuple[tf.TensorSpec, ...]:
    index = tf.TensorSpec([None] if rank is None else [None, rank], tf.int32)
    return (tf.TensorSpec([None], tf.int32), index, tf.TensorSpec([None], tf.float32))


def routed_layers(model: tf.keras.Model) -> dict[str, tuple[int, int]]:
    """Layer name -> (per-example rank of its input, of its output), for every layer with
    trainable weights (the layers the fast engine records). A layer may be called in more
    than one model (a split front end's head shares the full model's): the ranks are those
    of its last call."""
    return {layer.name: (layer.get_input_at(-1).shape.rank - 1,
                         layer.get_output_at(-1).shape.rank - 1)
            for layer in model.layers if layer.trainable_weights}


def canary_signature(n_variables: int, layers: dict[str, tuple[int, int]]) -> CanaryInput:
    """The ``tf.function`` input signature of :data:`CanaryInput`."""
    return {"count": tf.TensorSpec([], tf.int32),
            "gradient": [_sparse_spec(None) for _ in range(n_variables)],
            "rows": {name: _sparse_spec(ra) + _sparse_spec(rg)
                     for name, (ra, rg) in layers.items()}}


def _tensors(sparse: SparseRows | None, rank: int | None) -> tuple[tf.Tensor, ...]:
    if sparse is None:
        shape = (0,) if rank is None else (0, rank)
        return (tf.zeros([0], tf.int32), tf.zeros(shape, tf.int32), tf.zeros([0], tf.float32))
    index = sparse.index[:, 0] if rank is None else sparse.index
    return (tf.constant(sparse.rows, tf.int32), tf.constant(index, tf.int32),
            tf.constant(sparse.values, tf.float32))


def canary_input(records: CanaryRecords | None, variable_keys: Sequence[str | None],
                 layers: dict[str, tuple[int, int]]) -> CanaryInput:
    """The tensors of ``records`` (None: zero canaries) for a chunk step over variables of
    neutral keys ``variable_keys`` (in the engine's order; None for a variable with no key)
    and the routed ``layers`` (:func:`routed_layers`)."""
    if records is None or not records.count:
        return _empty_input(tuple(variable_keys), tuple(layers.items()))
    grad = records.gradient
    acts, outs = records.activations, records.output_gradients
    unknown = sorted(set(acts) - set(layers))
    if unknown:
        raise ConfigError(f"gradient canary in layer {unknown[0]!r}, which the fast engine does "
                          f"not record; valid: {', '.join(layers)}")
    return {"count": tf.constant(records.count, tf.int32),
            "gradient": [_tensors(grad.get(k) if k is not None else None, None)
                         for k in variable_keys],
            "rows": {name: _tensors(acts.get(name), ra) + _tensors(outs.get(name), rg)
                     for name, (ra, rg) in layers.items()}}


@functools.lru_cache(maxsize=8)
def _empty_input(variable_keys: tuple[str | None, ...],
                 layers: tuple[tuple[str, tuple[int, int]], ...]) -> CanaryInput:
    """Zero canaries for these variables and layers, built once: every chunk of a run without
    canaries takes it (hundreds of small tensors per chunk otherwise; tensors are immutable,
    so one input serves every call)."""
    return {"count": tf.constant(0, tf.int32),
            "gradient": [_tensors(None, None) for _ in variable_keys],
            "rows": {name: _tensors(None, ra) + _tensors(None, rg)
                     for name, (ra, rg) in layers}}


def gradient_rows(canary: CanaryInput, variables: Sequence[tf.Variable], repeat: int = 1
                  ) -> list[tf.Tensor]:
    """In the graph: the canaries' per-example gradients, one ``[m * repeat, *var.shape]``
    tensor per variable (each canary ``repeat`` times in a row: a microbatch of identical
    examples, whose mean is the canary)."""
    m = canary["count"]
    out = []
    for var, (rows, flat, values) in zip(variables, canary["gradient"], strict=True):
        size = int(np.prod(var.shape))
        dense = tf.scatter_nd(tf.stack([rows, flat], axis=1), tf.cast(values, var.dtype),
                              tf.stack([m, size]))
        if repeat > 1:
            dense = tf.repeat(dense, repeat, axis=0)
        out.append(tf.reshape(dense, [-1, *var.shape]))
    return out


def _rows_like(t: tf.Tensor, m: tf.Tensor, rows: tf.Tensor, index: tf.Tensor,
               values: tf.Tensor) -> tf.Tensor:
    """``m`` rows shaped like one example of ``t``, zero but at the sparse entries."""
    shape = tf.concat([tf.reshape(m, [1]), tf.shape(t)[1:]], axis=0)
    where = tf.concat([rows[:, None], index], axis=1)
    return tf.scatter_nd(where, tf.cast(values, t.dtype), tf.cast(shape, tf.int32))


def with_canary_rows(records: Sequence[tuple[Any, tf.Tensor, tf.Tensor]],
                     canary: CanaryInput | None) -> list[tuple[Any, tf.Tensor, tf.Tensor]]:
    """In the graph: each recorded ``(layer, a, g)`` with the canaries' rows appended (the
    canaries' own rows in the layer owning them, zero rows elsewhere)."""
    if canary is None:
        return list(records)
    m = canary["count"]
    out = []
    for layer, a, g in records:
        a_rows, a_index, a_values, g_rows, g_index, g_values = canary["rows"][layer.name]
        out.append((layer,
                    tf.concat([a, _rows_like(a, m, a_rows, a_index, a_values)], axis=0),
                    tf.concat([g, _rows_like(g, m, g_rows, g_index, g_values)], axis=0)))
    return out


def watched_values(grads: Sequence[tf.Tensor], indices: Sequence[tf.Tensor | None]
                   ) -> list[tf.Tensor]:
    """In the graph: each watched gradient's values at its flat indices (unwatched: none)."""
    return [tf.gather(tf.reshape(g, [-1]), idx) for g, idx in zip(grads, indices, strict=True)
            if idx is not None]
