"""Opacus's own accountants, kept as a cross-check of the shared dp_accounting ledger."""

from __future__ import annotations


def opacus_epsilons(
    noise_multiplier: float, sampling_rate: float, steps: int, delta: float
) -> dict[str, float]:
    """Epsilon of Poisson-subsampled Gaussian DP-SGD by Opacus's RDP and PRV accountants.

    Args:
        noise_multiplier: noise std divided by the L2 clip norm (> 0).
        sampling_rate: q, the probability that an example joins a batch.
        steps: number of noised steps.
        delta: target delta.

    Returns:
        ``{"opacus_rdp": eps, "opacus_prv": eps}`` (PRV is an upper bound, as Opacus reports).
    """
    from opacus.accountants import PRVAccountant, RDPAccountant

    out: dict[str, float] = {}
    for key, accountant_cls in (("opacus_rdp", RDPAccountant), ("opacus_prv", PRVAccountant)):
        accountant = accountant_cls()
        # Opacus accountants keep a history of (noise, q, steps); setting it is equivalent to
        # calling step() `steps` times, without the loop.
        accountant.history = [(noise_multiplier, sampling_rate, steps)]
        out[key] = float(accountant.get_epsilon(delta=delta))
    return out
