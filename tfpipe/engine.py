"""The reference TF step engine: one logical DP-SGD step on a Keras model.

Per-example gradients of each physical chunk (``tf.vectorized_map``), clipped and summed by a
TF Privacy DP query, noised once per logical batch and divided by the expected batch size by a
TF Privacy DP optimizer subclass (:mod:`tfpipe.dp`). It lives apart from :mod:`tfpipe.train` so
that :mod:`tfpipe.fast` can extend it without an import cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from dpcore.chunkpad import pad_chunk, padded_size
from dpcore.config import PerfSpec, RunConfig
from dpcore.noise_key import noise_key
from dpcore.stepengine import Chunk, StepMechanism
from tfpipe import dp
from tfpipe.models import get_weights, neutral_to_variables, set_weights
from tfpipe.predict import output_function, probability_function


class TfStepEngine:
    """One logical DP-SGD step on a Keras model (see :class:`dpcore.trainloop.StepEngine`)."""

    def __init__(self, model: tf.keras.Model, config: RunConfig, mechanism: StepMechanism,
                 perf: PerfSpec) -> None:
        self.model = model
        self.mechanism = mechanism
        self.variables = list(model.trainable_variables)
        # a 192-bit key fills TF's Philox state (counter and key): see dpcore.noise_key
        key = noise_key(config, "engine", bits=192) if config.privacy.is_dpsgd else None
        self.query = dp.make_query(mechanism, key)
        self.optimizer = dp.make_optimizer(config.train, self.query)
        x_dtype = model.inputs[0].dtype
        x_spec = tf.TensorSpec([None, *model.inputs[0].shape[1:]], x_dtype)
        y_spec = tf.TensorSpec([None], tf.int64)
        state_spec = [tf.TensorSpec(v.shape, v.dtype) for v in self.variables]
        self._x_dtype = x_dtype.as_numpy_dtype
        #: XLA-compiled chunk steps (``perf.compile`` or ``perf.xla``), their chunks padded to
        #: their size class with zero-weight rows (not with microbatches: rows are grouped).
        self.compiled = perf.compile or perf.xla
        self.pad_chunks = self.compiled and mechanism.microbatch_size == 1
        self.physical = perf.physical_batch_size
        self._chunk_signature = [x_spec, y_spec, tf.TensorSpec([None], tf.float32), state_spec]
        self._accumulate = self._trace(self._accumulate_chunk)
        self._apply = tf.function(self._apply_update, input_signature=[
            state_spec, tf.TensorSpec([], tf.float32)])
        self._predict = probability_function(model)
        self._outputs = output_function(model)

    def _trace(self, chunk: Callable[..., Any]) -> Callable[..., Any]:
        """``chunk(x, y, weights, state) -> (state, loss)`` as a ``tf.function`` (XLA when
        compiled)."""
        return tf.function(chunk, jit_compile=self.compiled,
                           input_signature=self._chunk_signature)

    def _accumulate_chunk(self, x: tf.Tensor, y: tf.Tensor, weights: tf.Tensor,
                          state: list[tf.Tensor]) -> tuple[list[tf.Tensor], tf.Tensor]:
        """Add one chunk's clipped per-example gradients (or its summed gradient) to
        ``state``; rows of weight 0 (padding) add nothing. Returns the state and the chunk's
        summed loss over its weighted rows."""
        if self.query.per_example:
            losses, records = dp.per_example_gradients(self.model, self.variables, x, y)
            records = [r * tf.reshape(weights, [-1] + [1] * (len(r.shape) - 1))
                       for r in records]
            records = dp.microbatch_means(records, self.mechanism.microbatch_size)
        else:
            losses, records = dp.summed_gradient(self.model, self.variables, x, y, weights)
        return self.optimizer.accumulate_chunk(state, records), tf.reduce_sum(losses * weights)

    def _accumulator(self, x: np.ndarray, y: np.ndarray) -> Callable[..., Any]:
        """The traced chunk function that adds the chunk ``(x, y)`` (one for every chunk
        here; the fast engine keeps one per chunk size class)."""
        return self._accumulate

    def perf_record(self) -> dict[str, Any]:
        """What the run's ``perf`` records of this engine: whether the chunk steps were
        compiled and their chunks padded."""
        return {"compiled": "XLA (tf.function jit_compile)" if self.compiled else None,
                "chunks_padded": self.pad_chunks}

    def _apply_update(self, state: list[tf.Tensor], divisor: tf.Tensor) -> None:
        grads = self.optimizer.noised_mean(state, divisor)
        self.optimizer.apply_gradients(zip(grads, self.variables, strict=True))

    def train_step(self, chunks: Sequence[Chunk], divisor: float | None = None,
                   extra: Mapping[str, np.ndarray] | None = None) -> float:
        """Accumulate the chunks' clipped gradients, then noise once, divide and step.

        ``divisor``: of the noised sum; default the expected batch size B (see
        ``factors.normalisation``). ``extra``: a neutral-layout vector added to the clipped
        sum before the noise (the audit's canary hook, :class:`dpcore.trainloop.StepEngine`).
        """
        state = self.optimizer.initial_sample_state(self.variables)
        loss = 0.0
        for x, y in chunks:
            x, y = np.asarray(x, self._x_dtype), np.asarray(y, np.int64)
            if self.pad_chunks:
                x, y, weights = pad_chunk(x, y, padded_size(len(y), self.physical))
            else:
                weights = np.ones(len(y), np.float32)
            state, chunk_loss = self._accumulator(x, y)(
                tf.constant(x), tf.constant(y), tf.constant(weights), state)
            loss += float(chunk_loss)
        if extra is not None:
            state = self.optimizer.add_to_sum(
                state, neutral_to_variables(self.model, self.variables, extra))
        if divisor is None:
            divisor = float(self.mechanism.expected_batch_size)
        self._apply(state, tf.constant(divisor, tf.float32))
        return loss

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        """Softmax probabilities of one batch of model inputs."""
        return self._predict(np.asarray(x, self._x_dtype))

    def predict_outputs(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(logits, softmax probabilities) of one batch of model inputs, one forward pass."""
        return self._outputs(np.asarray(x, self._x_dtype))

    def get_weights(self) -> dict[str, np.ndarray]:
        """Current weights, neutral layout."""
        return get_weights(self.model)

    def set_weights(self, weights: Mapping[str, np.ndarray]) -> None:
        """Load neutral-layout weights."""
        set_weights(self.model, weights)

    def close(self) -> None:
        """Nothing to release: the engine attaches nothing to the Keras model."""
