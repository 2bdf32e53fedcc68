"""Train one model with PyTorch + Opacus: the backend contract's ``train`` (the one assembly
of a run, :func:`dpcore.assembly.train`, on this backend), its library's epsilon, and the
checkpoints (torch's configuration is :func:`torchpipe.engine.configure_torch`).

The assembly, loop, batches, EMA, history and RunResult are shared (:mod:`dpcore.assembly`,
:mod:`dpcore.trainloop`); the torch step engines are the fast layer-wise engine
(:mod:`torchpipe.fast`) and the reference Opacus ``GradSampleModule`` engine
(:mod:`torchpipe.engine`).
"""

from __future__ import annotations

from pathlib import Path

from dpcore.accounting import PrivacyPlan
from dpcore.assembly import backend_train
from dpcore.trained import TrainedModel, load_trained
from dpcore.trained import save_checkpoint as _save_checkpoint
from torchpipe.accounting import opacus_epsilons
from torchpipe.engine import TorchStepEngine, configure_torch  # also imported from here
from torchpipe.models import build_model, set_weights

BACKEND = "torch"


def library_epsilon(plan: PrivacyPlan) -> dict[str, float | None]:
    """Opacus's own epsilons (RDP and PRV accountants) for the planned steps."""
    return dict(opacus_epsilons(plan.noise_multiplier, plan.batches.sampling_rate,
                                plan.batches.steps, plan.delta))


#: The backend contract's ``train``: :func:`dpcore.assembly.train` on this backend.
train = backend_train(BACKEND)


def save_checkpoint(trained: TrainedModel, path: str | Path) -> Path:
    """Write the evaluation weights + metadata as one framework-neutral ``.npz``."""
    return _save_checkpoint(trained, path)


def load_checkpoint(path: str | Path) -> TrainedModel:
    """A torch model rebuilt from a checkpoint written by either backend."""
    trained = load_trained(path, BACKEND, build_model, set_weights)
    trained.model.eval()
    return trained


__all__ = ["BACKEND", "TorchStepEngine", "configure_torch", "library_epsilon",
           "load_checkpoint", "save_checkpoint", "train"]
