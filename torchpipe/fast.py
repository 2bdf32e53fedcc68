"""The fast torch DP engine (``perf.engine: fast``): per-example clipping without per-example
gradients of the whole model. Mirror of :mod:`tfpipe.fast`.

The reference engine (:class:`torchpipe.engine.TorchStepEngine`) materialises every
parameter's per-example gradient with an Opacus ``GradSampleModule``. This engine computes the
same clipped sum from one ordinary forward and backward pass ("ghost clipping", Goodfellow
2015 / Lee & Kifer 2021 / Bu et al. 2022):

1. forward hooks record each parameterised module's input ``a`` and output ``z``;
2. one backward pass (``torch.autograd.grad`` of the summed loss with respect to the ``z``)
   gives ``g = dL/dz``; examples are independent, so ``g[i]`` is example i's own;
3. each layer's rule turns ``(a, g)`` into per-example sums of squares (L2) or of absolute
   values (L1) of its parameter gradients; summed over layers they give each example's flat
   norm and its clip factor, Opacus's ``min(1, C / (norm + 1e-6))`` (the reference's);
4. each layer's clip-weighted sum ``sum_i c_i grad_i``: for Linear its own weight-gradient
   product with output gradient ``c * g``; for Conv/GroupNorm whose grad samples were
   computed for the norm, ``sum_i c_i G_i`` of the kept samples (Conv within
   :data:`KEEP_SAMPLES_BUDGET`, GroupNorm always); otherwise one ordinary weight-gradient op,
   ``torch.autograd.grad(z, layer params, grad_outputs=c * g)`` (autograd prunes the graph
   to the layer's own parameters: ``sum_i c_i grad(loss_i) = grad(sum_i c_i loss_i)``).
   A wide Conv2d whose samples do not fit the budget gets a ghost norm instead
   (:func:`conv_ghost_sq_norms`, hand-written: Opacus 1.6 has none for convolutions).

What comes from Opacus: the L2 norm samplers of Linear and Embedding (Opacus 1.6's ghost
norms, ``GradSampleModuleFastGradientClipping.NORM_SAMPLERS``), the per-example grad samplers
of Conv1d/Conv2d (with :mod:`torchpipe.dp`'s contiguity fix) and GroupNorm, and the
optimizer (noise from the same seeded generator in the same parameter order, division, step:
the reference's ``DPOptimizer`` / ``LaplaceDPOptimizer``). Opacus 1.6 has no ghost norm for
Conv or GroupNorm, and none in L1 at all: the L2 norms of Conv/GroupNorm here are the sums of
squares of Opacus's per-layer grad samples (registered with ``register_norm_sampler`` so that
Opacus's own ``grad_sample_mode="ghost"`` covers them too), and every L1 norm is written by
hand below (Linear: factorised ``||a||_1 ||g||_1``; Embedding: per distinct token, as
:class:`tfpipe.fast.EmbeddingRule`; Conv/GroupNorm: from the grad samples).

A model with a trainable module type outside :data:`RULES` (or a module called twice per
forward, i.e. tied weights) is not supported: :func:`unsupported_layers` names it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from opacus.grad_sample.embedding import compute_embedding_norm_sample
from opacus.grad_sample.grad_sample_module import GradSampleModule
from opacus.grad_sample.linear import compute_linear_grad_sample, compute_linear_norm_sample
from opacus.grad_sample.utils import register_norm_sampler
from torch import nn

from dpcore.errors import ConfigError
from dpcore.trainloop import Chunk
from torchpipe import dp
from torchpipe.device import model_device
from torchpipe.engine import TorchStepEngine
from torchpipe.predict import labels_tensor, to_tensor

#: ``perf_details["per_example_gradients"]`` of a run on this engine.
DESCRIPTION = ("layer-wise norms from one forward/backward pass (torchpipe.fast, Opacus norm "
               "and grad samplers), clip-weighted sum")

#: Per-example norm contribution of one module: ``(module, a, g, kind) -> [n]`` sums of
#: squares (``"l2"``) or of absolute values (``"l1"``) over all its parameters' gradients.
NormRule = Callable[[nn.Module, torch.Tensor, torch.Tensor, str], torch.Tensor]


def _sum_abs_or_sq(t: torch.Tensor, kind: str) -> torch.Tensor:
    """Per-example sum of squares (l2) or of absolute values (l1) over all but axis 0."""
    flat = t.reshape(len(t), -1)
    return (flat * flat).sum(dim=1) if kind == "l2" else flat.abs().sum(dim=1)


def _from_grad_samples(samples: dict[nn.Parameter, torch.Tensor], kind: str) -> torch.Tensor:
    """Summed per-example norm contributions of materialised per-layer grad samples."""
    return torch.stack([_sum_abs_or_sq(s, kind) for s in samples.values()]).sum(dim=0)


def _grad_samples(layer: nn.Module, a: torch.Tensor, g: torch.Tensor
                  ) -> dict[nn.Parameter, torch.Tensor]:
    """Opacus's registered per-example grad sampler of ``layer`` (the reference's own)."""
    return GradSampleModule.GRAD_SAMPLERS[type(layer)](layer, [a], g)


def linear_norms(layer: nn.Module, a: torch.Tensor, g: torch.Tensor, kind: str
                 ) -> torch.Tensor:
    """``nn.Linear``. L2: Opacus's ghost norm sampler (squared). L1 on rank-2 inputs: the
    per-example weight gradient is the outer product ``g[i] a[i]^T``, so ``||.||_1 =
    ||a||_1 ||g||_1`` (hand-written; Opacus has no L1 norms); on longer inputs materialised
    with Opacus's grad sampler."""
    if kind == "l2":
        norms = compute_linear_norm_sample(layer, [a], g)
        return torch.stack([n * n for n in norms.values()]).sum(dim=0)
    if a.dim() == 2:
        total = a.abs().sum(dim=1) * g.abs().sum(dim=1)
        if layer.bias is not None:
            total = total + g.abs().sum(dim=1)
        return total
    return _from_grad_samples(compute_linear_grad_sample(layer, [a], g), kind)


def embedding_norms(layer: nn.Module, a: torch.Tensor, g: torch.Tensor, kind: str
                    ) -> torch.Tensor:
    """``nn.Embedding``. L2: Opacus's ghost norm sampler (squared). L1 (hand-written): the
    output gradients are summed per distinct (example, token) pair, which gives each
    example's rows of the table gradient exactly (at most n T rows, never n V D)."""
    if kind == "l2":
        norms = compute_embedding_norm_sample(layer, [a], g)
        return norms[layer.weight] ** 2
    n = a.shape[0]
    ids = a.reshape(-1).long()
    rows = g.reshape(-1, g.shape[-1])
    example = torch.arange(n, device=a.device).repeat_interleave(a[0].numel())
    pairs, pair_of_position = torch.unique(example * layer.num_embeddings + ids,
                                           return_inverse=True)
    per_pair = torch.zeros(len(pairs), rows.shape[1], dtype=rows.dtype)
    per_pair.index_add_(0, pair_of_position, rows)
    out = torch.zeros(n, dtype=rows.dtype)
    return out.index_add_(0, pairs // layer.num_embeddings, _sum_abs_or_sq(per_pair, kind))


def sampled_norms(layer: nn.Module, a: torch.Tensor, g: torch.Tensor, kind: str
                  ) -> torch.Tensor:
    """Conv1d / Conv2d / GroupNorm: from Opacus's per-layer grad samples (materialised per
    layer only, [n, *param shape]; Opacus 1.6 has no ghost norm for these)."""
    return _from_grad_samples(_grad_samples(layer, a, g), kind)


#: The module types whose per-example norms this engine computes (exact types only).
RULES: dict[type, NormRule] = {
    nn.Linear: linear_norms,
    nn.Embedding: embedding_norms,
    nn.Conv1d: sampled_norms,
    nn.Conv2d: sampled_norms,
    nn.GroupNorm: sampled_norms,
}


@register_norm_sampler([nn.Conv1d, nn.Conv2d, nn.GroupNorm])
def sampled_norm_sample(layer: nn.Module, activations: list[torch.Tensor],
                        backprops: torch.Tensor) -> dict[nn.Parameter, torch.Tensor]:
    """Opacus norm-sampler form of :func:`sampled_norms` (per-parameter L2 norms), so that
    Opacus's own ghost mode has a norm for every layer type of the registered models."""
    return {p: _sum_abs_or_sq(s, "l2").sqrt()
            for p, s in _grad_samples(layer, activations[0], backprops).items()}


def _trainable_modules(model: nn.Module) -> Iterator[tuple[str, nn.Module]]:
    """Modules of ``model`` that own trainable parameters directly."""
    for name, module in model.named_modules():
        if any(p.requires_grad for p in module.parameters(recurse=False)):
            yield name, module


def unsupported_layers(model: nn.Module) -> list[str]:
    """Trainable modules of ``model`` the fast engine cannot handle (empty: supported)."""
    problems = []
    for name, module in _trainable_modules(model):
        if type(module) not in RULES:
            problems.append(f"{name} ({type(module).__name__}: no per-example rule)")
        elif isinstance(module, nn.Conv1d | nn.Conv2d) and module.padding_mode != "zeros":
            problems.append(f"{name} ({module.padding_mode} padding)")
    return problems


@contextmanager
def _recording(model: nn.Module) -> Iterator[list[tuple[nn.Module, torch.Tensor, torch.Tensor]]]:
    """Within the block, every forward call of a trainable module appends ``(module, input,
    output)`` to the yielded list."""
    records: list[tuple[nn.Module, torch.Tensor, torch.Tensor]] = []

    def hook(module: nn.Module, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        records.append((module, inputs[0].detach(), output))

    handles = [m.register_forward_hook(hook) for _, m in _trainable_modules(model)]
    try:
        yield records
    finally:
        for handle in handles:
            handle.remove()


#: Largest number of per-example gradient entries (float32: 4 bytes each) that one chunk may
#: keep for the clip-weighted sum (128 MiB). A Conv/GroupNorm layer's grad samples, computed
#: for its norm anyway, are kept while the chunk's total stays within this budget, and its
#: weighted sum is then ``sum_i c_i G_i`` (one contraction) instead of a second weight-gradient
#: pass through the layer; beyond it (e.g. resnet18's wide convolutions) they are dropped after
#: the norm and the weighted sum comes from autograd. Measured on cnn4, b1024 (chunks of 256),
#: 2 shared cores (load ~7), main's engine and this one alternating in one process, 6 rounds
#: x 4 steps: fast / plain 2.48 -> 1.80 wall clock, 2.46 -> 1.95 process CPU. What is left is
#: mostly the per-example Conv2d grad samples (Opacus's unfold + batched matmul), which cost
#: about what the plain step's weight gradients cost.
KEEP_SAMPLES_BUDGET = 1 << 25


def conv_ghost_sq_norms(layer: nn.Conv2d, a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Per-example squared L2 norm of a ``Conv2d``'s parameter gradients without
    materialising them ("ghost norm", Goodfellow 2015 / Bu et al. 2022 for convolutions).

    With ``A`` the unfolded input [n, p, T] (p = C_in k_h k_w, T output positions) and ``G``
    the output gradient [n, o, T], the weight gradient is ``G A^T`` and
    ``||G A^T||_F^2 = sum_{t,t'} (A^T A)_{tt'} (G^T G)_{tt'}``: O(n T^2 (p + o)) instead of
    O(n T p o). Written by hand: Opacus 1.6 has no ghost norm for convolutions. Needs
    ``groups == 1`` (see :func:`_use_conv_ghost`).
    """
    from opacus.utils.tensor_utils import unfold2d

    n = a.shape[0]
    unfolded = unfold2d(a.contiguous(), kernel_size=layer.kernel_size, padding=layer.padding,
                        stride=layer.stride, dilation=layer.dilation)
    grads = g.reshape(n, g.shape[1], -1)
    gram_a = torch.bmm(unfolded.transpose(1, 2), unfolded)
    gram_g = torch.bmm(grads.transpose(1, 2), grads)
    total = (gram_a * gram_g).sum(dim=(1, 2))
    if layer.bias is not None and layer.bias.requires_grad:
        bias = grads.sum(dim=2)
        total = total + (bias * bias).sum(dim=1)
    return total


def _use_conv_ghost(layer: nn.Module, g: torch.Tensor, kind: str) -> bool:
    """The ghost norm of :func:`conv_ghost_sq_norms` is cheaper than the grad samples:
    L2, a plain ``Conv2d`` and ``T (p + o) < p o`` (T output positions, p = C_in k_h k_w,
    o = C_out), Bu et al.'s (2022) mixed ghost clipping criterion in flop form."""
    if kind != "l2" or type(layer) is not nn.Conv2d or layer.groups != 1:
        return False
    positions = g[0, 0].numel()
    p = layer.weight[0].numel()
    o = layer.weight.shape[0]
    return positions * (p + o) < p * o


def _linear_weighted_sum(layer: nn.Linear, a: torch.Tensor, weighted: torch.Tensor
                         ) -> list[torch.Tensor]:
    """``nn.Linear``'s parameter gradients for output gradient ``weighted`` (rows of any
    rank flattened: the layer's own weight-gradient formula, one matrix product)."""
    rows_g = weighted.reshape(-1, weighted.shape[-1])
    out = [rows_g.t().mm(a.reshape(-1, a.shape[-1]))]
    if layer.bias is not None and layer.bias.requires_grad:
        out.append(rows_g.sum(dim=0))
    return out


def clipped_gradient_sum(model: nn.Module, x: torch.Tensor, y: torch.Tensor, clip: float,
                         kind: str) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Losses [n] and ``sum_i c_i grad_i`` (one tensor per trainable parameter, in the order
    of ``model.parameters()``) from one forward and one backward pass.

    ``c_i = min(1, clip / (norm_i + 1e-6))``, Opacus's clip factor, with the norm flat over all
    parameters (``kind`` ``"l2"`` or ``"l1"``). Needs a supported model
    (:func:`unsupported_layers` empty).

    Per layer, the cheapest exact route: Linear's weighted sum is its own weight-gradient
    product; Conv grad samples computed for the norm are kept (within
    :data:`KEEP_SAMPLES_BUDGET`; GroupNorm's, n x 2C floats, always) and contracted with
    ``c``; a wide Conv2d gets a ghost norm (:func:`conv_ghost_sq_norms`) and, like Embedding
    and any Conv over the budget, its weighted sum from autograd (``grad(z, params, c * g)``).
    """
    if kind not in ("l2", "l1"):
        raise ConfigError(f"clip norm kind {kind!r} is not known; valid: l2, l1")
    with _recording(model) as records:
        logits = model(x)
    losses = F.cross_entropy(logits, y, reduction="none")
    outputs = [z for _, _, z in records]
    modules = [m for m, _, _ in records]
    if len(set(map(id, modules))) != len(modules):
        raise ConfigError("a module runs twice in one forward pass (tied weights); the fast "
                          "engine needs each trainable module once; use perf.engine=reference")
    grads = torch.autograd.grad(losses.sum(), outputs, retain_graph=True,
                                materialize_grads=True)
    kept: dict[int, dict[nn.Parameter, torch.Tensor]] = {}
    budget = KEEP_SAMPLES_BUDGET
    parts = []
    with torch.no_grad():
        for k, ((m, a, _), g) in enumerate(zip(records, grads, strict=True)):
            if type(m) in (nn.Conv1d, nn.Conv2d, nn.GroupNorm):
                size = len(a) * sum(p.numel() for p in m.parameters(recurse=False)
                                    if p.requires_grad)
                if size > budget and _use_conv_ghost(m, g, kind):
                    parts.append(conv_ghost_sq_norms(m, a, g))
                    continue
                samples = _grad_samples(m, a, g)
                parts.append(_from_grad_samples(samples, kind))
                if type(m) is nn.GroupNorm:
                    # Always kept (n x 2C floats), never weighted by autograd: torch 2.13's
                    # CPU GroupNorm backward for the affine parameters alone, on a
                    # channels-last input (as the NHWC images give), writes through the
                    # undefined input-gradient pointer and segfaults (found on ResNet-18,
                    # PneumoniaMNIST, once the budget ran out before a GroupNorm).
                    kept[k] = samples
                elif size <= budget:
                    kept[k] = samples
                    budget -= size
            else:
                parts.append(RULES[type(m)](m, a, g, kind))
        squares = torch.stack(parts).sum(dim=0)
        norms = squares.sqrt() if kind == "l2" else squares
        factors = (clip / (norms + dp.OPACUS_NORM_EPS)).clamp(max=1.0)
    summed: dict[int, torch.Tensor] = {}
    for k, ((module, a, z), g) in enumerate(zip(records, grads, strict=True)):
        params = [p for p in module.parameters(recurse=False) if p.requires_grad]
        if k in kept:
            with torch.no_grad():
                for p in params:
                    summed[id(p)] = torch.tensordot(factors, kept[k][p], dims=1)
            continue
        weighted = g * factors.reshape(-1, *([1] * (g.dim() - 1)))
        if type(module) is nn.Linear:
            with torch.no_grad():
                parts_of = _linear_weighted_sum(module, a, weighted)
        else:
            parts_of = list(torch.autograd.grad(z, params, weighted, retain_graph=True))
        for p, s in zip(params, parts_of, strict=True):
            summed[id(p)] = s
    return losses.detach(), [summed.get(id(p), torch.zeros_like(p))
                             for p in model.parameters() if p.requires_grad]


class FastTorchStepEngine(TorchStepEngine):
    """:class:`~torchpipe.engine.TorchStepEngine` with layer-wise clipping.

    No ``GradSampleModule``: each chunk's clipped sum comes from :func:`clipped_gradient_sum`;
    the reference's Opacus DP optimizer then adds the noise once per logical batch (same
    generator, same draws), divides by B (or the driver's divisor) and steps. Microbatches
    (``mechanism.microbatch_size > 1``) are not supported (the caller falls back).
    """

    def _wrap(self, model: nn.Module, grad_sample_mode: str) -> nn.Module:
        if self.mechanism.microbatch_size != 1:
            raise ConfigError(
                f"the fast torch engine clips per example; microbatch_size="
                f"{self.mechanism.microbatch_size} needs perf.engine=reference")
        return model

    def train_step(self, chunks: Sequence[Chunk], divisor: float | None = None,
                   extra: Mapping[str, np.ndarray] | None = None) -> float:
        """Clipped sums chunk by chunk, then the Opacus optimizer's noise, division and step.

        ``divisor``: of the noised sum; default the expected batch size B. ``extra``: added
        to the clipped sum before the noise (the canary hook, as the reference engine).
        """
        if not self.mechanism.private:
            return super().train_step(chunks, divisor)
        self._queue_extra(extra)
        params = [p for p in self.model.parameters() if p.requires_grad]
        summed = [torch.zeros_like(p) for p in params]
        device = model_device(self.model)
        total = 0.0
        for x, y in chunks:
            if len(y) == 0:
                continue
            losses, parts = clipped_gradient_sum(
                self.model, to_tensor(x, self.text, device), labels_tensor(y, device),
                self.mechanism.clip_norm, self.mechanism.clip_kind)
            total += float(losses.sum())
            for acc, part in zip(summed, parts, strict=True):
                acc += part
        optimizer = self.optimizer  # the reference's DPOptimizer (add_noise is its own)
        optimizer.zero_grad(set_to_none=True)
        for p, s in zip(params, summed, strict=True):
            p.summed_grad = s
        optimizer.add_noise()
        with torch.no_grad():
            scale = self.mechanism.expected_batch_size if divisor is None else divisor
            for p in params:
                p.grad /= scale
        optimizer.original_optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return total
