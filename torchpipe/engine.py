"""The reference torch step engine: one logical DP-SGD step on a torch model with Opacus.

Per-example gradients of each physical chunk from an Opacus ``GradSampleModule`` (grad-sample
mode an engine argument, default Opacus's default ``hooks``), clipped and accumulated by an
Opacus ``DPOptimizer`` with skipped steps, noised once per logical batch and divided by the
expected batch size (:mod:`torchpipe.dp`). It lives apart from :mod:`torchpipe.train` so that
:mod:`torchpipe.fast` can extend it without an import cycle (mirror of :mod:`tfpipe.engine`).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from opacus.grad_sample.utils import prepare_module
from opacus.optimizers import DPOptimizer
from torch import nn

from dpcore.audit.canary_records import CanaryRecords, with_canaries
from dpcore.chunkpad import padded_size, weighted_chunk
from dpcore.config import PerfSpec, RunConfig
from dpcore.errors import ConfigError
from dpcore.noise_key import noise_key
from dpcore.stepengine import Chunk, StepMechanism
from torchpipe import dp
from torchpipe.canaries import GradientWatch, append_grad_samples
from torchpipe.device import model_device
from torchpipe.models import get_weights, neutral_to_parameters, set_weights
from torchpipe.predict import is_text_model, labels_tensor, outputs, probabilities, to_tensor

#: Opacus grad-sample modes the reference engine accepts. Measured on cnn4, 28x28, chunks of
#: 256, 2 CPU cores (per-example gradients only): hooks ~11.5k, functorch ~10.8k, ew ~13k
#: examples/s; ew collapses at chunks of 512 (~1.2k/s) and supports fewer layers, so the
#: default is Opacus's default, hooks.
GRAD_SAMPLE_MODES = ("hooks", "functorch", "ew")

#: The reference engine's default grad-sample mode.
DEFAULT_GRAD_SAMPLE_MODE = "hooks"


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


def memory_format(perf: PerfSpec) -> torch.memory_format:
    """The torch memory format of ``perf.memory_format`` (``default``: NCHW-contiguous)."""
    return torch.channels_last if perf.memory_format == "channels_last" else \
        torch.contiguous_format


def runtime_record(perf: PerfSpec) -> dict[str, object]:
    """What a run's ``perf`` records of the layout and threads in effect (after
    :func:`configure_torch`): the image tensors' memory format and torch's intra-op threads."""
    return {"memory_format_used": "channels_last (NHWC memory)"
            if perf.memory_format == "channels_last" else "contiguous (NCHW memory)",
            "threads_in_effect": torch.get_num_threads()}


class TorchStepEngine:
    """One logical DP-SGD step on a torch model (see :class:`dpcore.trainloop.StepEngine`).

    ``grad_sample_mode``: the Opacus per-example gradient mode of the ``GradSampleModule``
    (one of :data:`GRAD_SAMPLE_MODES`). ``perf.memory_format: channels_last`` converts the
    model (in place: its 4-D weights) and every image chunk to ``torch.channels_last``.
    """

    def __init__(self, model: nn.Module, config: RunConfig, mechanism: StepMechanism,
                 perf: PerfSpec, grad_sample_mode: str = DEFAULT_GRAD_SAMPLE_MODE) -> None:
        if grad_sample_mode not in GRAD_SAMPLE_MODES:
            raise ConfigError(f"grad_sample_mode={grad_sample_mode!r} is not known; valid: "
                              + ", ".join(GRAD_SAMPLE_MODES))
        self.memory_format = memory_format(perf)
        if perf.memory_format != "default":
            model.to(memory_format=self.memory_format)
        self.model = model
        #: ``perf.compile``: the plain step's loss (forward; AOTAutograd compiles its
        #: backward) and the fast engine's clipping through ``torch.compile``, on chunks
        #: padded to their size class with zero-weight rows (not with microbatches).
        self.compiled = perf.compile
        self.pad_chunks = perf.compile and mechanism.microbatch_size == 1
        self.physical = perf.physical_batch_size
        self._weighted_loss = torch.compile(self._loss_of, dynamic=False) if perf.compile \
            else self._loss_of
        self.mechanism = mechanism
        self.text = is_text_model(model)
        self.input_shape = tuple(getattr(model, "input_shape", ()))
        self.grad_sample_mode: str | None = None
        if mechanism.private:
            self.module: nn.Module = self._wrap(model, grad_sample_mode)
            base = dp.make_base_optimizer(config.train, self.module.parameters())
            key = noise_key(config, "engine", bits=64)  # manual_seed takes 64 bits
            generator = torch.Generator(device=model_device(model)).manual_seed(key.value)
            self.optimizer: torch.optim.Optimizer = dp.make_dp_optimizer(
                base, mechanism, generator, hardened=key.hardened)
        else:
            self.module = model
            self.optimizer = dp.make_base_optimizer(config.train, model.parameters())
        self.module.train()
        self._divisor = float(mechanism.expected_batch_size)
        self._watch: GradientWatch | None = None

    def _wrap(self, model: nn.Module, grad_sample_mode: str) -> nn.Module:
        """The module the private step runs: an Opacus ``GradSampleModule``."""
        self.grad_sample_mode = grad_sample_mode
        return prepare_module(model, grad_sample_mode, batch_first=True, loss_reduction="sum")

    def _empty_chunk(self) -> Chunk:
        """A chunk of zero examples (an empty Poisson batch still takes a noise-only step)."""
        shape = (0, *self.input_shape)
        return (np.zeros(shape, np.int64 if self.text else np.float32), np.zeros(0, np.int64))

    def _chunk_loss(self, x: np.ndarray, y: np.ndarray, reduction: str = "sum"
                    ) -> torch.Tensor:
        device = model_device(self.model)
        logits = self.module(to_tensor(x, self.text, device, self.memory_format))
        return F.cross_entropy(logits, labels_tensor(y, device), reduction=reduction)

    @staticmethod
    def _backward(loss: torch.Tensor) -> None:
        with warnings.catch_warnings():
            # Opacus's hooks sit on the first layer, whose input needs no gradient: torch warns
            # that the full backward hook then fires on outputs only, which is what Opacus uses.
            warnings.filterwarnings("ignore", message="Full backward hook is firing")
            loss.backward()

    def train_step(self, chunks: Sequence[Chunk], divisor: float | None = None,
                   extra: Mapping[str, np.ndarray] | None = None,
                   canaries: CanaryRecords | None = None) -> float:
        """Clip and accumulate chunk by chunk (skipped Opacus steps), noise once, step once.

        ``divisor``: of the noised sum; default the expected batch size B (see
        ``factors.normalisation``). ``extra``: a neutral-layout vector added to the clipped
        sum before the noise; ``canaries``: per-example records appended to the chunks'
        ``grad_sample`` before Opacus clips (both: :class:`dpcore.stepengine.StepEngine`).
        """
        chunks = list(chunks) or [self._empty_chunk()]
        if not self.mechanism.private:
            return self._plain_step(chunks)
        self._queue_extra(extra)
        self._divisor = float(self.mechanism.expected_batch_size if divisor is None
                              else divisor)
        if isinstance(self.optimizer, DPOptimizer):
            # Opacus divides the noised sum by ``expected_batch_size`` (loss_reduction="mean")
            self.optimizer.expected_batch_size = self._divisor
        k = self.mechanism.microbatch_size
        params = [p for p in self.module.parameters() if p.requires_grad]
        parts = with_canaries(len(chunks), canaries, max(len(y) for _, y in chunks))
        total = 0.0
        for j, (i, part) in enumerate(parts):
            x, y = self._empty_chunk() if i is None else chunks[i]
            self.optimizer.zero_grad(set_to_none=True)
            loss = self._chunk_loss(x, y)
            self._backward(loss)
            # the canaries: more per-example records, before the microbatch means and
            # Opacus's clipping (k copies each: a microbatch whose mean is the canary)
            append_grad_samples(params, part, self.model, k)
            dp.microbatch_means(self.module, k)
            total += float(loss.detach())
            if j < len(parts) - 1:
                self.optimizer.signal_skip_step(do_skip=True)
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return total

    def watch(self, coordinates: Mapping[str, np.ndarray]) -> None:
        """Report the noised sum at ``coordinates`` after every step (:meth:`watched`): the
        gradient the wrapped optimizer is about to apply, times the step's divisor."""
        if self._watch is not None:
            self._watch.close()
        applier = getattr(self.optimizer, "original_optimizer", self.optimizer)
        self._watch = GradientWatch(self.model, coordinates, applier, lambda: self._divisor)

    def watched(self) -> dict[str, np.ndarray] | None:
        """The last step's noised sum at the watched coordinates, or None."""
        return None if self._watch is None else self._watch.values

    def _queue_extra(self, extra: Mapping[str, np.ndarray] | None) -> None:
        """Hand ``extra`` to the DP optimizer, which adds it to the clipped sum just before
        its noise (:class:`torchpipe.dp.SharedStepDPOptimizer`)."""
        if extra is not None:
            self.optimizer.add_to_sum(neutral_to_parameters(self.model, extra))

    def _padded(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(x, y, weights)``: the chunk padded to its size class with zero-weight rows when
        the steps are compiled (:func:`dpcore.chunkpad.weighted_chunk`), else itself, weights 1;
        each row's weight times its class's (``mechanism.class_weights``, non-private steps
        only)."""
        pad_to = padded_size(len(y), self.physical) if self.pad_chunks else None
        return weighted_chunk(np.asarray(x), np.asarray(y), pad_to,
                              self.mechanism.class_weights)

    def _loss_of(self, x: torch.Tensor, y: torch.Tensor, weights: torch.Tensor
                 ) -> torch.Tensor:
        """The weighted summed cross-entropy of one chunk (weight 0: a padding row)."""
        return (F.cross_entropy(self.module(x), y, reduction="none") * weights).sum()

    def _plain_step(self, chunks: Sequence[Chunk]) -> float:
        """Non-private: gradient of the summed loss over all chunks, divided by B."""
        self.optimizer.zero_grad(set_to_none=False)
        device = model_device(self.model)
        total = 0.0
        for x, y in chunks:
            if self.pad_chunks or self.mechanism.class_weights is not None:
                # weighted rows: a padding row adds nothing; a class weight scales its rows
                x, y, weights = self._padded(x, y)
                loss = self._weighted_loss(to_tensor(x, self.text, device, self.memory_format),
                                           labels_tensor(y, device),
                                           torch.from_numpy(weights).to(device))
            else:
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

    def perf_record(self) -> dict[str, object]:
        """What the run's ``perf`` records of this engine: whether steps were compiled and
        their chunks padded."""
        return {"compiled": "torch.compile (inductor)" if self.compiled else None,
                "chunks_padded": self.pad_chunks}

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        """Softmax probabilities of one batch of model inputs (NHWC / token ids)."""
        return probabilities(self.model, x)

    def predict_outputs(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(logits, softmax probabilities) of one batch of model inputs, one forward pass."""
        return outputs(self.model, x)

    def get_weights(self) -> dict[str, np.ndarray]:
        """Current weights, neutral layout."""
        return get_weights(self.model)

    def set_weights(self, weights: Mapping[str, np.ndarray]) -> None:
        """Load neutral-layout weights."""
        set_weights(self.model, weights)

    def close(self) -> None:
        """Remove Opacus's hooks and attributes, the watch and the last gradients from the
        model."""
        if self._watch is not None:
            self._watch.close()
        remove = getattr(self.module, "_close", None)
        if remove is not None:
            remove()
        for p in self.model.parameters():
            p.grad = None
