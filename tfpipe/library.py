"""``recipe: library`` on TensorFlow: DP-SGD the way TF Privacy's tutorials run it.

A Keras model with Keras' default initialisers, compiled with TF Privacy's
``VectorizedDPKerasSGDOptimizer`` (``l2_norm_clip``, ``noise_multiplier``, ``num_microbatches
= batch_size / factors.microbatch_size``) and a per-example loss vector
(``SparseCategoricalCrossentropy(from_logits=True, reduction=NONE)``), trained with
``model.fit`` on a shuffled ``tf.data`` pipeline of fixed-size batches (``drop_remainder``).
Nothing of the bench is in the step. Its epsilon is TF Privacy's own
``compute_dp_sgd_privacy`` (the function the tutorials call; RDP, Poisson assumed).

Under ``model.fit`` both of TF Privacy's SGD optimizers compute microbatch gradients the same
way (``tape.jacobian`` with pfor, then clip each, sum, add one Gaussian draw of std
``l2_norm_clip * noise_multiplier``, divide by ``num_microbatches``; measured on CNN4/MNIST at
batch 128 on 2 busy cores: 1210 s (vectorised) and 1152 s per 60k-example epoch).

Large batches: the Jacobian backpropagates every microbatch's loss through the whole batch,
so its time and memory grow with the square of the batch: CNN4 on MNIST at batch 1024 asks
for one 11 GB tensor (``MaxPoolGrad``) and fails. When the batch exceeds
``perf.library_jacobian_batch_size`` the runner uses the optimizer's own
``gradient_accumulation_steps = k`` of ``DPKerasSGDOptimizer`` (the vectorised class does not
take it; TF Privacy's documented answer for batches that do not
fit: each of the k physical steps adds noise of std ``l2_norm_clip * noise_multiplier``, so
the effective multiplier is ``noise_multiplier * sqrt(k)``) with ``noise_multiplier = sigma /
sqrt(k)`` per physical step, so that k accumulated steps give exactly the noise of one batch
at sigma, and each step divides by its own microbatch count and the accumulator by k, so the
clipped sum is divided by the logical batch's microbatch count. An epoch takes
``(n // batch) * k`` physical batches, whole logical batches only.

Noise: TF Privacy's optimizers draw it with ``tf.random.normal`` and no seed argument, so the
only key the recipe can give it is TF's global seed: set to the run's noise key
(:mod:`dpcore.noise_key`, stream ``library``) after the model and the shuffled pipeline are
built (their seeds stay the run seed's) and before ``compile``, so the noise ops are seeded
by it. With ``noise_key: secret`` that key is secret; the draw itself is TF's single normal
(the optimizer takes no sampler: no floating-point hardening is possible through its API).

The audit's gradient canaries (white-box, ``audit_canaries.kind: gradient``) enter
``DPKerasSGDOptimizer``'s step through its own ``GaussianSumQuery``
(:class:`CanaryGaussianSumQuery`: the library's ``accumulate_record`` clips them, its
``get_noised_result`` noises them). ``VectorizedDPKerasSGDOptimizer`` has no such entry
(:data:`NO_CANARY_ENTRY`): a run of it audits with input canaries.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow_privacy.privacy.dp_query import gaussian_query

from dpcore.accounting import PrivacyPlan
from dpcore.config import PerfSpec, RunConfig
from dpcore.data.dataset import Dataset
from dpcore.errors import ConfigError
from dpcore.libraryloop import LibraryRecipe, LibraryRunner
from dpcore.noise_key import noise_key
from dpcore.predicting import model_inputs
from dpcore.recipes import LIBRARY_TRAINERS
from dpcore.trainhooks import CanarySource
from tfpipe.models import build_model, get_weights, set_weights, variable_keys
from tfpipe.predict import output_function, probability_function

TRAINER = LIBRARY_TRAINERS["tf"]

#: Why the audit's gradient canaries cannot enter ``VectorizedDPKerasSGDOptimizer``.
NO_CANARY_ENTRY = (
    "audit_canaries.kind='gradient' has no entry into TF Privacy's "
    "VectorizedDPKerasSGDOptimizer (the recipe's optimizer when train.batch_size <= "
    "perf.library_jacobian_batch_size): its _compute_gradients clips the Jacobian rows of "
    "the loss vector with clip_gradients_vmap and draws its noise with tf.random.normal in "
    "one function, with no DPQuery that could take a record, and a canary as one more loss "
    "row would change its divisor (num_microbatches) for every example; valid: "
    "audit_canaries.kind=input, or perf.library_jacobian_batch_size below train.batch_size "
    "(the recipe then runs DPKerasSGDOptimizer, whose GaussianSumQuery takes the canaries "
    "through its accumulate_record)")


def accumulation_steps(config: RunConfig, physical_batch_size: int | None) -> int:
    """TF Privacy's ``gradient_accumulation_steps`` k for a DP run: the smallest k with
    ``batch_size / k <= physical_batch_size`` that splits the batch into equal physical
    batches of whole microbatches (1 for a non-private run, or when the batch fits).

    A physical batch holds at least one microbatch: when ``physical_batch_size`` is smaller
    than ``microbatch_size`` (e.g. 16 < 32), k is ``batch_size / microbatch_size`` (one
    microbatch per physical step). The search is bounded by that k, so it always ends."""
    batch, micro = config.train.batch_size, config.factors.microbatch_size
    if not config.privacy.is_dpsgd or physical_batch_size is None or \
            batch <= physical_batch_size:
        return 1
    one_microbatch_each = batch // micro  # the largest k: the config checks micro divides batch
    fitting = (k for k in range(math.ceil(batch / physical_batch_size), one_microbatch_each + 1)
               if batch % k == 0 and (batch // k) % micro == 0)
    return next(fitting, one_microbatch_each)


def trainer_name(config: RunConfig, accumulation: int) -> str:
    """The TF Privacy class and API that trains a run, as the result records it."""
    if not config.privacy.is_dpsgd:
        return "tf.keras.optimizers.legacy.SGD via model.fit (non-private)"
    if accumulation == 1:
        return TRAINER
    return f"DPKerasSGDOptimizer (gradient_accumulation_steps={accumulation}) via model.fit"


class CanaryGaussianSumQuery(gaussian_query.GaussianSumQuery):
    """TF Privacy's ``GaussianSumQuery`` that also takes the audit's gradient canaries.

    Before its noise (the library's ``get_noised_result``), each canary record of the step is
    added with the library's own ``accumulate_record`` (``preprocess_record``: its
    ``tf.clip_by_global_norm`` to ``l2_norm_clip``), then the noised sum is kept at the
    watched coordinates. The step's records and the watched coordinates live in variables
    (written between steps by :class:`CanaryCallback`), so ``model.fit``'s compiled step
    reads them at run time.
    """

    def __init__(self, l2_norm_clip: float, stddev: float, shapes: list[tuple[int, ...]]
                 ) -> None:
        super().__init__(l2_norm_clip, stddev)
        self._shapes = shapes
        self.count = tf.Variable(0, dtype=tf.int32, trainable=False)

        def vector(dtype: tf.DType) -> tf.Variable:
            return tf.Variable(tf.zeros([0], dtype), shape=tf.TensorShape([None]),
                               trainable=False)

        self.records = [(vector(tf.int32), vector(tf.int32), vector(tf.float32))
                        for _ in shapes]
        self.watch = [vector(tf.int32) for _ in shapes]
        self.seen = [vector(tf.float32) for _ in shapes]

    def get_noised_result(self, sample_state: Any, global_state: Any) -> tuple[Any, Any, Any]:
        """The canaries through ``accumulate_record``, then the library's noised sum."""
        params = self.derive_sample_params(global_state)
        dense = []
        for shape, (rows, flat, values) in zip(self._shapes, self.records, strict=True):
            size = int(np.prod(shape))
            dense.append(tf.reshape(tf.scatter_nd(tf.stack([rows, flat], axis=1), values,
                                                  tf.stack([self.count, size])),
                                    [-1, *shape]))

        def one(i: tf.Tensor, state: Any) -> tuple[tf.Tensor, Any]:
            return i + 1, self.accumulate_record(params, state, [d[i] for d in dense])

        _, sample_state = tf.while_loop(lambda i, _: i < self.count, one,
                                        [tf.constant(0), sample_state])
        result, global_state, event = super().get_noised_result(sample_state, global_state)
        for seen, idx, value in zip(self.seen, self.watch, result, strict=True):
            seen.assign_add(tf.gather(tf.reshape(value, [-1]), idx))
        return result, global_state, event


class CanaryCallback(tf.keras.callbacks.Callback):
    """Hands a logical step's canary records to :class:`CanaryGaussianSumQuery` before its
    first physical batch (``gradient_accumulation_steps`` batches make one update) and
    reports the step's noised sum (the sum over its physical batches) after its last."""

    def __init__(self, query: CanaryGaussianSumQuery, canaries: CanarySource,
                 keys: list[str | None], accumulation: int) -> None:
        super().__init__()
        self.query = query
        self.canaries = canaries
        self.keys = keys
        self.accumulation = accumulation
        coordinates = canaries.coordinates()
        for var, key in zip(query.watch, keys, strict=True):
            var.assign(np.asarray(coordinates.get(str(key), []), np.int32))

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        first = batch % self.accumulation == 0
        records = self.canaries.step_records() if first else None
        self.query.count.assign(0 if records is None else records.count)
        for key, (rows, flat, values) in zip(self.keys, self.query.records, strict=True):
            sparse = None if records is None or key is None else records.gradient.get(key)
            rows.assign(np.asarray([] if sparse is None else sparse.rows, np.int32))
            flat.assign(np.asarray([] if sparse is None else sparse.index[:, 0], np.int32))
            values.assign(np.asarray([] if sparse is None else sparse.values, np.float32))
        if first:
            for seen, idx in zip(self.query.seen, self.query.watch, strict=True):
                seen.assign(tf.zeros(tf.shape(idx), tf.float32))

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if batch % self.accumulation == self.accumulation - 1:
            self.canaries.observed({str(k): seen.numpy().astype(np.float64)
                                    for k, seen in zip(self.keys, self.query.seen, strict=True)
                                    if k is not None and int(tf.size(seen)) > 0})


def takes_gradient_canaries(config: RunConfig) -> bool:
    """Whether the run's TF Privacy optimizer takes the audit's gradient canaries (a DP run
    with ``audit_canaries.kind: gradient``)."""
    spec = config.audit_canaries
    return config.privacy.is_dpsgd and spec.active and spec.kind == "gradient"


def make_optimizer(config: RunConfig, noise_multiplier: float, accumulation: int = 1,
                   variables: Sequence[tf.Variable] = ()) -> tf.keras.optimizers.Optimizer:
    """TF Privacy's ``VectorizedDPKerasSGDOptimizer`` (DP runs; ``DPKerasSGDOptimizer`` when
    ``accumulation`` > 1, the only one of the two that accumulates) or Keras' legacy SGD.
    With gradient canaries (:func:`takes_gradient_canaries`, ``accumulation`` > 1: see
    :func:`library_recipe`) ``DPKerasSGDOptimizer``'s own class, ``GenericDPSGDOptimizer``,
    around a :class:`CanaryGaussianSumQuery` (the ``GaussianSumQuery`` it builds, taking the
    canaries) over the trainable ``variables``.

    Args:
        noise_multiplier: sigma of one logical batch (noise std / clip norm).
        accumulation: TF Privacy's ``gradient_accumulation_steps`` k; each physical step gets
            ``noise_multiplier / sqrt(k)`` and ``batch_size / k / microbatch_size``
            microbatches, so k accumulated steps make one update at sigma.
        variables: the model's trainable variables (gradient canaries only).
    """
    train = config.train
    if not config.privacy.is_dpsgd:
        return tf.keras.optimizers.legacy.SGD(learning_rate=train.lr, momentum=train.momentum)
    from tensorflow_privacy import DPKerasSGDOptimizer, VectorizedDPKerasSGDOptimizer
    from tensorflow_privacy.privacy.optimizers.dp_optimizer_keras import GenericDPSGDOptimizer

    common = {"l2_norm_clip": config.privacy.max_grad_norm,
              "num_microbatches": train.batch_size // accumulation
              // config.factors.microbatch_size,
              "learning_rate": train.lr, "momentum": train.momentum}
    if takes_gradient_canaries(config):
        # DPKerasSGDOptimizer is GenericDPSGDOptimizer around a GaussianSumQuery of stddev
        # l2_norm_clip * noise_multiplier: the same, with the query taking the canaries
        clip = common.pop("l2_norm_clip")
        query = CanaryGaussianSumQuery(clip, clip * noise_multiplier / math.sqrt(accumulation),
                                       [tuple(v.shape) for v in variables])
        return GenericDPSGDOptimizer(dp_sum_query=query, gradient_accumulation_steps=accumulation,
                                     **common)
    if accumulation == 1:
        return VectorizedDPKerasSGDOptimizer(noise_multiplier=noise_multiplier, **common)
    return DPKerasSGDOptimizer(noise_multiplier=noise_multiplier / math.sqrt(accumulation),
                               gradient_accumulation_steps=accumulation, **common)


def make_loss(config: RunConfig) -> tf.keras.losses.Loss:
    """The tutorials' loss: a per-example vector for DP (the optimizer forms microbatches),
    Keras' default mean for a non-private run."""
    reduction = (tf.keras.losses.Reduction.NONE if config.privacy.is_dpsgd
                 else tf.keras.losses.Reduction.AUTO)
    return tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=reduction)


class KerasFitRunner:
    """One ``model.fit`` epoch at a time on a shuffled, fixed-size-batch ``tf.data`` pipeline.

    ``physical_batch_size`` (examples per TF Privacy Jacobian, None: the whole batch) sets TF
    Privacy's gradient accumulation (:func:`accumulation_steps`); the update is the same in
    distribution.
    """

    #: How the pipeline samples its batches (shuffled, fixed size, remainder dropped).
    sampling = "shuffle"

    def __init__(self, model: tf.keras.Model, config: RunConfig, dataset: Dataset,
                 plan: PrivacyPlan, physical_batch_size: int | None = None) -> None:
        self.model = model
        self.config = config
        n, batch = len(dataset.x_train), config.train.batch_size
        if batch > n:
            raise ConfigError(f"train.batch_size={batch} exceeds the {n} training examples; "
                              f"valid with recipe=library on tf: at most {n}")
        self.steps_per_epoch = n // batch
        self.sampling_rate = batch / n
        self.batch_size = batch
        self.accumulation = accumulation_steps(config, physical_batch_size)
        self.trainer = trainer_name(config, self.accumulation)
        x = model_inputs(dataset.x_train, dataset.task)
        self.data = self.batches(
            tf.data.Dataset.from_tensor_slices((x, dataset.y_train.astype(np.int64))),
            n, config.seed)
        if config.privacy.is_dpsgd:  # the seed of TF Privacy's noise ops (module docstring)
            tf.random.set_seed(noise_key(config, "library", bits=64).value >> 1)  # int64
        self.optimizer = make_optimizer(config, plan.noise_multiplier, self.accumulation,
                                        model.trainable_variables)
        model.compile(optimizer=self.optimizer, loss=make_loss(config))
        self.callbacks: list[tf.keras.callbacks.Callback] = []
        self._predict = probability_function(model)
        self._outputs = output_function(model)
        self._dtype = model.inputs[0].dtype.as_numpy_dtype

    def batches(self, source: tf.data.Dataset, n: int, seed: int) -> tf.data.Dataset:
        """``source`` (n elements) as ``model.fit`` takes it: shuffled (reshuffled every
        pass, seeded), in fixed physical batches, whole logical batches only. The order
        depends on n and the seed only, so a source of indices gives the batches' indices."""
        physical = int(self.batch_size) // self.accumulation
        return (source.shuffle(n, seed=seed, reshuffle_each_iteration=True)
                .batch(physical, drop_remainder=True)
                .take(self.steps_per_epoch * self.accumulation))

    def train_epoch(self, epoch: int) -> tuple[float, int]:
        """``model.fit`` for epoch ``epoch``; returns (summed example loss, examples)."""
        history = self.model.fit(self.data, epochs=epoch, initial_epoch=epoch - 1, verbose=0,
                                 callbacks=self.callbacks)
        examples = (self.steps_per_epoch * self.accumulation
                    * int(self.data.element_spec[1].shape[0] or 0))
        mean_loss = float(history.history["loss"][-1])
        return mean_loss * examples, examples

    def use_canaries(self, canaries: CanarySource) -> None:
        """Take the audit's gradient canaries in every logical step: the optimizer's
        :class:`CanaryGaussianSumQuery` adds them with TF Privacy's ``accumulate_record``
        (its clipping) before its noise, in the first physical batch of each step, and keeps
        the noised sum at the canaries' coordinates (:class:`CanaryCallback`)."""
        query = getattr(self.optimizer, "_dp_sum_query", None)
        if not isinstance(query, CanaryGaussianSumQuery):
            raise ConfigError(f"{self.trainer} has no entry for gradient canaries; valid: "
                              "audit_canaries.kind=input")
        self.callbacks = [CanaryCallback(query, canaries, variable_keys(
            self.model, self.model.trainable_variables), self.accumulation)]

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        """Softmax probabilities of one batch of model inputs."""
        return self._predict(np.asarray(x, self._dtype))

    def predict_outputs(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(logits, softmax probabilities) of one batch of model inputs, one forward pass."""
        return self._outputs(np.asarray(x, self._dtype))

    def get_weights(self) -> dict[str, np.ndarray]:
        """Current weights, neutral layout."""
        return get_weights(self.model)

    def own_epsilon(self, plan: PrivacyPlan, steps: int) -> dict[str, float | None]:
        """TF Privacy's epsilon of the whole epochs that ``steps`` steps make
        (:func:`tf_privacy_own_epsilon`)."""
        epochs = math.ceil(steps / self.steps_per_epoch)
        return tf_privacy_own_epsilon(self.config, plan.batches.n_examples, epochs,
                                      plan.noise_multiplier, plan.delta)

    def close(self) -> None:
        """Nothing to release: ``model.fit`` attaches nothing to the model."""


class KerasFitStep:
    """The TF Privacy recipe's step for ``dpcompare verify`` (``dpcore.verify.steppers.
    LibraryStep``): a :class:`KerasFitRunner`'s compiled model, stepped with Keras's
    ``train_on_batch`` (the step ``model.fit`` runs on each batch: TF Privacy's optimizer,
    its Jacobian, clipping and noise) on a logical batch of exactly ``train.batch_size``
    examples (TF Privacy's fixed number of microbatches), cut into the runner's
    ``gradient_accumulation_steps`` physical batches. The divisor is TF Privacy's: the number
    of microbatches of the logical batch; the sampler is the runner's ``tf.data`` pipeline.
    """

    sampling = "shuffle"

    def __init__(self, config: RunConfig, dataset: Dataset, plan: PrivacyPlan,
                 perf: PerfSpec) -> None:
        tf.keras.utils.set_random_seed(config.seed)  # TF Privacy's noise draws from it
        self.model = build_model(config.model, dataset.input_shape, dataset.n_classes,
                                 seed=None, vocab_size=dataset.vocabulary_size)
        self.runner = KerasFitRunner(self.model, config, dataset, plan,
                                     perf.library_jacobian_batch_size)
        self.seed = config.seed
        self.n = len(dataset.x_train)
        self.microbatch_size = config.factors.microbatch_size
        self.fixed_batch_size = config.train.batch_size
        self.sampling_rate = self.runner.sampling_rate
        self.steps_per_epoch = self.runner.steps_per_epoch
        self._dtype = self.model.inputs[0].dtype.as_numpy_dtype

    def step(self, chunks: Sequence[tuple[np.ndarray, np.ndarray]], n_examples: int,
             divisor: float | None = None) -> None:
        """``train_on_batch`` on each physical batch of the logical batch ``chunks``."""
        x = np.concatenate([c[0] for c in chunks]).astype(self._dtype)
        y = np.concatenate([c[1] for c in chunks]).astype(np.int64)
        if divisor is not None or len(y) != self.fixed_batch_size:
            raise ConfigError(f"TF Privacy's step takes batches of exactly "
                              f"{self.fixed_batch_size} examples and no divisor; got "
                              f"{len(y)} and divisor {divisor}")
        physical = self.fixed_batch_size // self.runner.accumulation
        for start in range(0, len(y), physical):
            self.model.train_on_batch(x[start:start + physical], y[start:start + physical])

    def divisor_of(self, n_examples: int) -> float:
        """TF Privacy divides by the logical batch's number of microbatches."""
        return float(self.fixed_batch_size // self.microbatch_size)

    def get_weights(self) -> dict[str, np.ndarray]:
        return get_weights(self.model)

    def set_weights(self, weights: Mapping[str, np.ndarray]) -> None:
        set_weights(self.model, weights)

    def index_batches(self, epochs: int) -> Iterator[np.ndarray]:
        """The runner's pipeline (:meth:`KerasFitRunner.batches`) over indices: each logical
        batch's example indices, ``epochs`` passes."""
        pipeline = self.runner.batches(tf.data.Dataset.range(self.n), self.n, self.seed)
        for _ in range(epochs):
            parts: list[np.ndarray] = []
            for physical in pipeline:
                parts.append(physical.numpy().astype(np.int64))
                if len(parts) == self.runner.accumulation:
                    yield np.concatenate(parts)
                    parts = []

    def close(self) -> None:
        """Nothing to release (Keras attaches nothing beyond the compiled model)."""


def library_step(config: RunConfig, dataset: Dataset, plan: PrivacyPlan, perf: PerfSpec
                 ) -> KerasFitStep:
    """The recipe's step for ``dpcompare verify`` (:class:`KerasFitStep`)."""
    return KerasFitStep(config, dataset, plan, perf)


def tf_privacy_own_epsilon(config: RunConfig, n_train: int, epochs: int, noise: float,
                           delta: float) -> dict[str, float | None]:
    """TF Privacy's ``compute_dp_sgd_privacy(n, batch_size, noise, epochs, delta)``, called
    as its tutorials do (it assumes Poisson sampling at q = batch/n)."""
    from absl import logging as absl_logging
    from tensorflow_privacy.privacy.analysis.compute_dp_sgd_privacy_lib import (
        compute_dp_sgd_privacy,
    )

    previous = absl_logging.get_verbosity()
    absl_logging.set_verbosity(absl_logging.ERROR)
    logging.getLogger("absl").setLevel(logging.ERROR)
    try:
        eps, _ = compute_dp_sgd_privacy(n_train, config.train.batch_size, noise, epochs, delta)
    finally:
        absl_logging.set_verbosity(previous)
    return {"tf_privacy_compute_dp_sgd_privacy": float(eps)}


def library_recipe(model: tf.keras.Model, config: RunConfig, perf: PerfSpec) -> LibraryRecipe:
    """Train as TF Privacy's tutorials do (see the module docstring): a
    :class:`KerasFitRunner` (``perf.library_jacobian_batch_size`` sets the gradient
    accumulation). The model keeps Keras' default initialisers, drawn from TF's global seed
    (``config.seed``), not the bench's neutral initialisation."""
    accumulation = accumulation_steps(config, perf.library_jacobian_batch_size)
    trainer = trainer_name(config, accumulation)
    if takes_gradient_canaries(config) and accumulation == 1:
        raise ConfigError(NO_CANARY_ENTRY)

    def make_runner(plan: PrivacyPlan, data: Dataset) -> LibraryRunner:
        return KerasFitRunner(model, config, data, plan, perf.library_jacobian_batch_size)

    return LibraryRecipe(
        trainer=trainer, make_runner=make_runner,
        details={"trainer": trainer,
                 "num_microbatches": config.train.batch_size // config.factors.microbatch_size,
                 "gradient_accumulation_steps": accumulation})
