"""The TF backend as :func:`dpcore.backend.load_backend` sees it (``dpcore.backend.Backend``).

Re-exports the public entry points of :mod:`tfpipe.train`, :mod:`tfpipe.predict` and
:mod:`tfpipe.explain`, and names the step engines (:mod:`tfpipe.engine` reference,
:mod:`tfpipe.fast` fast, the latter imported only when built).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dpcore.backend import EngineFactory
from dpcore.config import PerfSpec, RunConfig
from dpcore.trainloop import StepEngine, StepMechanism
from tfpipe.accounting import accountant_epsilons
from tfpipe.engine import TfStepEngine
from tfpipe.explain import gradcam
from tfpipe.library import library_step
from tfpipe.models import build_model, get_weights, set_weights
from tfpipe.predict import predict_logits, predict_outputs, predict_proba
from tfpipe.train import BACKEND, library_epsilon, load_checkpoint, save_checkpoint, train

NAME = BACKEND


def _fast_engine(model: Any, config: RunConfig, mechanism: StepMechanism, perf: PerfSpec
                 ) -> StepEngine:
    from tfpipe.fast import FastTfStepEngine

    return FastTfStepEngine(model, config, mechanism, perf)


#: The step engines by ``perf.engine`` name.
ENGINES: Mapping[str, EngineFactory] = {"fast": _fast_engine, "reference": TfStepEngine}


def unsupported_fast_layers(model: Any) -> list[str]:
    """Layers of ``model`` the fast engine has no rule for
    (:func:`tfpipe.fast.unsupported_layers`)."""
    from tfpipe.fast import unsupported_layers

    return unsupported_layers(model)


__all__ = ["ENGINES", "NAME", "accountant_epsilons", "build_model", "get_weights", "gradcam",
           "library_epsilon", "library_step", "load_checkpoint", "predict_logits",
           "predict_outputs", "predict_proba",
           "save_checkpoint", "set_weights", "train", "unsupported_fast_layers"]
