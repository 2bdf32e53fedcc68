"""Train one model with Keras + TensorFlow Privacy, running the bench's DP-SGD exactly.

The loop, batches, EMA, history and RunResult are shared (:mod:`dpcore.pipeline`,
:mod:`dpcore.trainloop`); this module supplies the TF step engine: per-example gradients of
each physical chunk (``tf.vectorized_map``), clipped and summed by a TF Privacy DP query,
noised once per logical batch and divided by the expected batch size by a TF Privacy DP
optimizer subclass (:mod:`tfpipe.dp`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import tensorflow as tf

from dpcore.accounting import PrivacyPlan
from dpcore.backend import choose_engine
from dpcore.config import PerfSpec, RunConfig
from dpcore.data.dataset import Dataset
from dpcore.errors import ConfigError
from dpcore.frontcache import front_to_cache
from dpcore.pipeline import factor_initial_weights, fit
from dpcore.trained import TrainedModel, load_trained
from dpcore.trained import save_checkpoint as _save_checkpoint
from dpcore.trainloop import EpochCallback
from tfpipe.accounting import tf_privacy_epsilon
from tfpipe.device import device_record
from tfpipe.engine import TfStepEngine  # also imported from here by callers and tests
from tfpipe.frontsplit import split_fixed_front
from tfpipe.models import build_model, set_weights

BACKEND = "tf"


def configure_tensorflow(seed: int, perf: PerfSpec) -> None:
    """Seed Python, numpy and TF; switch deterministic kernels and set the thread count.

    Op determinism and the thread settings are process-wide; the thread count can only be set
    before TensorFlow starts its runtime (later requests are ignored).

    Raises:
        ConfigError: ``perf.xla`` with ``perf.deterministic``: XLA has no deterministic
            max-pool gradient, so TF refuses to compile the step.
    """
    if perf.xla and perf.deterministic:
        raise ConfigError(
            "perf.xla=True needs perf.deterministic=False: XLA has no deterministic MaxPool "
            "gradient, so TensorFlow cannot compile the DP step deterministically"
        )
    tf.keras.utils.set_random_seed(seed)
    if perf.deterministic:
        tf.config.experimental.enable_op_determinism()
    else:
        from tensorflow.python.framework import config as tf_config  # no public "disable"

        tf_config.disable_op_determinism()
    if perf.threads is not None:
        with contextlib.suppress(RuntimeError):  # runtime already initialised
            tf.config.threading.set_intra_op_parallelism_threads(perf.threads)
            tf.config.threading.set_inter_op_parallelism_threads(perf.threads)


def library_epsilon(plan: PrivacyPlan) -> dict[str, float | None]:
    """TF Privacy's own epsilon for the planned steps (``compute_dp_sgd_privacy``)."""
    return {"tf_privacy": tf_privacy_epsilon(plan.batches.sampling_rate, plan.noise_multiplier,
                                             plan.batches.steps, plan.delta)}


def runtime_record() -> dict[str, object]:
    """What a run's ``perf`` records of the layout and threads in effect (after
    :func:`configure_tensorflow`): Keras's NHWC images and TF's intra-/inter-op thread counts
    (0: TF's default, one per core)."""
    return {"memory_format_used": "channels_last (NHWC, Keras's layout)",
            "threads_in_effect": {
                "intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
                "inter_op": tf.config.threading.get_inter_op_parallelism_threads()}}


def train(
    config: RunConfig, dataset: Dataset, perf: PerfSpec | None = None, *,
    initial_weights: Mapping[str, np.ndarray] | None = None, progress: bool = True,
    callbacks: Sequence[EpochCallback] = (),
) -> TrainedModel:
    """Train ``config.model`` on ``dataset`` with DP-SGD as configured (TF Privacy backend).

    The arguments and the result follow the backend contract of :mod:`dpcore.pipeline`
    (``initial_weights`` default: the seeded neutral initialisation of ``config.seed``, the
    same arrays as the torch backend's). ``perf.xla`` compiles the chunk step with XLA.
    """
    perf = perf or PerfSpec()
    configure_tensorflow(config.seed, perf)
    if config.recipe == "library":
        from tfpipe.library import train_library

        return train_library(config, dataset, perf, callbacks=callbacks)
    model = build_model(config.model, dataset.input_shape, dataset.n_classes, seed=config.seed,
                        vocab_size=dataset.vocabulary_size)
    if initial_weights is None:
        initial_weights = factor_initial_weights(config, dataset)
    if initial_weights is not None:
        set_weights(model, initial_weights)
    details: dict[str, object] = {"per_example_gradients": "tf.vectorized_map per chunk",
                               "dp_query": "tensorflow_privacy SumAggregationDPQuery subclass"}
    engine_cls: type[TfStepEngine] = TfStepEngine
    unsupported: list[str] = []
    if perf.engine != "reference" and config.privacy.is_dpsgd:
        from tfpipe import fast  # loaded only when it may run

        unsupported = fast.unsupported_layers(model)
    choice = choose_engine(perf.engine, unsupported, config.factors.microbatch_size)
    if choice.engine == "fast":
        from tfpipe import fast

        engine_cls = fast.FastTfStepEngine
        details["per_example_gradients"] = fast.DESCRIPTION
    details.update(choice.details())
    details.update(device_record())
    details.update(runtime_record())
    names = front_to_cache(config, perf, dataset)
    front = split_fixed_front(model, names) if names else None
    trained_model = model if front is None else front.head  # shares the model's weights
    return fit(
        config, dataset, perf, backend=BACKEND, model=model,
        make_engine=lambda plan, mechanism: engine_cls(trained_model, config, mechanism, perf),
        library_epsilon=library_epsilon, progress=progress, callbacks=callbacks,
        perf_details=details, front=front,
    )


def save_checkpoint(trained: TrainedModel, path: str | Path) -> Path:
    """Write the evaluation weights + metadata as one framework-neutral ``.npz``."""
    return _save_checkpoint(trained, path)


def load_checkpoint(path: str | Path) -> TrainedModel:
    """A Keras model rebuilt from a checkpoint written by either backend."""
    return load_trained(path, BACKEND, build_model, set_weights)
