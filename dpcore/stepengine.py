"""What a backend's step engine is: one logical DP-SGD step, and the mechanism it obeys.

A backend supplies a :class:`StepEngine`: something that performs one *logical* DP-SGD step on
a list of physical chunks, predicts class probabilities, and gets/sets its weights in the
neutral layout. The loop that drives it is :mod:`dpcore.trainloop`.

The algorithm a step engine must run on one logical batch (the harmonised recipe: the table in
the README's "What it does"), described by a :class:`StepMechanism`:

1. per-example gradients of the cross-entropy loss, computed chunk by chunk;
2. each clipped to ``clip_norm`` in the flat norm ``clip_kind`` over all parameters
   (``"l2"`` Gaussian, ``"l1"`` Laplace, ``None`` non-private: no clipping), and summed;
3. noise ``noise_kind`` (``"gaussian"`` std / ``"laplace"`` scale = ``noise_scale``) added
   once to the sum, per coordinate;
4. divided by the *expected* batch size B = q N (never the actual size);
5. one optimizer step. An empty logical batch is a noise-only update.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from dpcore.accounting import PrivacyPlan
from dpcore.audit.canary_records import CanaryRecords
from dpcore.config import RunConfig
from dpcore.mechanisms import get_mechanism

#: A physical chunk: model inputs (NHWC float32 images in [0, 1], or int token ids) and labels.
Chunk = tuple[np.ndarray, np.ndarray]

#: A vector in the neutral weight layout (keys of ``StepEngine.get_weights``).
Neutral = dict[str, np.ndarray]


@dataclass(frozen=True)
class StepMechanism:
    """How one logical batch's gradient is privatised (both backends obey it exactly).

    Attributes:
        clip_kind: ``"l2"`` (Gaussian DP-SGD), ``"l1"`` (Laplace DP-SGD) or ``None``
            (non-private: no per-example gradients, no clipping): the mechanism's
            :attr:`~dpcore.mechanisms.NoiseSampler.clip_norm`.
        clip_norm: C, the per-example bound in that norm.
        noise_kind: the name of the mechanism's :class:`~dpcore.mechanisms.NoiseSampler`
            (``"gaussian"``, ``"laplace"``; the key the backends look their step up by), or
            ``None`` (no noise).
        noise_scale: per-coordinate noise std (Gaussian) or scale b (Laplace), = sigma * C.
        noise_multiplier: sigma.
        expected_batch_size: B = q N, the divisor of the noised sum (unless the engine is
            handed another divisor, ``factors.normalisation``).
        microbatch_size: k, examples per clipped unit (``factors.microbatch_size``): the
            per-example gradients of k consecutive examples are averaged before clipping, as
            TF Privacy does with ``num_microbatches = batch / k``. 1 = per example.
        class_weights: the weight of each class's examples in the non-private step's summed
            loss (``train.class_weights``, :mod:`dpcore.class_weights`), or ``None``: every
            example weighs 1. Never set on a private step (the configs refuse it).
    """

    clip_kind: str | None
    clip_norm: float
    noise_kind: str | None
    noise_scale: float
    noise_multiplier: float
    expected_batch_size: int
    microbatch_size: int = 1
    class_weights: tuple[float, ...] | None = None

    @property
    def private(self) -> bool:
        """True when gradients are clipped per example (DP-SGD)."""
        return self.clip_kind is not None


def step_mechanism(config: RunConfig, plan: PrivacyPlan) -> StepMechanism:
    """The :class:`StepMechanism` of a run: DP-SGD settings or the non-private step, broken
    as ``factors.fault`` says (:mod:`dpcore.audit.faults`; ``none`` for every honest run)."""
    from dpcore.audit.faults import apply_fault

    privacy = config.privacy
    batch = plan.batches.expected_batch_size
    sampler = get_mechanism(privacy.mechanism).sampler
    if sampler is None:
        return StepMechanism(None, math.inf, None, 0.0, 0.0, batch)
    # microbatch_size > 1 only where the mechanism allows it (dpcore.config refuses the rest)
    mechanism = StepMechanism(sampler.clip_norm, privacy.max_grad_norm, sampler.name,
                              plan.noise_multiplier * privacy.max_grad_norm,
                              plan.noise_multiplier, batch, config.factors.microbatch_size)
    return apply_fault(mechanism, config.factors.fault)  # factors.fault: audit checks only


class StepEngine(Protocol):
    """What a backend implements; the driver (:mod:`dpcore.trainloop`) owns the rest."""

    def train_step(self, chunks: Sequence[Chunk], divisor: float | None = None,
                   extra: Mapping[str, np.ndarray] | None = None,
                   canaries: CanaryRecords | None = None) -> float:
        """One logical step over ``chunks`` (possibly none: a noise-only update).

        ``divisor``: of the noised sum, default the expected batch size B; the driver passes
        one only when ``factors.normalisation`` is not ``expected``.

        ``extra``: a vector in the neutral weight layout (keys of ``get_weights``; a missing
        key is zeros) that the engine adds to the clipped sum *before* the noise, as one more
        already-clipped record: the path of the shared noise (``privacy.noise_source:
        shared``, :mod:`dpcore.shared_noise`; the engine's own noise is then zero). The driver
        passes it only in a step where the noise is shared.

        ``canaries``: the audit's gradient canaries sampled in this step
        (:class:`dpcore.audit.canary_records.CanaryRecords`): ``canaries.count`` more
        per-example records that the engine clips, sums and noises with its real examples,
        in the same calls, *before* its clipping (a reference engine appends their gradients
        to its per-example gradients, k copies each when it clips microbatches of k, so a
        microbatch is one canary; a fast engine appends their rows to the (a, g) pair of the
        layer each belongs to, zero rows elsewhere), spread over its chunks by
        :func:`dpcore.audit.canary_records.with_canaries`. They add nothing to the loss, and
        nothing to the update but their clipped gradients (divided like the rest). The
        driver passes them only in a step where a canary is sampled.

        Returns:
            The sum over the batch's examples of their cross-entropy loss (nats) at the
            weights before the update; 0.0 for an empty batch.
        """

    def watch(self, coordinates: Mapping[str, np.ndarray]) -> None:
        """Report, from now on, the privatised gradient at ``coordinates`` (neutral key ->
        flat indices in that weight) after every step (:meth:`watched`)."""

    def watched(self) -> dict[str, np.ndarray] | None:
        """The last step's noised sum at the watched coordinates (key -> float64 values in
        the order given to :meth:`watch`): the gradient the engine handed its optimizer
        there, read on the path that applies it (before momentum or Adam), times the divisor
        it divided by; None before a step or without :meth:`watch`."""

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        """Softmax probabilities [N, K] of one batch of model inputs, with the current weights."""

    def predict_outputs(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(logits, softmax probabilities), both float32 [N, K], of one batch of model inputs
        from one forward pass; the probabilities are exactly :meth:`predict_proba`'s."""

    def get_weights(self) -> dict[str, np.ndarray]:
        """The model's current weights in the neutral layout (float32 copies)."""

    def set_weights(self, weights: Mapping[str, np.ndarray]) -> None:
        """Load neutral-layout weights into the model (optimizer state is untouched)."""

    def close(self) -> None:
        """Release what the engine attached to the model (hooks, per-example buffers,
        gradients); the model keeps its weights. :func:`dpcore.pipeline.fit` calls it once
        training ends, however it ends; the engine is not used afterwards."""


def add_neutral(a: Mapping[str, np.ndarray] | None, b: Mapping[str, np.ndarray] | None
                ) -> Neutral | None:
    """The key-wise sum of two neutral-layout vectors (a missing key is zeros), float32;
    None when both are None."""
    if a is None and b is None:
        return None
    out = {k: np.asarray(v, np.float32) for k, v in (a or {}).items()}
    for key, value in (b or {}).items():
        value = np.asarray(value, np.float32)
        out[key] = out[key] + value if key in out else value
    return out
