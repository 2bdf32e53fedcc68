"""Train one model with Keras + TensorFlow Privacy: the backend contract's ``train`` (the one
assembly of a run, :func:`dpcore.assembly.train`, on this backend), how TF is configured for
a run, what it records of its runtime and its library's epsilon, and the checkpoints.

The assembly, loop, batches, EMA, history and RunResult are shared (:mod:`dpcore.assembly`,
:mod:`dpcore.trainloop`); the TF step engines are :mod:`tfpipe.engine` (per-example gradients
of each physical chunk with ``tf.vectorized_map``, clipped and summed by a TF Privacy DP
query, noised once per logical batch and divided by the expected batch size by a TF Privacy
DP optimizer subclass, :mod:`tfpipe.dp`) and :mod:`tfpipe.fast`.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import tensorflow as tf

from dpcore.accounting import PrivacyPlan
from dpcore.assembly import backend_train
from dpcore.config import PerfSpec
from dpcore.errors import ConfigError
from dpcore.trained import TrainedModel, load_trained
from dpcore.trained import save_checkpoint as _save_checkpoint
from tfpipe.accounting import tf_privacy_epsilon
from tfpipe.engine import TfStepEngine  # also imported from here by callers and tests
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


#: The backend contract's ``train``: :func:`dpcore.assembly.train` on this backend.
train = backend_train(BACKEND)


def save_checkpoint(trained: TrainedModel, path: str | Path) -> Path:
    """Write the evaluation weights + metadata as one framework-neutral ``.npz``."""
    return _save_checkpoint(trained, path)


def load_checkpoint(path: str | Path) -> TrainedModel:
    """A Keras model rebuilt from a checkpoint written by either backend."""
    return load_trained(path, BACKEND, build_model, set_weights)


__all__ = ["BACKEND", "TfStepEngine", "configure_tensorflow", "library_epsilon",
           "load_checkpoint", "runtime_record", "save_checkpoint", "train"]
