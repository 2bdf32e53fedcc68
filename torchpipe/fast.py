"""The fast torch DP engine (``perf.engine: fast``): Book-Keeping clipping, per-example
clipping without per-example gradients of the whole model. Mirror of :mod:`tfpipe.fast`.

The reference engine (:class:`torchpipe.engine.TorchStepEngine`) materialises every
parameter's per-example gradient with an Opacus ``GradSampleModule``. This engine is
Book-Keeping (BK) clipping (Bu, Wang, Zha, Karypis, ICML 2023; see :mod:`dpcore.fastrules`,
which states the rule): the same clipped sum from one ordinary forward and one backward pass.

1. forward hooks record each parameterised module's input ``a`` and output ``z`` (in any
   memory format: a ``perf.memory_format: channels_last`` model gives channels-last ``a``);
2. one backward pass (``torch.autograd.grad`` of the summed loss with respect to the ``z``)
   gives ``g = dL/dz``; examples are independent, so ``g[i]`` is example i's own;
3. each layer's rule (a :class:`FastRule` registered in :data:`FAST_RULES` for its exact
   module class; one rule may cover several classes) turns ``(a, g)`` into per-example sums
   of squares (L2) or of absolute values (L1) of its parameter gradients by one of its routes
   (:data:`dpcore.fastrules.ROUTES`: the ghost norm, per-example gradients from one grouped
   weight-gradient op, or from an explicit unfold and one batched product): the route timed
   fastest at warm-up or replayed from ``perf.routes`` (:mod:`dpcore.fastroutes`), else BK's
   rule (``2 T^2 < p d``); summed over layers they give each example's flat norm and its
   clip factor, Opacus's ``min(1, C / (norm + 1e-6))`` (the reference's);
4. each layer's clip-weighted sum ``sum_i c_i grad_i`` from the same pass: where the route
   made per-example gradients, ``sum_i c_i G_i`` of those it kept (one contraction); else one
   explicit weight-gradient op of the layer alone with output gradient ``c * g`` (Linear: a
   matrix product; Conv: ``aten.convolution_backward`` with only the weight and bias outputs;
   Embedding: one ``index_add``). No gradient flows back through the model a second time
   (Opacus's fast gradient clipping runs a second backward pass instead).

Steps 3-4 are :func:`clip_records`, the one place where the layers' ``(a, g)`` pairs become
norms and clipped sums (rows appended to a layer's ``a`` and ``g`` there are clipped and summed
like examples).

What comes from Opacus: the L2 ghost norm of Linear
(``GradSampleModuleFastGradientClipping.NORM_SAMPLERS``), the per-example grad samplers of
Linear, Conv1d/Conv2d (with :mod:`torchpipe.dp`'s contiguity fix; the ``unfold`` route),
GroupNorm and LayerNorm, and the optimizer (noise from the same seeded generator in the same
parameter order, division, step: the reference's ``DPOptimizer`` / ``LaplaceDPOptimizer``).
Written here: the Conv1d/Conv2d ghost norm (Opacus 1.6 has none for convolutions;
:func:`conv_ghost_sq_norms`), the grouped per-example convolution gradients
(:func:`conv_grouped_grad_samples`), the Embedding norms (Opacus's L2 norms to the bit, ~15x
faster), every L1 norm (Opacus has none), and the weight-gradient ops of step 4. The L2 norms of
Conv/GroupNorm/LayerNorm are also registered as Opacus norm samplers, so that Opacus's own
``grad_sample_mode="ghost"`` covers every layer type of the registered models.

A model with a trainable module type without a registered rule (or a module called twice
per forward, i.e. tied weights) is not supported: :func:`unsupported_layers` names it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from opacus.grad_sample.grad_sample_module import GradSampleModule
from opacus.grad_sample.linear import compute_linear_grad_sample, compute_linear_norm_sample
from opacus.grad_sample.utils import register_norm_sampler
from torch import nn

from dpcore.audit.canary_records import CanaryRecords, with_canaries
from dpcore.config import PerfSpec, RunConfig
from dpcore.errors import ConfigError
from dpcore.fastroutes import LayerRoutes, RouteBook, size_class
from dpcore.fastrules import GHOST, PER_EXAMPLE, UNFOLD, RouteRule
from dpcore.registry import Registry
from dpcore.stepengine import Chunk, StepMechanism
from torchpipe import dp
from torchpipe.canaries import with_canary_rows
from torchpipe.device import model_device
from torchpipe.engine import TorchStepEngine
from torchpipe.predict import labels_tensor, to_tensor

#: ``perf_details["per_example_gradients"]`` of a run on this engine.
DESCRIPTION = ("Book-Keeping: layer-wise norms (ghost or per-example by 2T^2 < pd) from one "
               "forward/backward pass (torchpipe.fast, Opacus norm and grad samplers), "
               "clip-weighted sum from the same pass")

#: One module's per-example tensors or sums, by parameter (trainable ones only).
ParamTensors = dict[nn.Parameter, torch.Tensor]


def _sum_abs_or_sq(t: torch.Tensor, kind: str) -> torch.Tensor:
    """Per-example sum of squares (l2) or of absolute values (l1) over all but axis 0."""
    flat = t.reshape(len(t), -1)
    return (flat * flat).sum(dim=1) if kind == "l2" else flat.abs().sum(dim=1)


def _from_grad_samples(samples: ParamTensors, kind: str) -> torch.Tensor:
    """Summed per-example norm contributions of materialised per-layer grad samples."""
    return torch.stack([_sum_abs_or_sq(s, kind) for s in samples.values()]).sum(dim=0)


def _grad_samples(layer: nn.Module, a: torch.Tensor, g: torch.Tensor) -> ParamTensors:
    """Opacus's registered per-example grad sampler of ``layer`` (the reference's own)."""
    return GradSampleModule.GRAD_SAMPLERS[type(layer)](layer, [a], g)


def _trainable(layer: nn.Module) -> list[nn.Parameter]:
    """The layer's own trainable parameters, in registration order."""
    return [p for p in layer.parameters(recurse=False) if p.requires_grad]


@dataclass
class LayerNorms:
    """One layer's share of the per-example norms.

    Attributes:
        sums: [n] sums of squares (L2) or of absolute values (L1) of its parameter gradients.
        kept: the per-example gradients [n, *shape] made for ``sums``, kept for the clipped
            sum; None where the norm was a ghost norm (nothing per-example was made).
    """

    sums: torch.Tensor
    kept: ParamTensors | None = None


class FastRule(RouteRule):
    """How one module type turns its input ``a`` and output gradient ``g`` (example axis
    first) into per-example norms and the clip-weighted sum (see :mod:`dpcore.fastrules`).

    Subclasses implement :meth:`norms` for each of their :attr:`ROUTES` and, when some norm is
    a ghost norm, :meth:`weight_gradients`; :meth:`problem` names a configuration the rule
    cannot handle; :meth:`routes` and :meth:`default_route` come from
    :class:`dpcore.fastrules.RouteRule`.
    """

    def problem(self, layer: nn.Module) -> str | None:
        """Why this rule cannot handle ``layer`` (None: it can)."""
        return None

    def share_key(self, layer: nn.Module, a: torch.Tensor, g: torch.Tensor) -> Hashable:
        """Layers with equal keys cost the same on every route (timed once)."""
        return (type(layer).__name__, tuple(a.shape), a.stride(), tuple(g.shape), g.stride(),
                repr(layer))

    def norms(self, layer: nn.Module, a: torch.Tensor, g: torch.Tensor, kind: str,
              route: str | None = None) -> LayerNorms:
        """Per-example norm contributions (``kind`` ``"l2"`` or ``"l1"``) by ``route`` (one
        of :meth:`routes`; None: :meth:`default_route`)."""
        raise NotImplementedError

    def weight_gradients(self, layer: nn.Module, a: torch.Tensor, g: torch.Tensor
                         ) -> ParamTensors:
        """The layer's summed parameter gradients for output gradient ``g`` (one op)."""
        raise NotImplementedError

    def weighted_sum(self, layer: nn.Module, a: torch.Tensor, g: torch.Tensor,
                     factors: torch.Tensor, kept: ParamTensors | None) -> ParamTensors:
        """``sum_i factors[i] grad_i`` per parameter: from ``kept`` per-example gradients
        when there are any, else :meth:`weight_gradients` of ``factors * g``."""
        if kept is not None:
            return {p: torch.tensordot(factors, s, dims=1) for p, s in kept.items()}
        return self.weight_gradients(layer, a, g * factors.reshape(-1, *([1] * (g.dim() - 1))))


#: torch module class -> its rule (exact classes). ``@FAST_RULES.register(nn.Conv2d)`` on a
#: :class:`FastRule` subclass files one instance of it under each class given.
FAST_RULES: Registry[type, FastRule] = Registry(
    "torch fast rules", key="torch module class", make=lambda rule_class: rule_class())


@FAST_RULES.register(nn.Linear)
class LinearRule(FastRule):
    """``nn.Linear`` on [n, ..., p] inputs, T = the positions between the example and the
    feature axis (1 for a vector). On a vector, only the ghost norm (L2: Opacus's norm
    sampler, ``||a|| ||g||``; L1: the outer product's ``||a||_1 ||g||_1``, exact and
    hand-written). On positions (T > 1): the ghost norm (L2, Opacus's norm sampler) or
    Opacus's per-example grad samples (kept). Weighted sum: the layer's weight-gradient
    product ``(c g)^T a``."""

    ROUTES = (PER_EXAMPLE, GHOST)

    def routes(self, layer: nn.Module, a: torch.Tensor, kind: str) -> tuple[str, ...]:
        return (GHOST,) if a.dim() == 2 else super().routes(layer, a, kind)

    def dims(self, layer: nn.Module, a: torch.Tensor, g: torch.Tensor
             ) -> tuple[int, int, int]:
        return a[0].numel() // a.shape[-1], layer.in_features, layer.out_features

    def norms(self, layer: nn.Module, a: torch.Tensor, g: torch.Tensor, kind: str,
              route: str | None = None) -> LayerNorms:
        if a.dim() == 2 and kind == "l1":  # a vector per example: ||a g^T|| = ||a|| ||g||
            total = _sum_abs_or_sq(a, kind) * _sum_abs_or_sq(g, kind) \
                if layer.weight.requires_grad else a.new_zeros(len(a))
            if layer.bias is not None and layer.bias.requires_grad:
                total = total + _sum_abs_or_sq(g, kind)
            return LayerNorms(total)
        if a.dim() == 2 or (route or self.default_route(layer, a, g, kind)) == GHOST:
            norms = compute_linear_norm_sample(layer, [a], g)
            return LayerNorms(torch.stack([n * n for n in norms.values()]).sum(dim=0))
        samples = compute_linear_grad_sample(layer, [a], g)
        return LayerNorms(_from_grad_samples(samples, kind), samples)

    def weight_gradients(self, layer: nn.Module, a: torch.Tensor, g: torch.Tensor
                         ) -> ParamTensors:
        rows_g = g.reshape(-1, g.shape[-1])
        out: ParamTensors = {}
        if layer.weight.requires_grad:
            out[layer.weight] = rows_g.t().mm(a.reshape(-1, a.shape[-1]))
        if layer.bias is not None and layer.bias.requires_grad:
            out[layer.bias] = rows_g.sum(dim=0)
        return out


@FAST_RULES.register(nn.Embedding)
class EmbeddingRule(FastRule):
    """``nn.Embedding``: always a ghost norm (example i's gradient of the [V, D] table is
    nonzero only in the rows of its T tokens, so it is never worth materialising). Both
    norms, hand-written: the output gradients are summed per distinct (example, token) pair
    (one ``torch.unique`` of the scalar keys ``example * V + token``, one ``index_add``),
    which gives each example's rows of the table gradient exactly (at most n T rows, never
    n V D). Opacus's L2 norm sampler takes the unique of (example, token) *rows* instead,
    ~15x slower on IMDB's textcnn (measured); the L2 norms here are its bits all the same
    (the same sorted pairs, sums and order of additions, and its square root squared:
    ``tests/backends/test_fast_engine_torch.py``). Weighted sum: one ``index_add`` of
    ``c g``."""

    ROUTES = (GHOST,)
    GHOST_FOR_L1 = True

    def problem(self, layer: nn.Module) -> str | None:
        if layer.padding_idx is not None or layer.max_norm is not None:
            return "padding_idx or max_norm"
        return None

    def dims(self, layer: nn.Module, a: torch.Tensor, g: torch.Tensor
             ) -> tuple[int, int, int]:
        return a[0].numel(), layer.num_embeddings, layer.embedding_dim

    def norms(self, layer: nn.Module, a: torch.Tensor, g: torch.Tensor, kind: str,
              route: str | None = None) -> LayerNorms:
        n = a.shape[0]
        ids = a.reshape(-1).long()
        rows = g.reshape(-1, g.shape[-1])
        example = torch.arange(n, device=a.device).repeat_interleave(a[0].numel())
        pairs, pair_of_position = torch.unique(example * layer.num_embeddings + ids,
                                               return_inverse=True)
        per_pair = rows.new_zeros(len(pairs), rows.shape[1])
        per_pair.index_add_(0, pair_of_position, rows)
        out = rows.new_zeros(n)
        if kind == "l1":
            return LayerNorms(out.index_add_(0, pairs // layer.num_embeddings,
                                             _sum_abs_or_sq(per_pair, kind)))
        # Opacus's compute_embedding_norm_sample from here on, squared as its norm was
        out.scatter_add_(0, pairs // layer.num_embeddings, torch.sum(per_pair ** 2, dim=1))
        return LayerNorms(torch.sqrt(out) ** 2)

    def weight_gradients(self, layer: nn.Module, a: torch.Tensor, g: torch.Tensor
                         ) -> ParamTensors:
        table = torch.zeros_like(layer.weight)
        return {layer.weight: table.index_add_(0, a.reshape(-1).long(),
                                               g.reshape(-1, g.shape[-1]))}


def conv_ghost_sq_norms(layer: nn.Conv1d | nn.Conv2d, a: torch.Tensor, g: torch.Tensor
                        ) -> torch.Tensor:
    """Per-example squared L2 norm of a ``Conv1d`` / ``Conv2d``'s parameter gradients without
    materialising them ("ghost norm", Goodfellow 2015 / Bu et al. 2022 for convolutions).

    With ``A`` the unfolded input [n, p, T] (p = C_in k_h k_w, T output positions) and ``G``
    the output gradient [n, o, T], the weight gradient is ``G A^T`` and
    ``||G A^T||_F^2 = sum_{t,t'} (A^T A)_{tt'} (G^T G)_{tt'}``: O(n T^2 (p + o)) instead of
    O(n T p o). Written by hand: Opacus 1.6 has no ghost norm for convolutions. A ``Conv1d``
    is unfolded as a height-1 ``Conv2d``. Needs ``groups == 1`` (see :meth:`ConvRule.routes`).
    Any memory format (unfolded from a contiguous copy: Opacus's ``unfold2d`` assumes NCHW
    strides).
    """
    from opacus.utils.tensor_utils import unfold2d

    n = a.shape[0]
    grads = g.reshape(n, g.shape[1], -1)
    total = torch.zeros(n, dtype=g.dtype, device=g.device)
    if layer.weight.requires_grad:
        if a.dim() == 3:  # Conv1d: [n, C, L] as [n, C, 1, L] with a (1, k) kernel
            a = a.unsqueeze(2)
            geometry = {name: (first, getattr(layer, name)[0]) for name, first in
                        (("kernel_size", 1), ("padding", 0), ("stride", 1), ("dilation", 1))}
        else:
            geometry = {name: getattr(layer, name)
                        for name in ("kernel_size", "padding", "stride", "dilation")}
        unfolded = unfold2d(a.contiguous(), **geometry)
        gram_a = torch.bmm(unfolded.transpose(1, 2), unfolded)
        gram_g = torch.bmm(grads.transpose(1, 2), grads)
        total = total + (gram_a * gram_g).sum(dim=(1, 2))
    if layer.bias is not None and layer.bias.requires_grad:
        bias = grads.sum(dim=2)
        total = total + (bias * bias).sum(dim=1)
    return total


def conv_grouped_grad_samples(layer: nn.Conv1d | nn.Conv2d, a: torch.Tensor, g: torch.Tensor
                              ) -> ParamTensors:
    """Per-example parameter gradients of a ``Conv1d`` / ``Conv2d`` from one
    ``aten.convolution_backward`` of the grouped convolution whose group i is example i
    (input [1, n C_in, ...], output gradient [1, n C_out, ...], n x groups groups; weight
    output only): the layer's own weight-gradient kernel, no unfolded input. The input and
    output gradient are made NCHW-contiguous first (examples as channels need it)."""
    n = a.shape[0]
    out: ParamTensors = {}
    if layer.weight.requires_grad:
        w = layer.weight
        grouped_a = a.contiguous().reshape(1, n * a.shape[1], *a.shape[2:])
        grouped_g = g.contiguous().reshape(1, n * g.shape[1], *g.shape[2:])
        weight = w.new_empty((n * w.shape[0], *w.shape[1:]))  # only its shape is read
        _, grad, _ = torch.ops.aten.convolution_backward(
            grouped_g, grouped_a, weight, None, layer.stride, layer.padding, layer.dilation,
            False, [0] * len(layer.stride), n * layer.groups, (False, True, False))
        out[w] = grad.reshape(n, *w.shape)
    if layer.bias is not None and layer.bias.requires_grad:
        out[layer.bias] = g.sum(dim=tuple(range(2, g.dim())))
    return out


@FAST_RULES.register(nn.Conv1d, nn.Conv2d)
class ConvRule(FastRule):
    """``Conv1d`` / ``Conv2d`` (zero padding): T = output positions, p = C_in k (k_h k_w),
    d = C_out. Routes: ``unfold`` (Opacus's grad sampler: the unfolded input and one
    batched product, kept; first, so the rule's non-ghost route), ``per_example``
    (:func:`conv_grouped_grad_samples`, kept) and, for groups 1, ``ghost``
    (:func:`conv_ghost_sq_norms`). Weighted sum of a ghost norm:
    ``aten.convolution_backward`` of ``c g`` with only the weight and bias outputs (the op
    the plain backward runs for them; any memory format)."""

    ROUTES = (UNFOLD, PER_EXAMPLE, GHOST)

    def problem(self, layer: nn.Module) -> str | None:
        if layer.padding_mode != "zeros":
            return f"{layer.padding_mode} padding"
        if isinstance(layer.padding, str):
            return f"padding={layer.padding!r}"
        return None

    def routes(self, layer: nn.Module, a: torch.Tensor, kind: str) -> tuple[str, ...]:
        routes = super().routes(layer, a, kind)
        return routes if layer.groups == 1 else tuple(r for r in routes if r != GHOST)

    def dims(self, layer: nn.Module, a: torch.Tensor, g: torch.Tensor
             ) -> tuple[int, int, int]:
        return g[0, 0].numel(), layer.weight[0].numel(), layer.out_channels

    def norms(self, layer: nn.Module, a: torch.Tensor, g: torch.Tensor, kind: str,
              route: str | None = None) -> LayerNorms:
        route = route or self.default_route(layer, a, g, kind)
        if route == GHOST:
            return LayerNorms(conv_ghost_sq_norms(layer, a, g))
        samples = conv_grouped_grad_samples(layer, a, g) if route == PER_EXAMPLE \
            else _grad_samples(layer, a, g)
        return LayerNorms(_from_grad_samples(samples, kind), samples)

    def weight_gradients(self, layer: nn.Module, a: torch.Tensor, g: torch.Tensor
                         ) -> ParamTensors:
        bias = layer.bias is not None and layer.bias.requires_grad
        _, weight, bias_grad = torch.ops.aten.convolution_backward(
            g, a, layer.weight, [layer.out_channels] if bias else None, layer.stride,
            layer.padding, layer.dilation, False, [0] * len(layer.stride), layer.groups,
            (False, layer.weight.requires_grad, bias))
        out: ParamTensors = {}
        if layer.weight.requires_grad:
            out[layer.weight] = weight
        if bias:
            out[layer.bias] = bias_grad
        return out


@FAST_RULES.register(nn.GroupNorm, nn.LayerNorm)
class NormalizationRule(FastRule):
    """``GroupNorm`` / ``LayerNorm``: their parameters are C-vectors, so the per-example
    gradients ([n, C] each, Opacus's grad samplers) are always made and kept (BK's rule with
    p d = C never favours a ghost norm over so little). They are also never weighted through
    autograd: torch 2.13's CPU GroupNorm backward for the affine parameters alone, on a
    channels-last input, writes through the undefined input-gradient pointer and segfaults
    (found on ResNet-18, PneumoniaMNIST)."""

    def norms(self, layer: nn.Module, a: torch.Tensor, g: torch.Tensor, kind: str,
              route: str | None = None) -> LayerNorms:
        if isinstance(layer, nn.GroupNorm) and not a.is_contiguous():
            # torch 2.13's CPU group_norm on a channels-last input is ~11x slower than on
            # NCHW (ResNet-18's first block: 16 ms vs 1.4 ms, one thread): two copies cost less
            a, g = a.contiguous(), g.contiguous()
        samples = _grad_samples(layer, a, g)
        return LayerNorms(_from_grad_samples(samples, kind), samples)


@register_norm_sampler([nn.Conv1d, nn.Conv2d, nn.GroupNorm, nn.LayerNorm])
def sampled_norm_sample(layer: nn.Module, activations: list[torch.Tensor],
                        backprops: torch.Tensor) -> ParamTensors:
    """Opacus norm-sampler form of the per-example L2 norms of Conv/GroupNorm/LayerNorm
    (per parameter), so that Opacus's own ghost mode has a norm for every layer type of the
    registered models."""
    return {p: _sum_abs_or_sq(s, "l2").sqrt()
            for p, s in _grad_samples(layer, activations[0], backprops).items()}


def _trainable_modules(model: nn.Module) -> Iterator[tuple[str, nn.Module]]:
    """Modules of ``model`` that own trainable parameters directly."""
    for name, module in model.named_modules():
        if _trainable(module):
            yield name, module


def unsupported_layers(model: nn.Module) -> list[str]:
    """Trainable modules of ``model`` the fast engine cannot handle (empty: supported)."""
    problems = []
    for name, module in _trainable_modules(model):
        rule = FAST_RULES.get(type(module))
        if rule is None:
            problems.append(f"{name} ({type(module).__name__}: no per-example rule)")
        elif (problem := rule.problem(module)) is not None:
            problems.append(f"{name} ({problem})")
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


#: One recorded layer: the module, its input ``a`` (detached), its output gradient ``g``.
LayerRecord = tuple[nn.Module, torch.Tensor, torch.Tensor]


def record_layers(model: nn.Module, x: torch.Tensor, y: torch.Tensor
                  ) -> tuple[torch.Tensor, list[LayerRecord]]:
    """Book-Keeping's one forward and one backward pass: the losses [n] (with their graph)
    and, per trainable module in forward order, ``(module, a, g)`` with ``g = dL/dz`` of the
    summed loss. Raises :class:`ConfigError` for a module run twice (tied weights)."""
    with _recording(model) as records:
        logits = model(x)
    losses = F.cross_entropy(logits, y, reduction="none")
    modules = [m for m, _, _ in records]
    if len(set(map(id, modules))) != len(modules):
        raise ConfigError("a module runs twice in one forward pass (tied weights); the fast "
                          "engine needs each trainable module once; use perf.engine=reference")
    grads = torch.autograd.grad(losses.sum(), [z for _, _, z in records],
                                materialize_grads=True)
    return losses, [(m, a, g) for (m, a, _), g in zip(records, grads, strict=True)]


def module_names(model: nn.Module) -> dict[int, str]:
    """``id(module) -> name`` of the model's modules (the routes' keys)."""
    return {id(m): name for name, m in model.named_modules()}


def clip_records(records: Sequence[LayerRecord], params: Sequence[nn.Parameter], clip: float,
                 kind: str, routes: Sequence[str | None] | None = None,
                 weights: torch.Tensor | None = None) -> list[torch.Tensor]:
    """``sum_i w_i c_i grad_i`` (one tensor per parameter of ``params``; zeros for one no
    layer reaches) from each layer's ``(module, a, g)``: the one place where the layers'
    inputs and output gradients become per-example norms and clipped sums.

    Row i of every layer's ``a`` and ``g`` is one example (rows appended to all of them are
    clipped and summed as more examples). ``c_i = min(1, clip / (norm_i + 1e-6))``, Opacus's
    clip factor, with the norm flat over all parameters (``kind`` ``"l2"`` or ``"l1"``).
    ``routes``: one route per record (None: its rule's default); ``weights`` [n]: each row's
    weight (1: an example, 0: a padding row; None: all 1).
    """
    if kind not in ("l2", "l1"):
        raise ConfigError(f"clip norm kind {kind!r} is not known; valid: l2, l1")
    chosen = list(routes) if routes is not None else [None] * len(records)
    rules = [FAST_RULES.get(type(m)) for m, _, _ in records]
    summed: dict[int, torch.Tensor] = {}
    with torch.no_grad():
        layer_norms = [rule.norms(m, a, g, kind, route) for rule, (m, a, g), route
                       in zip(rules, records, chosen, strict=True)]
        squares = torch.stack([n.sums for n in layer_norms]).sum(dim=0)
        norms = squares.sqrt() if kind == "l2" else squares
        factors = (clip / (norms + dp.OPACUS_NORM_EPS)).clamp(max=1.0)
        if weights is not None:
            factors = factors * weights.to(factors.dtype)
        for rule, (m, a, g), n in zip(rules, records, layer_norms, strict=True):
            for p, s in rule.weighted_sum(m, a, g, factors, n.kept).items():
                summed[id(p)] = s
    return [summed.get(id(p), torch.zeros_like(p)) for p in params]


def chunk_records(n: int, losses: torch.Tensor, records: Sequence[LayerRecord],
                  canaries: CanaryRecords | None, weights: torch.Tensor | None
                  ) -> tuple[list[LayerRecord], torch.Tensor | None]:
    """A chunk's recorded ``(module, a, g)`` cut to its ``n`` examples (a chunk of canaries
    alone was recorded on one zero example, :func:`record_chunk`), with the audit's canary
    rows appended (:func:`torchpipe.canaries.with_canary_rows`), and the rows' weights
    (``weights`` [n], None: all 1; the canaries' 1)."""
    records = [(m, a[:n], g[:n]) for m, a, g in records]
    if canaries is None or canaries.count == 0:
        return records, weights
    ones = torch.ones(canaries.count, dtype=losses.dtype, device=losses.device)
    base = torch.ones(n, dtype=losses.dtype, device=losses.device) if weights is None \
        else weights.to(losses.dtype)
    return with_canary_rows(records, canaries), torch.cat([base, ones])


def record_chunk(model: nn.Module, x: torch.Tensor, y: torch.Tensor
                 ) -> tuple[torch.Tensor, list[LayerRecord]]:
    """:func:`record_layers` of a chunk; a chunk of no example (canaries alone) is recorded
    on one zero example, which :func:`chunk_records` cuts off."""
    if len(y) == 0:
        x, y = torch.zeros(1, *x.shape[1:], dtype=x.dtype, device=x.device), y.new_zeros(1)
    return record_layers(model, x, y)


def clipped_gradient_sum(model: nn.Module, x: torch.Tensor, y: torch.Tensor, clip: float,
                         kind: str, routes: Mapping[str, str] | None = None,
                         weights: torch.Tensor | None = None,
                         canaries: CanaryRecords | None = None
                         ) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Losses [n] and ``sum_i w_i c_i grad_i`` (one tensor per trainable parameter, in the
    order of ``model.parameters()``) from one forward and one backward pass (Book-Keeping;
    :func:`record_layers`, then :func:`clip_records`). ``routes``: module name -> route (a
    module not named takes its rule's default). ``canaries``: the audit's gradient canaries,
    as more rows of the modules' ``(a, g)`` pairs (:func:`chunk_records`), clipped and summed
    as examples (they add no loss). Needs a supported model (:func:`unsupported_layers`
    empty).
    """
    n = len(y)
    losses, records = record_chunk(model, x, y)
    names = module_names(model)
    chosen = [(routes or {}).get(names[id(m)]) for m, _, _ in records]
    records, weights = chunk_records(n, losses, records, canaries, weights)
    params = [p for p in model.parameters() if p.requires_grad]
    return losses.detach()[:n], clip_records(records, params, clip, kind, chosen, weights)


def layer_routes(records: Sequence[LayerRecord], names: Mapping[int, str], kind: str,
                 examples: int | None) -> list[LayerRoutes]:
    """Every recorded layer's routes for :class:`RouteBook`, with a thunk per route that
    runs its norm and clipped sum on the layer's real ``a`` and ``g`` (their first
    ``examples`` rows; None: all)."""
    out = []
    for module, a, g in records:
        rule = FAST_RULES.get(type(module))
        a, g = a[:examples], g[:examples]
        factors = torch.full((len(a),), 0.5, dtype=g.dtype)

        def run(route: str, rule: FastRule = rule, module: nn.Module = module,
                a: torch.Tensor = a, g: torch.Tensor = g, factors: torch.Tensor = factors
                ) -> Callable[[], Any]:
            def once() -> None:
                with torch.no_grad():
                    norms = rule.norms(module, a, g, kind, route)
                    rule.weighted_sum(module, a, g, factors, norms.kept)
            return once

        out.append(LayerRoutes(names[id(module)], rule.routes(module, a, kind),
                               rule.dims(module, a, g), kind, run,
                               rule.share_key(module, a, g)))
    return out


class FastTorchStepEngine(TorchStepEngine):
    """:class:`~torchpipe.engine.TorchStepEngine` with layer-wise clipping.

    No ``GradSampleModule``: each chunk's clipped sum comes from :func:`record_layers` and
    :func:`clip_records`; the reference's Opacus DP optimizer then adds the noise once per
    logical batch (same generator, same draws), divides by B (or the driver's divisor) and
    steps. The layers' routes are settled at the first chunk of each size class
    (:class:`dpcore.fastroutes.RouteBook`: replayed from ``perf.routes`` or timed on that
    chunk's own ``a`` and ``g``). Compiled (``perf.compile``): :func:`clip_records` runs
    through ``torch.compile`` (the forward and backward pass cannot be: the output gradients
    of a compiled model's inner layers come back as zeros, measured), on chunks padded to
    their size class. Microbatches (``mechanism.microbatch_size > 1``) are not supported
    (the caller falls back).
    """

    def __init__(self, model: nn.Module, config: RunConfig, mechanism: StepMechanism,
                 perf: PerfSpec) -> None:
        super().__init__(model, config, mechanism, perf)
        self.book = RouteBook(perf.routes, measure=perf.route_choice == "measure")
        self._names = module_names(model)
        self._clip = torch.compile(clip_records, dynamic=False) if self.compiled \
            else clip_records

    def _wrap(self, model: nn.Module, grad_sample_mode: str) -> nn.Module:
        if self.mechanism.microbatch_size != 1:
            raise ConfigError(
                f"the fast torch engine clips per example; microbatch_size="
                f"{self.mechanism.microbatch_size} needs perf.engine=reference")
        return model

    def _routes(self, size: int, records: Sequence[LayerRecord]) -> list[str]:
        """The records' routes in size class ``size`` (settled at its first chunk)."""
        if not self.book.has(size):
            self.book.settle(size, lambda: layer_routes(
                records, self._names, self.mechanism.clip_kind, self.book.policy.max_examples))
        chosen = self.book.routes(size)
        return [chosen[self._names[id(m)]] for m, _, _ in records]

    def train_step(self, chunks: Sequence[Chunk], divisor: float | None = None,
                   extra: Mapping[str, np.ndarray] | None = None,
                   canaries: CanaryRecords | None = None) -> float:
        """Clipped sums chunk by chunk, then the Opacus optimizer's noise, division and step.

        ``divisor``: of the noised sum; default the expected batch size B. ``extra``: added
        to the clipped sum before the noise; ``canaries``: rows of the layers' ``(a, g)``
        pairs, clipped with the chunks' examples (both: as the reference engine).
        """
        if not self.mechanism.private:
            return super().train_step(chunks, divisor)
        self._queue_extra(extra)
        params = [p for p in self.model.parameters() if p.requires_grad]
        summed = [torch.zeros_like(p) for p in params]
        device = model_device(self.model)
        total = 0.0
        chunks = list(chunks)
        per_chunk = max((len(y) for _, y in chunks), default=1)
        for i, rows in with_canaries(len(chunks), canaries, per_chunk):
            x, y = self._empty_chunk() if i is None else chunks[i]
            if len(y) == 0 and rows is None:
                continue
            x, y, weights = self._padded(x, y)
            losses, records = record_chunk(
                self.model, to_tensor(x, self.text, device, self.memory_format),
                labels_tensor(y, device))
            size = size_class(len(y), self.physical)
            routes = self._routes(size, records)
            records, rows_weights = chunk_records(  # the audit's canary rows appended
                len(y), losses, records, rows, torch.from_numpy(weights).to(device))
            parts = self._clip(records, params, self.mechanism.clip_norm,
                               self.mechanism.clip_kind, routes, rows_weights)
            total += float((losses.detach()[:len(y)]
                            * torch.from_numpy(weights).to(device)).sum())
            for acc, part in zip(summed, parts, strict=True):
                acc += part
        optimizer = self.optimizer  # the reference's DPOptimizer (add_noise is its own)
        optimizer.zero_grad(set_to_none=True)
        for p, s in zip(params, summed, strict=True):
            p.summed_grad = s
        optimizer.add_noise()
        with torch.no_grad():
            scale = self.mechanism.expected_batch_size if divisor is None else divisor
            self._divisor = float(scale)
            for p in params:
                p.grad /= scale
        optimizer.original_optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return total

    def perf_record(self) -> dict[str, Any]:
        """The base record, and the routes and how they were chosen
        (:meth:`dpcore.fastroutes.RouteBook.record`)."""
        return {**super().perf_record(), **self.book.record()}
