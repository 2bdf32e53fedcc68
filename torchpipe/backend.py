"""The torch backend as :func:`dpcore.backend.load_backend` sees it (``dpcore.backend.Backend``).

Re-exports the public entry points of :mod:`torchpipe.train`, :mod:`torchpipe.library`,
:mod:`torchpipe.frontsplit`, :mod:`torchpipe.predict` and :mod:`torchpipe.explain`; names the
step engines (:mod:`torchpipe.engine` reference, :mod:`torchpipe.fast` fast); and puts a model
on its device and says what a run records of the engine and runtime (the hooks
:func:`dpcore.assembly.train` calls).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from dpcore.backend import EngineFactory
from dpcore.config import PerfSpec, RunConfig
from torchpipe import fast
from torchpipe.accounting import accountant_epsilons
from torchpipe.device import device_record, training_device
from torchpipe.engine import DEFAULT_GRAD_SAMPLE_MODE, TorchStepEngine, runtime_record
from torchpipe.explain import gradcam
from torchpipe.fast import FastTorchStepEngine
from torchpipe.frontsplit import split_fixed_front
from torchpipe.library import library_recipe, library_step
from torchpipe.models import build_model, get_weights, set_weights
from torchpipe.predict import predict_logits, predict_outputs, predict_proba
from torchpipe.train import BACKEND, library_epsilon, load_checkpoint, save_checkpoint, train
from torchpipe.train import configure_torch as configure

NAME = BACKEND

#: Whether several open step engines may drive one model (each sets its weights before a
#: step): the torch engines attach hooks (Opacus's grad samplers, the fast
#: engine's recorders) that :meth:`close` removes.
ENGINES_SHARE_MODELS = False

#: The step engines by ``perf.engine`` name.
ENGINES: Mapping[str, EngineFactory] = {"fast": FastTorchStepEngine,
                                        "reference": TorchStepEngine}

#: ``verify --processes auto`` checks the engines at the same time from this many weights:
#: measured here (2 cores, nothing else running, three alternating runs of the CLI each):
#: ResNet-18 (11.2M weights) 29.7 / 26.9 / 28.1 s one engine after another, 23.0 / 27.2 /
#: 24.0 s at the same time; cnn4 on digits 4.2 s against 8.2 s (a second process's import
#: costs more than it saves).
VERIFY_PARALLEL_MIN_WEIGHTS: int | None = 1_000_000


def unsupported_fast_layers(model: Any) -> list[str]:
    """Modules of ``model`` the fast engine has no rule for
    (:func:`torchpipe.fast.unsupported_layers`)."""
    return fast.unsupported_layers(model)


def place_model(model: nn.Module) -> dict[str, Any]:
    """Move ``model`` to the training device (a GPU when one is visible, see
    :mod:`torchpipe.device`); returns what a run's ``perf`` records of it."""
    device = training_device()
    model.to(device)
    return device_record(device)


def describe(engine: str, config: RunConfig, perf: PerfSpec) -> dict[str, Any]:
    """What a harmonised run's ``perf`` records of step engine ``engine`` (the Opacus
    grad-sample mode of the reference engine's DP-SGD) and of the runtime
    (:func:`torchpipe.engine.runtime_record`)."""
    return {"per_example_gradients": fast.DESCRIPTION if engine == "fast"
            else "opacus GradSampleModule",
            "grad_sample_mode": DEFAULT_GRAD_SAMPLE_MODE
            if config.privacy.is_dpsgd and engine == "reference" else None,
            **runtime_record(perf)}


def eval_mode(model: nn.Module) -> None:
    """``model.eval()``: a trained model is returned in eval mode."""
    model.eval()


__all__ = ["ENGINES", "ENGINES_SHARE_MODELS", "NAME", "VERIFY_PARALLEL_MIN_WEIGHTS",
           "accountant_epsilons", "build_model", "configure", "describe",
           "eval_mode", "get_weights", "gradcam", "library_epsilon", "library_recipe",
           "library_step",
           "load_checkpoint", "place_model", "predict_logits", "predict_outputs",
           "predict_proba",
           "save_checkpoint", "set_weights", "split_fixed_front", "train",
           "unsupported_fast_layers"]
