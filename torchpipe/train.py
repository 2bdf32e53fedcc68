"""Train one model with PyTorch + Opacus, running the bench's DP-SGD exactly.

The loop, batches, EMA, history and RunResult are shared (:mod:`dpcore.pipeline`,
:mod:`dpcore.trainloop`); this module supplies the torch step engine: Opacus
``GradSampleModule`` per-example gradients per physical chunk, clipped and accumulated by an
Opacus ``DPOptimizer`` with skipped steps, noised once per logical batch and divided by the
expected batch size (:mod:`torchpipe.dp`).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from opacus.grad_sample.utils import prepare_module
from opacus.optimizers import DPOptimizer
from torch import nn

from dpcore.accounting import PrivacyPlan
from dpcore.config import PerfSpec, RunConfig
from dpcore.data.dataset import Dataset
from dpcore.pipeline import factor_initial_weights, fit
from dpcore.trained import TrainedModel, load_trained
from dpcore.trained import save_checkpoint as _save_checkpoint
from dpcore.trainloop import Chunk, EpochCallback, StepMechanism, noise_seed
from torchpipe import dp
from torchpipe.accounting import opacus_epsilons
from torchpipe.models import build_model, get_weights, set_weights
from torchpipe.predict import is_text_model, probabilities, to_tensor

BACKEND = "torch"

#: Opacus grad-sample mode per ``perf.engine``. Measured on cnn4, 28x28, chunks of 256, 2 CPU
#: cores (per-example gradients only): hooks ~11.5k, functorch ~10.8k, ew ~13k examples/s; ew
#: collapses at chunks of 512 (~1.2k/s) and supports fewer layers, so both engines use
#: Opacus's default, hooks.
GRAD_SAMPLE_MODES = {"reference": "hooks", "fast": "hooks"}


def configure_torch(seed: int, perf: PerfSpec) -> None:
    """Seed torch's global generator; switch deterministic kernels; set the thread count.

    ``use_deterministic_algorithms(perf.deterministic, warn_only=True)``: an op without a
    deterministic kernel warns instead of failing (none of the zoo's CPU ops needs it).
    ``perf.xla`` has no torch meaning and is ignored.
    """
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(perf.deterministic, warn_only=True)
    if perf.threads is not None:
        torch.set_num_threads(perf.threads)


class TorchStepEngine:
    """One logical DP-SGD step on a torch model (see :class:`dpcore.trainloop.StepEngine`)."""

    def __init__(self, model: nn.Module, config: RunConfig, mechanism: StepMechanism,
                 perf: PerfSpec) -> None:
        self.model = model
        self.mechanism = mechanism
        self.text = is_text_model(model)
        self.input_shape = tuple(getattr(model, "input_shape", ()))
        self.grad_sample_mode: str | None = None
        if mechanism.private:
            self.grad_sample_mode = GRAD_SAMPLE_MODES[perf.engine]
            self.module: nn.Module = prepare_module(
                model, self.grad_sample_mode, batch_first=True, loss_reduction="sum")
            base = dp.make_base_optimizer(config.train, self.module.parameters())
            generator = torch.Generator().manual_seed(noise_seed(config.seed))
            self.optimizer: torch.optim.Optimizer = dp.make_dp_optimizer(
                base, mechanism, generator)
        else:
            self.module = model
            self.optimizer = dp.make_base_optimizer(config.train, model.parameters())
        self.module.train()

    def _empty_chunk(self) -> Chunk:
        """A chunk of zero examples (an empty Poisson batch still takes a noise-only step)."""
        shape = (0, *self.input_shape)
        return (np.zeros(shape, np.int64 if self.text else np.float32), np.zeros(0, np.int64))

    def _chunk_loss(self, x: np.ndarray, y: np.ndarray) -> torch.Tensor:
        logits = self.module(to_tensor(x, self.text))
        return F.cross_entropy(logits, torch.from_numpy(np.asarray(y, np.int64)), reduction="sum")

    @staticmethod
    def _backward(loss: torch.Tensor) -> None:
        with warnings.catch_warnings():
            # Opacus's hooks sit on the first layer, whose input needs no gradient: torch warns
            # that the full backward hook then fires on outputs only, which is what Opacus uses.
            warnings.filterwarnings("ignore", message="Full backward hook is firing")
            loss.backward()

    def train_step(self, chunks: Sequence[Chunk], divisor: float | None = None) -> float:
        """Clip and accumulate chunk by chunk (skipped Opacus steps), noise once, step once.

        ``divisor``: of the noised sum; default the expected batch size B (see
        ``factors.normalisation``).
        """
        chunks = list(chunks) or [self._empty_chunk()]
        if not self.mechanism.private:
            return self._plain_step(chunks)
        if isinstance(self.optimizer, DPOptimizer):
            # Opacus divides the noised sum by ``expected_batch_size`` (loss_reduction="mean")
            self.optimizer.expected_batch_size = (
                self.mechanism.expected_batch_size if divisor is None else divisor)
        total = 0.0
        for i, (x, y) in enumerate(chunks):
            self.optimizer.zero_grad(set_to_none=True)
            loss = self._chunk_loss(x, y)
            self._backward(loss)
            dp.microbatch_means(self.module, self.mechanism.microbatch_size)
            total += float(loss.detach())
            if i < len(chunks) - 1:
                self.optimizer.signal_skip_step(do_skip=True)
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return total

    def _plain_step(self, chunks: Sequence[Chunk]) -> float:
        """Non-private: gradient of the summed loss over all chunks, divided by B."""
        self.optimizer.zero_grad(set_to_none=False)
        total = 0.0
        for x, y in chunks:
            loss = self._chunk_loss(x, y)
            self._backward(loss)
            total += float(loss.detach())
        with torch.no_grad():
            for p in self.model.parameters():
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                p.grad /= self.mechanism.expected_batch_size
        self.optimizer.step()
        return total

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        """Softmax probabilities of one batch of model inputs (NHWC / token ids)."""
        return probabilities(self.model, x)

    def get_weights(self) -> dict[str, np.ndarray]:
        """Current weights, neutral layout."""
        return get_weights(self.model)

    def set_weights(self, weights: Mapping[str, np.ndarray]) -> None:
        """Load neutral-layout weights."""
        set_weights(self.model, weights)

    def close(self) -> None:
        """Remove Opacus's hooks and attributes and the last gradients from the model."""
        remove = getattr(self.module, "_close", None)
        if remove is not None:
            remove()
        for p in self.model.parameters():
            p.grad = None


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
    engines: list[TorchStepEngine] = []

    def make_engine(plan: PrivacyPlan, mechanism: StepMechanism) -> TorchStepEngine:
        engines.append(TorchStepEngine(model, config, mechanism, perf))
        return engines[-1]

    try:
        trained = fit(
            config, dataset, perf, backend=BACKEND, model=model, make_engine=make_engine,
            library_epsilon=library_epsilon, progress=progress, callbacks=callbacks,
            perf_details={"grad_sample_mode": GRAD_SAMPLE_MODES[perf.engine]
                          if config.privacy.is_dpsgd else None,
                          "per_example_gradients": "opacus GradSampleModule",
                          "engine_used": "reference"},  # "fast" has no faster path yet
        )
    finally:
        for engine in engines:
            engine.close()
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
