"""The TF backend as :func:`dpcore.backend.load_backend` sees it (``dpcore.backend.Backend``).

Re-exports the public entry points of :mod:`tfpipe.train`, :mod:`tfpipe.library`,
:mod:`tfpipe.frontsplit`, :mod:`tfpipe.predict` and :mod:`tfpipe.explain`, and TF Privacy's
membership-inference attacks (:mod:`tfpipe.attacks`, which the audit of either backend's models
uses: ``dpcore.evaluation.membership``); names the step engines (:mod:`tfpipe.engine`
reference, :mod:`tfpipe.fast` fast, the latter imported only when built); and says where a
model trains and what a run records of the engine and runtime (the hooks
:func:`dpcore.assembly.train` calls).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dpcore.backend import EngineFactory
from dpcore.config import PerfSpec, RunConfig
from dpcore.stepengine import StepEngine, StepMechanism
from tfpipe.accounting import accountant_epsilons
from tfpipe.attacks import membership_attack_library, membership_attack_names, membership_attacks
from tfpipe.device import device_record
from tfpipe.engine import TfStepEngine
from tfpipe.explain import gradcam
from tfpipe.frontsplit import split_fixed_front
from tfpipe.library import library_recipe, library_step
from tfpipe.models import build_model, get_weights, set_weights
from tfpipe.predict import predict_logits, predict_outputs, predict_proba
from tfpipe.train import (
    BACKEND,
    library_epsilon,
    load_checkpoint,
    runtime_record,
    save_checkpoint,
    train,
)
from tfpipe.train import configure_tensorflow as configure

NAME = BACKEND


def _fast_engine(model: Any, config: RunConfig, mechanism: StepMechanism, perf: PerfSpec
                 ) -> StepEngine:
    from tfpipe.fast import FastTfStepEngine

    return FastTfStepEngine(model, config, mechanism, perf)


#: Whether several open step engines may drive one model (each sets its weights before a
#: step): the TF engines trace functions over the Keras model's variables and
#: attach nothing to it.
ENGINES_SHARE_MODELS = True

#: The step engines by ``perf.engine`` name.
ENGINES: Mapping[str, EngineFactory] = {"fast": _fast_engine, "reference": TfStepEngine}

#: ``verify --processes auto`` checks the engines at the same time from this many weights:
#: each engine's steppers trace their steps (single-threaded Python, about 2.8 s per ResNet-18
#: chunk step); measured here, 2 cores, nothing else running: ResNet-18 (11.2M weights)
#: 55.6 s one engine after another, 42.2 s at the same time; cnn4 on digits 7.3 s against
#: 9.8 s (a second process's TensorFlow import costs more than its traces).
VERIFY_PARALLEL_MIN_WEIGHTS: int | None = 1_000_000


def unsupported_fast_layers(model: Any) -> list[str]:
    """Layers of ``model`` the fast engine has no rule for
    (:func:`tfpipe.fast.unsupported_layers`)."""
    from tfpipe.fast import unsupported_layers

    return unsupported_layers(model)


def place_model(model: Any) -> dict[str, Any]:
    """What a run's ``perf`` records of where ``model`` trains: TensorFlow places the ops
    itself (:func:`tfpipe.device.device_record`)."""
    return device_record()


def describe(engine: str, config: RunConfig, perf: PerfSpec) -> dict[str, Any]:
    """What a harmonised run's ``perf`` records of step engine ``engine`` (its per-example
    gradients, TF Privacy's DP query) and of the runtime
    (:func:`tfpipe.train.runtime_record`)."""
    gradients = "tf.vectorized_map per chunk"
    if engine == "fast":
        from tfpipe import fast  # loaded only when it runs

        gradients = fast.DESCRIPTION
    return {"per_example_gradients": gradients,
            "dp_query": "tensorflow_privacy SumAggregationDPQuery subclass", **runtime_record()}


def eval_mode(model: Any) -> None:
    """Nothing to set: a Keras model has no inference mode (``training=False`` is per call)."""


__all__ = ["ENGINES", "ENGINES_SHARE_MODELS", "NAME", "VERIFY_PARALLEL_MIN_WEIGHTS",
           "accountant_epsilons", "build_model", "configure", "describe",
           "eval_mode", "get_weights", "gradcam", "library_epsilon", "library_recipe",
           "library_step",
           "load_checkpoint", "membership_attack_library", "membership_attack_names",
           "membership_attacks", "place_model", "predict_logits", "predict_outputs",
           "predict_proba",
           "save_checkpoint", "set_weights", "split_fixed_front", "train",
           "unsupported_fast_layers"]
