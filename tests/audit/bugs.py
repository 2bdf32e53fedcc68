"""A catalogue of implementation bugs placed in the backends' own code, for the audit to catch.

Each :class:`BugPatch` rewrites a method or function of ``tfpipe`` / ``torchpipe`` for the
duration of a test (pytest's ``monkeypatch``), where a real bug would sit: nothing of dpcore,
and not ``factors.fault`` (which rewrites the step's mechanism for the audit-check preset).
:data:`BUGS` is the registry: ``@register(name, backend, engines=..., caught_by=...)`` on a
function ``(monkeypatch) -> None`` that places the bug. The tests of this package run every
registered patch on every engine it names and check that the audit flags the run
(``tests/audit/test_audit_catches_bugs.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from dpcore.registry import Registry

#: What a patch does to the backend: places the bug through ``monkeypatch``.
Place = Callable[[pytest.MonkeyPatch], None]


@dataclass(frozen=True)
class BugPatch:
    """One bug in one backend's code.

    Attributes:
        name: the bug, the same name on both backends (``fast_engine_clips_nothing``).
        backend: ``tf`` or ``torch``.
        engines: the step engines whose code path holds it (``reference``, ``fast``).
        caught_by: which part of the audit must flag it: ``bound`` (the one-run epsilon
            bound above the proved epsilon) or ``per_step`` (the noise is not fresh).
        where: the patched code, ``module:attribute``.
        description: the bug in words.
        place: places it (a function of pytest's ``monkeypatch``).
    """

    name: str
    backend: str
    engines: tuple[str, ...]
    caught_by: str
    where: str
    description: str
    place: Place

    @property
    def key(self) -> str:
        return f"{self.name}@{self.backend}"


#: ``"name@backend"`` -> the bug patch.
BUGS: Registry[str, BugPatch] = Registry("audit bug patches", key="bug@backend")


def register(name: str, backend: str, *, engines: tuple[str, ...], caught_by: str,
             where: str) -> Callable[[Place], Place]:
    """Register the decorated ``place`` function as bug ``name`` of ``backend`` (its
    docstring is the description)."""

    def decorate(place: Place) -> Place:
        bug = BugPatch(name, backend, engines, caught_by, where,
                       " ".join((place.__doc__ or "").split()), place)
        BUGS.register(bug.key)(bug)
        return place

    return decorate


# ---------------------------------------------------------------- the fast engine clips nothing
@register("fast_engine_clips_nothing", "tf", engines=("fast",), caught_by="bound",
          where="tfpipe.fast:FastRule.weighted_sum")
def _tf_fast_no_clip(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each layer's clip-weighted sum ignores the clip factors (sums the raw per-example
    gradients); the norms are still computed."""
    import tensorflow as tf

    from tfpipe import fast

    original = fast.FastRule.weighted_sum

    def weighted_sum(self: Any, layer: Any, a: Any, g: Any, factors: Any, kept: Any) -> Any:
        return original(self, layer, a, g, tf.ones_like(factors), kept)

    monkeypatch.setattr(fast.FastRule, "weighted_sum", weighted_sum)


@register("fast_engine_clips_nothing", "torch", engines=("fast",), caught_by="bound",
          where="torchpipe.fast:FastRule.weighted_sum")
def _torch_fast_no_clip(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each layer's clip-weighted sum ignores the clip factors (sums the raw per-example
    gradients); the norms are still computed."""
    import torch

    from torchpipe import fast

    original = fast.FastRule.weighted_sum

    def weighted_sum(self: Any, layer: Any, a: Any, g: Any, factors: Any, kept: Any) -> Any:
        return original(self, layer, a, g, torch.ones_like(factors), kept)

    monkeypatch.setattr(fast.FastRule, "weighted_sum", weighted_sum)


# ------------------------------------------------------- one noise vector reused at every step
@register("noise_reused_every_step", "tf", engines=("reference", "fast"), caught_by="per_step",
          where="tfpipe.dp:SeededGaussianSumQuery.get_noised_result")
def _tf_noise_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Gaussian query draws its noise from a stateless generator with a fixed seed: the
    same noise vector at every step."""
    import dp_accounting
    import tensorflow as tf

    from tfpipe import dp

    def get_noised_result(self: Any, sample_state: Any, global_state: Any) -> Any:
        def add_noise(v: tf.Tensor) -> tf.Tensor:
            noise = tf.random.stateless_normal(tf.shape(v), seed=[7, 7],
                                               stddev=global_state.stddev)
            return v + tf.cast(noise, v.dtype)

        result = tf.nest.map_structure(add_noise, sample_state)
        return result, global_state, dp_accounting.GaussianDpEvent(
            self._stddev / self._l2_norm_clip)

    monkeypatch.setattr(dp.SeededGaussianSumQuery, "get_noised_result", get_noised_result)


@register("noise_reused_every_step", "torch", engines=("reference", "fast"),
          caught_by="per_step", where="torchpipe.dp:SharedStepDPOptimizer.noise_sum")
def _torch_noise_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The optimizer re-seeds its noise generator before every draw: the same noise vector
    at every step."""
    from torchpipe import dp

    original = dp.SharedStepDPOptimizer.noise_sum

    def noise_sum(self: Any) -> None:
        self.generator.manual_seed(7)
        original(self)

    monkeypatch.setattr(dp.SharedStepDPOptimizer, "noise_sum", noise_sum)


__all__ = ["BUGS", "BugPatch", "register"]
