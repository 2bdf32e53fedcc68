"""DP-SGD on Opacus's machinery: GradSampleModule + DPOptimizer, noise once per logical batch.

* Per-example gradients: Opacus :class:`~opacus.GradSampleModule` (``loss_reduction="sum"``,
  so ``grad_sample`` holds each example's own gradient, unscaled).
* Clipping, summation, noise: Opacus :class:`~opacus.optimizers.DPOptimizer`. It is built with
  ``loss_reduction="mean"`` and ``expected_batch_size=B`` because that is the setting in which
  Opacus divides the noised sum by B (with ``"sum"`` it ignores ``expected_batch_size`` and
  does not divide at all); the per-sample gradients are still the unscaled ones above.
* Physical chunks: ``optimizer.signal_skip_step(True)`` before every chunk's ``step()`` but
  the last, as Opacus's ``BatchMemoryManager`` does: skipped steps only clip and accumulate
  into ``summed_grad``; the last one adds the noise once, divides by B and steps.
* Laplace DP-SGD: :class:`LaplaceDPOptimizer` overrides the two extension points,
  ``clip_and_accumulate`` (flat L1 per-example norm) and ``add_noise`` (Laplace noise).

Noise comes from a ``torch.Generator`` keyed by the run's noise key (:mod:`dpcore.noise_key`);
with ``noise_key: secret`` the Gaussian draw is Opacus's own ``secure_mode`` construction (four
draws divided by two, :func:`make_dp_optimizer`) on that generator.

Fix of an Opacus 1.6 bug (registered at import through Opacus's own extension point,
``register_grad_sampler``): its convolution grad sampler unfolds the layer input with
``as_strided`` assuming contiguous NCHW memory. After a 1-channel convolution, PyTorch's CPU
kernels return channels-last tensors, so the next convolution's per-sample gradients came out
wrong (cnn4's conv2: relative error ~1, while the summed gradient was right).
:func:`contiguous_conv_grad_sample` makes the activations contiguous and calls Opacus's sampler.
The bug report, with a standalone script that shows it: docs/findings/opacus-channels-last-conv.md.

Clip factor: Opacus scales an example by ``min(1, C / (norm + 1e-6))``, TF Privacy by
``min(1, C / norm)``; the two differ by a relative 1e-6 / norm for clipped examples only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
from opacus.grad_sample.conv import compute_conv_grad_sample
from opacus.grad_sample.utils import register_grad_sampler
from opacus.optimizers import DPOptimizer
from opacus.optimizers.optimizer import _check_processed_flag, _mark_as_processed

from dpcore.config import TrainSpec
from dpcore.errors import ConfigError
from dpcore.mechanisms import NOISE_SAMPLERS
from dpcore.registry import Registry
from dpcore.stepengine import StepMechanism

#: The Opacus optimizer class of each noise sampler of
#: :data:`dpcore.mechanisms.NOISE_SAMPLERS`, by name (``StepMechanism.noise_kind``).
OPTIMIZERS: Registry[str, type[DPOptimizer]] = Registry("Opacus DP optimizers",
                                                       key="noise sampler")

#: Adam settings shared with the TF backend (Keras' defaults).
ADAM_EPSILON = 1e-7
ADAM_BETAS = (0.9, 0.999)

#: Opacus's clip-factor stabiliser (``max_grad_norm / (norm + 1e-6)`` in DPOptimizer).
OPACUS_NORM_EPS = 1e-6


@register_grad_sampler([torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d])
def contiguous_conv_grad_sample(
    layer: torch.nn.Module, activations: list[torch.Tensor], backprops: torch.Tensor,
) -> dict[torch.nn.Parameter, torch.Tensor]:
    """Opacus's ``compute_conv_grad_sample`` on contiguous activations (see the module doc)."""
    return compute_conv_grad_sample(layer, [a.contiguous() for a in activations], backprops)


def laplace_noise(scale: float, reference: torch.Tensor,
                  generator: torch.Generator | None) -> torch.Tensor:
    """Laplace(0, scale) noise shaped like ``reference``, as scale * (E1 - E2), E_i ~ Exp(1).

    Hand-written because ``torch.distributions.Laplace`` cannot take a ``torch.Generator``.
    """
    if scale == 0:
        return torch.zeros_like(reference)
    e1 = torch.empty_like(reference).exponential_(1.0, generator=generator)
    e2 = torch.empty_like(reference).exponential_(1.0, generator=generator)
    return scale * (e1 - e2)


@OPTIMIZERS.register("gaussian")
class SharedStepDPOptimizer(DPOptimizer):
    """Opacus ``DPOptimizer`` whose clipped sum takes one more, already-clipped record given
    by dpcore (the audit's canary gradient) just before the noise: the canary hook.

    ``add_noise`` (Opacus's extension point, called once per logical batch by the reference
    and the fast engine alike) first adds the pending record to ``summed_grad``, then draws
    the noise (:meth:`noise_sum`: Opacus's Gaussian noise; Laplace in the subclass).
    """

    _pending_sum: dict[int, torch.Tensor] | None = None

    def add_to_sum(self, record: dict[int, torch.Tensor]) -> None:
        """Queue ``record`` (tensors keyed by ``id`` of their parameter) for the next
        ``add_noise``."""
        self._pending_sum = dict(record)

    def add_noise(self) -> None:
        """Add the pending record (if any) to ``summed_grad``, then the noise."""
        pending, self._pending_sum = self._pending_sum, None
        if pending:
            for p in self.params:
                value = pending.get(id(p))
                if value is not None:
                    p.summed_grad = (value.clone() if p.summed_grad is None
                                     else p.summed_grad + value)
        self.noise_sum()

    def noise_sum(self) -> None:
        """Opacus's own ``add_noise``: ``grad = summed_grad + N(0, (sigma C)^2)``."""
        super().add_noise()


@OPTIMIZERS.register("laplace")
class LaplaceDPOptimizer(SharedStepDPOptimizer):
    """Opacus DPOptimizer with per-example L1 clipping and Laplace noise (Laplace DP-SGD).

    ``max_grad_norm`` is the L1 bound C of each example's flat gradient, and
    ``noise_multiplier * max_grad_norm`` the Laplace scale per coordinate.
    """

    def clip_and_accumulate(self) -> None:
        """Scale each example's gradient to L1 norm <= C and add it to ``summed_grad``."""
        grad_samples = self.grad_samples
        if len(grad_samples[0]) == 0:
            factor = torch.zeros((0,), device=grad_samples[0].device)
        else:
            norms = torch.stack(
                [g.reshape(len(g), -1).abs().sum(dim=-1) for g in grad_samples], dim=1
            ).sum(dim=1)
            factor = (self.max_grad_norm / (norms + OPACUS_NORM_EPS)).clamp(max=1.0)
        for p in self.params:
            _check_processed_flag(p.grad_sample)
            grad_sample = self._get_flat_grad_sample(p).to(p.dtype)
            grad = torch.einsum("i,i...", factor.to(grad_sample.device, p.dtype), grad_sample)
            p.summed_grad = grad if p.summed_grad is None else p.summed_grad + grad
            _mark_as_processed(p.grad_sample)

    def noise_sum(self) -> None:
        """``grad = summed_grad + Laplace(0, noise_multiplier * max_grad_norm)``."""
        scale = self.noise_multiplier * self.max_grad_norm
        for p in self.params:
            _check_processed_flag(p.summed_grad)
            noise = laplace_noise(scale, p.summed_grad, self.generator)
            p.grad = (p.summed_grad + noise).view_as(p)
            _mark_as_processed(p.summed_grad)


class KerasAdam(torch.optim.Adam):
    """``torch.optim.Adam`` with Keras's placement of epsilon, so both backends run one rule.

    Keras (legacy and new) updates ``w -= lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) +
    eps)``; torch adds eps to the bias-corrected ``sqrt(v) / sqrt(1 - b2^t)``. Setting torch's
    eps to ``eps / sqrt(1 - b2^t)`` before step t makes the two formulas identical (without it
    they differ wherever a gradient coordinate is not far above eps). Hand-written: torch has
    no option for this convention.
    """

    def __init__(self, params: Iterable[torch.nn.Parameter], lr: float,
                 betas: tuple[float, float] = ADAM_BETAS, eps: float = ADAM_EPSILON) -> None:
        super().__init__(params, lr=lr, betas=betas, eps=eps)
        for group in self.param_groups:
            group["keras_eps"] = eps

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        """One Adam step with the Keras epsilon of this step number."""
        for group in self.param_groups:
            done = [int(self.state[p]["step"]) for p in group["params"]
                    if "step" in self.state.get(p, {})]
            t = 1 + (max(done) if done else 0)
            group["eps"] = group["keras_eps"] / math.sqrt(1.0 - group["betas"][1] ** t)
        return super().step(closure)


def microbatch_means(module: torch.nn.Module, k: int) -> None:
    """Average each parameter's per-example gradients over consecutive groups of ``k``.

    After this, Opacus's optimizer clips the mean gradient of each microbatch of ``k``
    examples (TF Privacy's ``num_microbatches = n / k``) instead of each example's. ``k`` must
    divide the chunk (the config rules and the driver's chunking guarantee it); ``k = 1`` is a
    no-op. Hand-written: Opacus has no microbatch clipping.
    """
    if k == 1:
        return
    for p in module.parameters():
        g = getattr(p, "grad_sample", None)
        if g is not None:
            p.grad_sample = g.reshape(-1, k, *g.shape[1:]).mean(dim=1)


def make_base_optimizer(train: TrainSpec, params: Iterable[torch.nn.Parameter]
                        ) -> torch.optim.Optimizer:
    """``torch.optim.SGD`` (with momentum) or ``Adam`` as ``train`` says."""
    if train.optimizer == "sgd":
        return torch.optim.SGD(params, lr=train.lr, momentum=train.momentum)
    if train.optimizer == "adam":
        return KerasAdam(params, lr=train.lr, betas=ADAM_BETAS, eps=ADAM_EPSILON)
    raise ConfigError(f"train.optimizer={train.optimizer!r} is not known; valid: sgd, adam")


def make_dp_optimizer(base: torch.optim.Optimizer, mechanism: StepMechanism,
                      generator: torch.Generator, *, hardened: bool = False) -> DPOptimizer:
    """The Opacus DP optimizer of ``mechanism`` around ``base`` (divides by B = expected):
    its noise sampler's entry of :data:`OPTIMIZERS`.

    ``hardened``: Opacus's ``secure_mode`` noise (``_generate_noise`` sums four Gaussian
    draws and halves them, Holohan & Braghin 2021) drawn from ``generator``; Opacus's
    CSPRNG (torchcsprng, which ``PrivacyEngine(secure_mode=True)`` needs) does not build with
    torch 2.x, so the generator's key is the secret one instead (:mod:`dpcore.noise_key`).
    The Laplace draw has no hardened form.
    """
    sampler = NOISE_SAMPLERS.get(str(mechanism.noise_kind))
    if sampler is None or sampler.clip_norm != mechanism.clip_kind \
            or sampler.name not in OPTIMIZERS:
        raise ConfigError(
            f"clip {mechanism.clip_kind!r} with noise {mechanism.noise_kind!r} has no Opacus "
            "optimizer; valid: l2 + gaussian, l1 + laplace"
        )
    cls = OPTIMIZERS[sampler.name]
    return cls(base, noise_multiplier=mechanism.noise_multiplier,
               max_grad_norm=mechanism.clip_norm,
               expected_batch_size=mechanism.expected_batch_size,
               loss_reduction="mean", generator=generator, secure_mode=hardened)
