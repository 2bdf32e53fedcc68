"""The torch backend as :func:`dpcore.backend.load_backend` sees it (``dpcore.backend.Backend``).

Re-exports the public entry points of :mod:`torchpipe.train`, :mod:`torchpipe.predict` and
:mod:`torchpipe.explain`, and names the step engines (:mod:`torchpipe.engine` reference,
:mod:`torchpipe.fast` fast).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dpcore.backend import EngineFactory
from torchpipe.accounting import accountant_epsilons
from torchpipe.engine import TorchStepEngine
from torchpipe.explain import gradcam
from torchpipe.fast import FastTorchStepEngine, unsupported_layers
from torchpipe.library import library_step
from torchpipe.models import build_model, get_weights, set_weights
from torchpipe.predict import predict_logits, predict_outputs, predict_proba
from torchpipe.train import BACKEND, library_epsilon, load_checkpoint, save_checkpoint, train

NAME = BACKEND

#: The step engines by ``perf.engine`` name.
ENGINES: Mapping[str, EngineFactory] = {"fast": FastTorchStepEngine,
                                        "reference": TorchStepEngine}


def unsupported_fast_layers(model: Any) -> list[str]:
    """Modules of ``model`` the fast engine has no rule for
    (:func:`torchpipe.fast.unsupported_layers`)."""
    return unsupported_layers(model)


__all__ = ["ENGINES", "NAME", "accountant_epsilons", "build_model", "get_weights", "gradcam",
           "library_epsilon", "library_step", "load_checkpoint", "predict_logits",
           "predict_outputs", "predict_proba",
           "save_checkpoint", "set_weights", "train", "unsupported_fast_layers"]
