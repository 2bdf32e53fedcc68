"""The audit's gradient canaries on PyTorch: a step's canary records
(:class:`dpcore.audit.canary_records.CanaryRecords`) in torch's layouts, and the report of the
noised sum at the canaries' coordinates.

* the reference engine and the Opacus library recipe append the canaries' per-example
  gradients to every parameter's ``grad_sample`` (:func:`append_grad_samples`) before
  Opacus's ``DPOptimizer`` clips (``clip_and_accumulate``);
* the fast engine appends each canary's row to the ``(a, g)`` pair of the module that owns
  its coordinate, zero rows to every other module's (:func:`with_canary_rows`), before the
  module rules compute norms and clipped sums. Neutral per-example positions are channels
  last; torch's are channels first (a convolution's input also shifted by the padding a
  padding module applied before it);
* :class:`GradientWatch` reads the gradient an optimizer is about to apply, at the watched
  coordinates (a step pre-hook of the optimizer that applies it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from dpcore.audit.canary_records import CanaryRecords, SparseRows
from dpcore.errors import ConfigError
from torchpipe.models import parameter_indices

#: A recorded layer: the module, its input ``a``, its output gradient ``g``.
LayerRecord = tuple[nn.Module, torch.Tensor, torch.Tensor]


def gradient_rows(records: CanaryRecords, model: nn.Module, repeat: int = 1
                  ) -> dict[int, torch.Tensor]:
    """The canaries' per-example gradients in torch's layout: ``id`` of a parameter ->
    ``[m * repeat, *p.shape]`` (each canary ``repeat`` times in a row: a microbatch of
    identical examples, whose mean is the canary); parameters they miss are absent."""
    where = parameter_indices(model, {k: s.index[:, 0] for k, s in records.gradient.items()})
    out: dict[int, torch.Tensor] = {}
    for key, sparse in records.gradient.items():
        param, flat = where[key]
        dense = torch.zeros(records.count, param.numel(), dtype=param.dtype,
                            device=param.device)
        dense.index_put_((torch.from_numpy(sparse.rows).to(param.device),
                          torch.from_numpy(flat).to(param.device)),
                         torch.from_numpy(sparse.values).to(param.dtype).to(param.device),
                         accumulate=True)
        if repeat > 1:
            dense = dense.repeat_interleave(repeat, dim=0)
        out[id(param)] = dense.reshape(-1, *param.shape)
    return out


def append_grad_samples(params: Iterable[nn.Parameter], records: CanaryRecords | None,
                        model: nn.Module, repeat: int = 1) -> None:
    """Append the canaries' per-example gradients to every parameter's ``grad_sample``
    (zeros where they have none), ``repeat`` rows per canary; a parameter without a
    ``grad_sample`` (an empty chunk) gets the canaries' rows alone."""
    if records is None or records.count == 0:
        return
    rows = gradient_rows(records, model, repeat)
    for p in params:
        extra = rows.get(id(p))
        if extra is None:
            extra = torch.zeros(records.count * repeat, *p.shape, dtype=p.dtype,
                                device=p.device)
        current = getattr(p, "grad_sample", None)
        if isinstance(current, list):
            current = torch.cat(current, dim=0)
        p.grad_sample = extra if current is None else torch.cat([current, extra], dim=0)


def _torch_index(module: nn.Module, index: np.ndarray, pad_before: Sequence[int],
                 activation: bool) -> np.ndarray:
    """Neutral per-example positions (channels last, unpadded input) -> positions in the
    module's own tensor: channels first for a convolution or a group norm (NCHW, NCL), a
    convolution's input shifted by the padding applied before the module."""
    if not isinstance(module, nn.Conv1d | nn.Conv2d | nn.GroupNorm) or index.shape[1] < 2:
        return index
    out = np.concatenate([index[:, -1:], index[:, :-1]], axis=1)
    if activation and isinstance(module, nn.Conv1d | nn.Conv2d) and len(pad_before):
        own = module.padding if isinstance(module.padding, tuple) else (module.padding,)
        out[:, 1:] += np.asarray(pad_before, np.int64) - np.asarray(own, np.int64)
    return out


def _rows(t: torch.Tensor, count: int, sparse: SparseRows | None, module: nn.Module,
          pad_before: Sequence[int], activation: bool) -> torch.Tensor:
    """``count`` rows shaped like one example of ``t``: zeros but at ``sparse``'s entries."""
    rows = torch.zeros(count, *t.shape[1:], dtype=t.dtype, device=t.device)
    if sparse is not None and len(sparse.rows):
        index = _torch_index(module, sparse.index, pad_before, activation)
        where = (torch.from_numpy(sparse.rows),
                 *(torch.from_numpy(np.ascontiguousarray(c)) for c in index.T))
        rows.index_put_(tuple(w.to(t.device) for w in where),
                        torch.from_numpy(sparse.values).to(t.dtype).to(t.device),
                        accumulate=True)
    return rows


def with_canary_rows(records: Sequence[LayerRecord], canaries: CanaryRecords | None
                     ) -> list[LayerRecord]:
    """Each recorded ``(module, a, g)`` with the canaries' rows appended (their own rows in
    the module owning them, found by its neutral name; zero rows elsewhere).

    Raises:
        ConfigError: a canary without a layer route, or in a module that was not recorded.
    """
    if canaries is None or canaries.count == 0:
        return list(records)
    if canaries.unrouted:
        raise ConfigError(f"gradient canary in layer {canaries.unrouted[0]!r}, whose type has "
                          "no canary layer route; valid: perf.engine=reference")
    names = {getattr(m, "dp_name", None) for m, _, _ in records}
    missing = sorted(set(canaries.activations) - names)
    if missing:
        raise ConfigError(f"gradient canary in layer {missing[0]!r}, which the fast engine "
                          "did not record")
    out = []
    for module, a, g in records:
        name = getattr(module, "dp_name", None)
        pads = canaries.pad_before.get(name, ())
        out.append((module,
                    torch.cat([a, _rows(a, canaries.count, canaries.activations.get(name),
                                        module, pads, True)]),
                    torch.cat([g, _rows(g, canaries.count, canaries.output_gradients.get(name),
                                        module, pads, False)])))
    return out


class GradientWatch:
    """The gradient ``optimizer`` is about to apply, at watched coordinates, read by a step
    pre-hook of that optimizer (so on the path that applies it), times a divisor.

    Args:
        model: whose parameters the neutral keys name.
        coordinates: neutral key -> flat indices (neutral layout).
        optimizer: the optimizer that applies the gradients (e.g. a ``DPOptimizer``'s
            ``original_optimizer``).
        divisor: called at each report: what the gradient was divided by (so the report is
            the noised sum).
    """

    def __init__(self, model: nn.Module, coordinates: Mapping[str, np.ndarray],
                 optimizer: torch.optim.Optimizer, divisor: Callable[[], float]) -> None:
        self.where = parameter_indices(model, coordinates)
        self.divisor = divisor
        self.values: dict[str, np.ndarray] | None = None
        self.handle = optimizer.register_step_pre_hook(self._read)

    def _read(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        scale = float(self.divisor())
        out: dict[str, np.ndarray] = {}
        for key, (param, flat) in self.where.items():
            if param.grad is None:
                raise ConfigError(f"watched weight {key!r} has no gradient to apply")
            grad = param.grad.detach().reshape(-1)[torch.from_numpy(flat).to(param.device)]
            out[key] = grad.cpu().double().numpy() * scale
        self.values = out

    def close(self) -> None:
        """Remove the hook."""
        self.handle.remove()
