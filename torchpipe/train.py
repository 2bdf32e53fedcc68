"""Train one model with PyTorch + Opacus, running the bench's DP-SGD exactly.

The loop, batches, EMA, history and RunResult are shared (:mod:`dpcore.pipeline`,
:mod:`dpcore.trainloop`); this module builds the model and picks the step engine
(:func:`dpcore.backend.choose_engine`): the fast layer-wise engine (:mod:`torchpipe.fast`)
where the model supports it, else the reference Opacus ``GradSampleModule`` engine
(:mod:`torchpipe.engine`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from dpcore.accounting import PrivacyPlan
from dpcore.backend import choose_engine
from dpcore.config import PerfSpec, RunConfig
from dpcore.data.dataset import Dataset
from dpcore.frontcache import front_to_cache
from dpcore.pipeline import factor_initial_weights, fit
from dpcore.trained import TrainedModel, load_trained
from dpcore.trained import save_checkpoint as _save_checkpoint
from dpcore.trainloop import EpochCallback
from torchpipe import fast
from torchpipe.accounting import opacus_epsilons
from torchpipe.device import device_record, training_device
from torchpipe.engine import (  # also imported from here by callers and tests
    DEFAULT_GRAD_SAMPLE_MODE,
    TorchStepEngine,
    configure_torch,
    runtime_record,
)
from torchpipe.frontsplit import split_fixed_front
from torchpipe.models import build_model, set_weights

BACKEND = "torch"


def library_epsilon(plan: PrivacyPlan) -> dict[str, float | None]:
    """Opacus's own epsilons (RDP and PRV accountants) for the planned steps."""
    return dict(opacus_epsilons(plan.noise_multiplier, plan.batches.sampling_rate,
                                plan.batches.steps, plan.delta))


def train(
    config: RunConfig, dataset: Dataset, perf: PerfSpec | None = None, *,
    initial_weights: Mapping[str, np.ndarray] | None = None, progress: bool = True,
    callbacks: Sequence[EpochCallback] = (),
) -> TrainedModel:
    """Train ``config.model`` on ``dataset`` with DP-SGD as configured (Opacus backend).

    The arguments and the result follow the backend contract of :mod:`dpcore.pipeline`; the
    returned model is a plain ``nn.Module`` (Opacus's hooks removed) in eval mode.
    """
    perf = perf or PerfSpec()
    configure_torch(config.seed, perf)
    if config.recipe == "library":
        from torchpipe.library import train_library

        return train_library(config, dataset, perf, callbacks=callbacks)
    model = build_model(config.model, dataset.input_shape, dataset.n_classes, seed=config.seed,
                        vocab_size=dataset.vocabulary_size)
    if initial_weights is None:
        initial_weights = factor_initial_weights(config, dataset)
    if initial_weights is not None:
        set_weights(model, initial_weights)
    device = training_device()  # a GPU when one is visible (see torchpipe.device)
    model.to(device)
    unsupported = fast.unsupported_layers(model) if config.privacy.is_dpsgd else []
    choice = choose_engine(perf.engine, unsupported, config.factors.microbatch_size)
    engine_cls = fast.FastTorchStepEngine if choice.engine == "fast" else TorchStepEngine
    details: dict[str, str | None] = {
        "per_example_gradients": fast.DESCRIPTION if choice.engine == "fast"
        else "opacus GradSampleModule",
        "grad_sample_mode": DEFAULT_GRAD_SAMPLE_MODE
        if config.privacy.is_dpsgd and choice.engine == "reference" else None,
        **choice.details(), **device_record(device), **runtime_record(perf)}
    names = front_to_cache(config, perf, dataset)
    front = split_fixed_front(model, names) if names else None
    trained_model = model if front is None else front.head  # shares the model's weights
    trained = fit(  # fit closes the engine (Opacus's hooks removed) however training ends
        config, dataset, perf, backend=BACKEND, model=model,
        make_engine=lambda plan, mechanism: engine_cls(trained_model, config, mechanism, perf),
        library_epsilon=library_epsilon, progress=progress, callbacks=callbacks,
        perf_details=details, front=front,
    )
    model.eval()
    return trained


def save_checkpoint(trained: TrainedModel, path: str | Path) -> Path:
    """Write the evaluation weights + metadata as one framework-neutral ``.npz``."""
    return _save_checkpoint(trained, path)


def load_checkpoint(path: str | Path) -> TrainedModel:
    """A torch model rebuilt from a checkpoint written by either backend."""
    trained = load_trained(path, BACKEND, build_model, set_weights)
    trained.model.eval()
    return trained
