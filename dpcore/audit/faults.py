"""Deliberately broken DP steps (``factors.fault``), for audit checks only.

Each fault rewrites the run's :class:`dpcore.trainloop.StepMechanism` (what both backends'
DP steps obey), so one switch breaks the step identically on both frameworks. The accounting
is left alone on purpose: the fault plays an implementation bug the accountant does not know
about, and the one-run audit (:mod:`dpcore.audit`) is what must catch it. A config refuses a
fault unless the run audits (:func:`dpcore.config.check_audit_combination`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Protocol, TypeVar

from dpcore.registry import Registry


class _Mechanism(Protocol):
    """The fields of :class:`dpcore.trainloop.StepMechanism` a fault rewrites (typed here as a
    protocol: ``dpcore.trainloop`` imports this module, not the other way round)."""

    clip_norm: float
    noise_scale: float
    noise_multiplier: float

    @property
    def private(self) -> bool: ...


StepMechanism = TypeVar("StepMechanism", bound=_Mechanism)

#: Clip norm standing for "no clipping": every example's clip factor C / max(norm, C) (TF
#: Privacy) or min(1, C / (norm + 1e-6)) (Opacus) is then exactly 1 for any finite gradient,
#: in float32 too. (``inf`` would make TF's factor inf / inf = NaN.)
NO_CLIP_NORM = 1e30

#: Shown on every record and report row of a faulty run.
BROKEN_LABEL = "deliberately broken"


#: ``factors.fault`` -> how it breaks the step (``none``: the honest step), in registration
#: order; ``@FAULTS.register(name)`` on a function ``StepMechanism -> StepMechanism``.
FAULTS: Registry[str, Callable[[StepMechanism], StepMechanism]] = Registry(
    "audit faults", key="factors.fault")


@FAULTS.register("none")
def _honest(m: StepMechanism) -> StepMechanism:
    return m


@FAULTS.register("no_noise")
def _no_noise(m: StepMechanism) -> StepMechanism:
    return dataclasses.replace(m, noise_scale=0.0, noise_multiplier=0.0)


@FAULTS.register("no_clip")
def _no_clip(m: StepMechanism) -> StepMechanism:
    # the noise std stays sigma * C: Opacus draws noise_multiplier * max_grad_norm
    return dataclasses.replace(m, clip_norm=NO_CLIP_NORM,
                               noise_multiplier=m.noise_scale / NO_CLIP_NORM)


@FAULTS.register("noise_div10")
def _noise_div10(m: StepMechanism) -> StepMechanism:
    return dataclasses.replace(m, noise_scale=m.noise_scale / 10,
                               noise_multiplier=m.noise_multiplier / 10)


def apply_fault(mechanism: StepMechanism, fault: str) -> StepMechanism:
    """``mechanism`` as the faulty step runs it (unchanged for ``none`` or a non-private
    step)."""
    if fault == "none" or not mechanism.private:
        return mechanism
    return FAULTS[fault](mechanism)
