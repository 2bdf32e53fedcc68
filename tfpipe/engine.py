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

from dpcore.audit.canary_records import CanaryRecords, with_canaries
from dpcore.chunkpad import padded_size, weighted_chunk
from dpcore.config import PerfSpec, RunConfig
from dpcore.errors import ConfigError
from dpcore.noise_key import noise_key
from dpcore.stepengine import Chunk, StepMechanism
from tfpipe import canaries as tfcanaries
from tfpipe import dp
from tfpipe.models import get_weights, neutral_to_variables, set_weights, variable_keys
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
        self._state_spec = [tf.TensorSpec(v.shape, v.dtype) for v in self.variables]
        self._x_dtype = x_dtype.as_numpy_dtype
        self._input_shape = tuple(model.inputs[0].shape[1:])
        self._variable_keys = variable_keys(model, self.variables)
        self._routed = tfcanaries.routed_layers(model)
        #: whether the traced chunk steps take the audit's gradient canaries: only then do
        #: they append canary rows, so that a run without canaries traces the very graph (and
        #: float sums) it had before canaries existed; switched on by the first step that is
        #: given canaries (:meth:`_switch_canaries_on`)
        spec = config.audit_canaries
        self.canaries_on = bool(spec.active and spec.kind == "gradient")
        #: XLA-compiled chunk steps (``perf.compile`` or ``perf.xla``), their chunks padded to
        #: their size class with zero-weight rows (not with microbatches: rows are grouped).
        self.compiled = perf.compile or perf.xla
        self.pad_chunks = self.compiled and mechanism.microbatch_size == 1
        self.physical = perf.physical_batch_size
        self._chunk_signature = [x_spec, y_spec, tf.TensorSpec([None], tf.float32),
                                 self._state_spec, tfcanaries.canary_signature(
                                     len(self.variables), self._routed)]
        self._accumulate = self._trace(self._accumulate_chunk)
        self._watch: list[tf.Tensor | None] = [None] * len(self.variables)
        self._watched: dict[str, np.ndarray] | None = None
        # the optimizer's variables (iterations, hyper-parameters, slots) exist before the
        # update is traced: a tf.function whose first trace creates variables is traced a
        # second time (measured: 14 traces of the update for 7 engines in one ResNet-18
        # `verify`); Keras's legacy optimizers create them in the same call otherwise
        self.optimizer._create_all_weights(self.variables)
        self._build_apply()
        self._predict = probability_function(model)
        self._outputs = output_function(model)

    def _build_apply(self) -> None:
        self._apply = tf.function(self._apply_update, autograph=False, input_signature=[
            self._state_spec, tf.TensorSpec([], tf.float32)])

    def _trace(self, chunk: Callable[..., Any]) -> Callable[..., Any]:
        """``chunk(x, y, weights, state, canary) -> (state, loss)`` as a ``tf.function`` (XLA
        when compiled).

        Without autograph, here and in the update: the step's Python control flow depends
        on Python values only (a tensor-valued ``if`` or loop raises at trace time), so the
        graph has the same ops; autograph's conversion of every call made the traces about
        12 % of a ResNet-18 `verify`'s wall time (104.8 s -> 92.4 s, measured beside a
        training job)."""
        return tf.function(chunk, jit_compile=self.compiled, autograph=False,
                           input_signature=self._chunk_signature)

    def _switch_canaries_on(self) -> None:
        """Trace the chunk steps again with canary rows (a step was given canaries)."""
        self.canaries_on = True
        self._accumulate = self._trace(self._accumulate_chunk)

    def _accumulate_chunk(self, x: tf.Tensor, y: tf.Tensor, weights: tf.Tensor,
                          state: list[tf.Tensor], canary: tfcanaries.CanaryInput
                          ) -> tuple[list[tf.Tensor], tf.Tensor]:
        """Add one chunk's clipped per-example gradients (or its summed gradient) to
        ``state``, the audit's canaries (``canary``) as more per-example records; rows of
        weight 0 (padding) add nothing. Returns the state and the chunk's summed loss over
        its weighted rows."""
        if self.query.per_example:
            losses, records = dp.per_example_gradients(self.model, self.variables, x, y)
            records = [r * tf.reshape(weights, [-1] + [1] * (len(r.shape) - 1))
                       for r in records]
            k = self.mechanism.microbatch_size
            if self.canaries_on:
                # the canaries: more per-example records, before the microbatch means and
                # the query's clipping (k copies each: a microbatch whose mean is the canary)
                records = [tf.concat([r, c], axis=0) for r, c in zip(
                    records, tfcanaries.gradient_rows(canary, self.variables, k),
                    strict=True)]
            records = dp.microbatch_means(records, k)
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

    def _apply_update(self, state: list[tf.Tensor], divisor: tf.Tensor) -> list[tf.Tensor]:
        grads = self.optimizer.noised_mean(state, divisor)
        self.optimizer.apply_gradients(zip(grads, self.variables, strict=True))
        return tfcanaries.watched_values(grads, self._watch)

    def _weighted(self, x: np.ndarray, y: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(x, y, weights)`` of a chunk: padded to its size class with zero-weight rows when
        the steps are compiled, else itself with weights 1; each row's weight times its
        class's (``mechanism.class_weights``, non-private steps only)."""
        pad_to = padded_size(len(y), self.physical) if self.pad_chunks else None
        return weighted_chunk(np.asarray(x), np.asarray(y), pad_to,
                              self.mechanism.class_weights)

    def _canary_chunk(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The chunk that carries canaries left over after the real chunks: one microbatch of
        zero examples of weight 0 (they add nothing; the traced step needs rows to map
        over)."""
        k = self.mechanism.microbatch_size
        x, y, _ = self._weighted(np.zeros((k, *self._input_shape), self._x_dtype),
                                 np.zeros(k, np.int64))
        return x, y, np.zeros(len(y), np.float32)

    def train_step(self, chunks: Sequence[Chunk], divisor: float | None = None,
                   extra: Mapping[str, np.ndarray] | None = None,
                   canaries: CanaryRecords | None = None) -> float:
        """Accumulate the chunks' clipped gradients, then noise once, divide and step.

        ``divisor``: of the noised sum; default the expected batch size B (see
        ``factors.normalisation``). ``extra``: a neutral-layout vector added to the clipped
        sum before the noise; ``canaries``: per-example records clipped with the chunks'
        examples (both: :class:`dpcore.stepengine.StepEngine`).
        """
        chunks = list(chunks)
        if canaries is not None and canaries.count and not self.canaries_on:
            self._switch_canaries_on()
        state = self.optimizer.initial_sample_state(self.variables)
        loss = 0.0
        per_chunk = max((len(y) for _, y in chunks), default=1)
        for i, part in with_canaries(len(chunks), canaries, per_chunk):
            if i is None:
                x, y, weights = self._canary_chunk()
            else:
                x, y, weights = self._weighted(np.asarray(chunks[i][0], self._x_dtype),
                                               np.asarray(chunks[i][1], np.int64))
            state, chunk_loss = self._accumulator(x, y)(
                tf.constant(x), tf.constant(y), tf.constant(weights), state,
                tfcanaries.canary_input(part, self._variable_keys, self._routed))
            loss += float(chunk_loss)
        if extra is not None:
            state = self.optimizer.add_to_sum(
                state, neutral_to_variables(self.model, self.variables, extra))
        if divisor is None:
            divisor = float(self.mechanism.expected_batch_size)
        values = self._apply(state, tf.constant(divisor, tf.float32))
        if self._watching:
            watched = [k for k, idx in zip(self._variable_keys, self._watch, strict=True)
                       if idx is not None]
            self._watched = {str(k): np.asarray(v, np.float64) * divisor
                             for k, v in zip(watched, values, strict=True)}
        return loss

    @property
    def _watching(self) -> bool:
        return any(idx is not None for idx in self._watch)

    def watch(self, coordinates: Mapping[str, np.ndarray]) -> None:
        """Report the noised sum at ``coordinates`` after every step (:meth:`watched`)."""
        unknown = sorted(set(coordinates) - {k for k in self._variable_keys if k})
        if unknown:
            raise ConfigError(f"watched weight key {unknown[0]!r} is not one the engine "
                              "trains")
        self._watch = [None if k not in coordinates else
                       tf.constant(np.asarray(coordinates[k], np.int64), tf.int64)
                       for k in self._variable_keys]
        self._build_apply()

    def watched(self) -> dict[str, np.ndarray] | None:
        """The last step's noised sum at the watched coordinates (the gradient handed to the
        optimizer, times the divisor), or None."""
        return self._watched

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
