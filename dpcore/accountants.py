"""The calibration accountants the bench knows, each declared once with what it supports.

A calibration accountant turns a target epsilon into a noise multiplier
(``factors.calibration_accountant``). Each is declared here: its name, the backend whose
import registers its calibrator (None: :mod:`dpcore.accounting` registers it), and which
DP-SGD events it can account, answered as dp_accounting's accountants answer
(``accountant.supports(event)``). A mechanism's accountants are the declared ones that support
its subsampled step (:attr:`dpcore.mechanisms.DpSgdMechanism.accountants`); nothing lists them
per mechanism. The calibrators themselves are registered in
:data:`dpcore.accounting.CALIBRATORS` by the modules that implement them.

A leaf module (dp_accounting and :mod:`dpcore.registry` only), so that the configs read the
allowed names and :mod:`dpcore.mechanisms` asks what each supports without importing an
implementation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dp_accounting import dp_event as dpe
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

from dpcore.registry import Registry


@dataclass(frozen=True)
class Accountant:
    """One calibration accountant.

    Attributes:
        name: its ``factors.calibration_accountant`` value.
        description: what it is, in a few words.
        supports: whether it can account a DpEvent (a DP-SGD run's:
            ``SelfComposedDpEvent(PoissonSampledDpEvent(q, step), steps)``).
        provider: the backend (a :data:`dpcore.backend.BACKEND_PACKAGES` name) whose import
            registers its calibrator; None when :mod:`dpcore.accounting` registers it.
    """

    name: str
    description: str
    supports: Callable[[dpe.DpEvent], bool]
    provider: str | None = None


def _opacus_prv_supports(event: dpe.DpEvent) -> bool:
    """Opacus's PRV accountant composes Poisson-subsampled Gaussian steps only (its
    ``PRVAccountant`` takes a noise multiplier, a sample rate and a step count)."""
    if isinstance(event, dpe.SelfComposedDpEvent):
        event = event.event
    if isinstance(event, dpe.PoissonSampledDpEvent):
        event = event.event
    return isinstance(event, dpe.GaussianDpEvent)


#: ``factors.calibration_accountant`` -> the accountant, in order of preference: a
#: mechanism's default calibration accountant is the first one that supports it.
ACCOUNTANTS: Registry[str, Accountant] = Registry(
    "calibration accountants", key="factors.calibration_accountant",
    key_of=lambda accountant: accountant.name)

ACCOUNTANTS.register()(Accountant(
    "rdp", "dp_accounting's RDP accountant",
    lambda event: rdp_privacy_accountant.RdpAccountant().supports(event)))
ACCOUNTANTS.register()(Accountant(
    "pld", "dp_accounting's PLD accountant (bounded grid)",
    lambda event: pld_privacy_accountant.PLDAccountant().supports(event)))
ACCOUNTANTS.register()(Accountant(
    "prv", "Opacus's PRV accountant", _opacus_prv_supports, provider="torch"))


__all__ = ["ACCOUNTANTS", "Accountant"]
