"""``recipe: library`` on PyTorch: DP-SGD the way Opacus's tutorials run it.

``opacus.PrivacyEngine().make_private(module, optimizer, data_loader, noise_multiplier,
max_grad_norm)`` with its defaults: Poisson sampling (the loader is replaced by a
``DPDataLoader`` with q = 1 / len(loader)), flat per-example clipping, ``loss_reduction="mean"``
(the noised sum is divided by the expected batch size), grad-sample mode ``hooks``; a plain
training loop with ``nn.CrossEntropyLoss()``; PyTorch's default initialisers (seeded by
``torch.manual_seed(config.seed)``). Its epsilon is the engine's accountant (Opacus's default,
PRV), named in the result. ``privacy.sampling: shuffle`` passes ``poisson_sampling=False``
(an Opacus option: the loader is then the shuffled one the user gave).

Noise: ``make_private``'s own ``noise_generator`` argument, a ``torch.Generator`` keyed by the
run's noise key (:mod:`dpcore.noise_key`, stream ``library``). With ``noise_key: secret`` the
optimizer Opacus returns also draws its noise the ``secure_mode`` way (its public
``secure_mode`` attribute: four draws divided by two); ``PrivacyEngine(secure_mode=True)``
itself needs torchcsprng, which does not build with torch 2.x, and refuses a generator.

The audit's gradient canaries (white-box, ``audit_canaries.kind: gradient``) enter the stock
step: their per-example gradients are appended to ``grad_sample`` before the stock
``DPOptimizer`` clips (:meth:`OpacusRunner.use_canaries`).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from dpcore.accounting import PrivacyPlan
from dpcore.config import PerfSpec, RunConfig
from dpcore.data.dataset import Dataset
from dpcore.errors import ConfigError
from dpcore.libraryloop import LibraryRecipe, LibraryRunner
from dpcore.noise_key import noise_key
from dpcore.predicting import model_inputs
from dpcore.recipes import LIBRARY_TRAINERS
from dpcore.trainhooks import CanarySource
from torchpipe.canaries import GradientWatch, append_grad_samples
from torchpipe.device import model_device, training_device
from torchpipe.models import build_model, get_weights, set_weights
from torchpipe.predict import is_text_model, outputs, probabilities, to_tensor

TRAINER = LIBRARY_TRAINERS["torch"]


class OpacusRunner:
    """One epoch of the Opacus tutorial loop at a time."""

    def __init__(self, model: nn.Module, config: RunConfig, dataset: Dataset,
                 plan: PrivacyPlan) -> None:
        self.model = model
        text = is_text_model(model)
        x = to_tensor(model_inputs(dataset.x_train, dataset.task), text)
        y = torch.from_numpy(np.asarray(dataset.y_train, np.int64))
        generator = torch.Generator().manual_seed(config.seed)
        loader = DataLoader(TensorDataset(x, y), batch_size=config.train.batch_size,
                            shuffle=True, generator=generator)
        self.optimizer: torch.optim.Optimizer = torch.optim.SGD(
            model.parameters(), lr=config.train.lr, momentum=config.train.momentum)
        self.engine = None
        self.module: nn.Module = model
        if config.privacy.is_dpsgd:
            from opacus import PrivacyEngine

            with warnings.catch_warnings():
                # Known harmless here: Opacus warns on every PrivacyEngine built without
                # secure_mode (noise from torch's ordinary PRNG, not a CSPRNG). Opacus's own
                # tutorials, which this recipe follows, run that way; a production model
                # would be retrained with secure_mode=True.
                warnings.filterwarnings("ignore", message="Secure RNG turned off")
                self.engine = PrivacyEngine()
            key = noise_key(config, "library", bits=64)  # manual_seed takes 64 bits
            self.module, self.optimizer, loader = self.engine.make_private(
                module=model, optimizer=self.optimizer, data_loader=loader,
                noise_multiplier=plan.noise_multiplier,
                max_grad_norm=config.privacy.max_grad_norm,
                poisson_sampling=config.privacy.sampling == "poisson",
                noise_generator=torch.Generator(device=model_device(model)).manual_seed(
                    key.value),
            )
            if key.hardened:
                self.optimizer.secure_mode = True  # Opacus's own four-draw noise
        self.loader = loader
        self.steps_per_epoch = len(loader)
        self.sampling_rate = 1.0 / len(loader)
        self.sampling = config.privacy.sampling  # Opacus's loader: Poisson or the shuffled one
        self.criterion = nn.CrossEntropyLoss()
        self.canaries: CanarySource | None = None
        self.watch: GradientWatch | None = None

    def use_canaries(self, canaries: CanarySource) -> None:
        """Take the audit's gradient canaries in every step: their per-example gradients are
        appended to each parameter's ``grad_sample`` after the backward pass, before the
        stock ``DPOptimizer`` clips (``clip_and_accumulate``), sums, noises and divides
        them with the batch's; the noised sum it is about to apply is read at the canaries'
        coordinates (a step pre-hook of its ``original_optimizer``)."""
        if self.engine is None:
            raise ConfigError("gradient canaries need DP-SGD (Opacus's DPOptimizer)")
        self.canaries = canaries
        optimizer = self.optimizer
        self.watch = GradientWatch(  # one backward pass per step: Opacus divides by B
            self.model, canaries.coordinates(), optimizer.original_optimizer,
            lambda: optimizer.expected_batch_size)

    def train_epoch(self, epoch: int) -> tuple[float, int]:
        """One pass over the (Poisson) loader; returns (summed example loss, examples)."""
        self.module.train()
        total, examples = 0.0, 0
        device = model_device(self.model)
        for x, y in self.loader:
            total += self.train_batch(x.to(device), y.to(device))
            examples += len(y)
        return total, examples

    def train_batch(self, x: torch.Tensor, y: torch.Tensor) -> float:
        """One step of the tutorial loop on one batch (on the model's device): zero_grad,
        mean cross-entropy, backward, ``optimizer.step()``; returns the summed example loss.
        An empty Poisson batch is a noise-only step in Opacus. With the audit's gradient
        canaries (:meth:`use_canaries`), the step's canary rows are appended to
        ``grad_sample`` after the backward pass and the noised sum is reported after it."""
        records = None if self.canaries is None else self.canaries.step_records()
        self.optimizer.zero_grad()
        loss = self.criterion(self.module(x), y) if len(y) else None
        total = 0.0
        if loss is not None:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Full backward hook is firing")
                loss.backward()
            total = float(loss.detach()) * len(y)
        if records is not None:  # the audit's canaries, before Opacus clips
            append_grad_samples(self.optimizer.params, records, self.model)
        self.optimizer.step()
        if self.canaries is not None and self.watch is not None \
                and self.watch.values is not None:
            self.canaries.observed(self.watch.values)
            self.watch.values = None
        return total

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        """Softmax probabilities of one batch of model inputs (NHWC / token ids)."""
        return probabilities(self.model, x)

    def predict_outputs(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(logits, softmax probabilities) of one batch of model inputs, one forward pass."""
        return outputs(self.model, x)

    def get_weights(self) -> dict[str, np.ndarray]:
        """Current weights, neutral layout."""
        return get_weights(self.model)

    def own_epsilon(self, plan: PrivacyPlan, steps: int) -> dict[str, float | None]:
        """The engine's accountant's epsilon at ``plan.delta`` of the steps it took, keyed by
        the accountant's name (``{}`` for a non-private run)."""
        if self.engine is None:
            return {}
        name = self.engine.accountant.mechanism()
        return {f"opacus_{name} (PrivacyEngine.accountant)":
                float(self.engine.get_epsilon(plan.delta))}

    def close(self) -> None:
        """Remove Opacus's hooks (and the canaries' watch) from the model."""
        if self.watch is not None:
            self.watch.close()
        remove = getattr(self.module, "_close", None)
        if remove is not None and self.module is not self.model:
            remove()


class OpacusStep:
    """The Opacus recipe's step for ``dpcompare verify`` (``dpcore.verify.steppers.
    LibraryStep``): an :class:`OpacusRunner` built as ``train_library`` builds it, stepped on
    the batches ``verify`` gives it with the runner's own loop body
    (:meth:`OpacusRunner.train_batch`: Opacus's ``GradSampleModule`` and ``DPOptimizer``).

    The divisor is Opacus's own: ``make_private`` sets ``expected_batch_size = int(N q)``
    with q = 1 / len(loader); the sampler is the loader's (``DPDataLoader``'s Poisson batch
    sampler, or the shuffled one with ``poisson_sampling=False``).
    """

    fixed_batch_size = None

    def __init__(self, config: RunConfig, dataset: Dataset, plan: PrivacyPlan,
                 perf: PerfSpec) -> None:
        torch.manual_seed(config.seed)  # Opacus's noise and the default initialisers
        model = build_model(config.model, dataset.input_shape, dataset.n_classes, seed=None,
                            vocab_size=dataset.vocabulary_size)
        self.device = training_device()
        model.to(self.device)
        self.model = model
        self.text = is_text_model(model)
        self.runner = OpacusRunner(model, config, dataset, plan)
        self.sampling = config.privacy.sampling
        self.sampling_rate = self.runner.sampling_rate
        self.steps_per_epoch = self.runner.steps_per_epoch
        #: the divisor make_private set (read once, before any step runs)
        self.expected_batch_size = float(getattr(self.runner.optimizer, "expected_batch_size",
                                                 config.train.batch_size))

    def step(self, chunks: Sequence[tuple[np.ndarray, np.ndarray]], n_examples: int,
             divisor: float | None = None) -> None:
        """One step of the runner's loop on the chunks, joined into one batch."""
        if divisor is not None:
            from dpcore.errors import ConfigError

            raise ConfigError("Opacus's step takes no divisor; valid: None (its own)")
        x = np.concatenate([c[0] for c in chunks])
        y = np.concatenate([c[1] for c in chunks])
        self.runner.train_batch(to_tensor(x, self.text, self.device),
                                torch.from_numpy(np.asarray(y, np.int64)).to(self.device))

    def divisor_of(self, n_examples: int) -> float:
        """The ``expected_batch_size`` ``make_private`` set (whatever the batch's size)."""
        return self.expected_batch_size

    def get_weights(self) -> dict[str, np.ndarray]:
        return get_weights(self.model)

    def set_weights(self, weights: Mapping[str, np.ndarray]) -> None:
        set_weights(self.model, weights)

    def index_batches(self, epochs: int) -> Iterator[np.ndarray]:
        """The loader's batches of example indices over ``epochs`` passes (its own batch
        sampler, drawn from the generator it was built with)."""
        for _ in range(epochs):
            for batch in self.runner.loader.batch_sampler:
                yield np.asarray(batch, dtype=np.int64)

    def close(self) -> None:
        self.runner.close()


def library_step(config: RunConfig, dataset: Dataset, plan: PrivacyPlan, perf: PerfSpec
                 ) -> OpacusStep:
    """The recipe's step for ``dpcompare verify`` (:class:`OpacusStep`)."""
    return OpacusStep(config, dataset, plan, perf)


def library_recipe(model: nn.Module, config: RunConfig, perf: PerfSpec) -> LibraryRecipe:
    """Train as Opacus's tutorials do (see the module docstring): an :class:`OpacusRunner` on
    ``model`` (on its device, as the tutorials put the model and each batch)."""

    def make_runner(plan: PrivacyPlan, data: Dataset) -> LibraryRunner:
        return OpacusRunner(model, config, data, plan)

    return LibraryRecipe(
        trainer=TRAINER if config.privacy.is_dpsgd else "torch.optim.SGD loop (non-private)",
        make_runner=make_runner,
        details={"trainer": TRAINER,
                 "grad_sample_mode": "hooks" if config.privacy.is_dpsgd else None})
