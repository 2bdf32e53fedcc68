"""Opacus's own accountants, kept as a cross-check of the shared dp_accounting ledger."""

from __future__ import annotations

from dpcore.accounting import CALIBRATORS
from dpcore.mechanisms import get_mechanism

#: Most points of Opacus's PRV grid computed (8 bytes each, a few arrays: about 100 MB).
PRV_MAX_POINTS = 4_000_000


def prv_grid_points(noise_multiplier: float, sampling_rate: float, steps: int,
                    delta: float, eps_error: float = 0.01) -> float:
    """Points of the grid Opacus's ``PRVAccountant.get_epsilon(delta)`` would allocate: its own
    domain rule (``PRVAccountant._get_domain``: half-width L from its RDP bound, mesh
    ``eps_error / sqrt(steps * ln(12 / delta_error) / 2)`` with ``delta_error = delta / 1000``),
    computed without allocating it. At a noise multiplier of 0.005 it is about 4e9 (30 GiB)."""
    import math

    from opacus.accountants.analysis.prv import PoissonSubsampledGaussianPRV
    from opacus.accountants.analysis.prv.domain import compute_safe_domain_size

    delta_error = delta / 1000
    half_width = compute_safe_domain_size(
        [PoissonSubsampledGaussianPRV(sampling_rate, noise_multiplier)], [steps],
        eps_error=eps_error, delta_error=delta_error)
    mesh = eps_error / math.sqrt(steps * math.log(12 / delta_error) / 2)
    return 2 * half_width / mesh


def opacus_epsilons(
    noise_multiplier: float, sampling_rate: float, steps: int, delta: float
) -> dict[str, float | None]:
    """Epsilon of Poisson-subsampled Gaussian DP-SGD by Opacus's RDP and PRV accountants.

    Args:
        noise_multiplier: noise std divided by the L2 clip norm (> 0).
        sampling_rate: q, the probability that an example joins a batch.
        steps: number of noised steps.
        delta: target delta.

    Returns:
        ``{"opacus_rdp": eps, "opacus_prv": eps}`` (PRV is an upper bound, as Opacus reports);
        ``opacus_prv`` is None where its grid would exceed :data:`PRV_MAX_POINTS` points (a
        tiny noise multiplier: epsilon in the thousands or more).
    """
    import warnings

    from opacus.accountants import PRVAccountant, RDPAccountant

    # Opacus warns when its best RDP order is the first or last of its list (tiny or huge
    # noise); the epsilon at that order is still a valid bound, so the warning is silenced.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Optimal order is the")
        return _opacus_epsilons(PRVAccountant, RDPAccountant, noise_multiplier, sampling_rate,
                                steps, delta)


def _opacus_epsilons(prv_cls: type, rdp_cls: type, noise_multiplier: float,
                     sampling_rate: float, steps: int, delta: float
                     ) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for key, accountant_cls in (("opacus_rdp", rdp_cls), ("opacus_prv", prv_cls)):
        if key == "opacus_prv" and prv_grid_points(
                noise_multiplier, sampling_rate, steps, delta) > PRV_MAX_POINTS:
            out[key] = None  # its grid would not fit in memory (see prv_grid_points)
            continue
        accountant = accountant_cls()
        # Opacus accountants keep a history of (noise, q, steps); setting it is equivalent to
        # calling step() `steps` times, without the loop.
        accountant.history = [(noise_multiplier, sampling_rate, steps)]
        out[key] = float(accountant.get_epsilon(delta=delta))
    return out


def opacus_prv_epsilon(noise_multiplier: float, sampling_rate: float, steps: int,
                       delta: float) -> float | None:
    """Opacus's PRV epsilon, or None where its grid would exceed :data:`PRV_MAX_POINTS`."""
    return opacus_epsilons(noise_multiplier, sampling_rate, steps, delta)["opacus_prv"]


def opacus_calibrate(target_epsilon: float, sampling_rate: float, steps: int, delta: float,
                     *, tolerance: float = 1e-4) -> float:
    """The smallest noise multiplier whose Opacus PRV epsilon is at most ``target_epsilon``
    (what ``PrivacyEngine.make_private_with_epsilon`` calibrates with), within ``tolerance``
    above the optimum.

    Hand-written bisection instead of Opacus's ``get_noise_multiplier``: that one searches down
    to a noise of 0, where the PRV grid needs tens of GiB; here a noise whose grid would not
    fit counts as too little noise, so time and memory stay bounded (where that limit binds,
    at targets in the thousands, the noise returned is the smallest whose grid fits: more
    than needed, so the target is still never exceeded).

    Raises:
        ConfigError: the target needs more noise than 1e6.
    """
    import math

    from dpcore.errors import ConfigError

    def fits(noise: float) -> bool:
        epsilon = opacus_prv_epsilon(noise, sampling_rate, steps, delta)
        return epsilon is not None and epsilon <= target_epsilon

    high = 1.0
    while not fits(high):
        high *= 2
        if high > 1e6:
            raise ConfigError(f"no noise multiplier up to 1e6 reaches target_epsilon="
                              f"{target_epsilon:g} by Opacus's PRV; valid: a larger target")
    low = high / 2
    while fits(low):
        high, low = low, low / 2
        if low < 1e-3:  # the smallest noise the shared accountant evaluates
            return high
    while high - low > tolerance and high / low > 1 + 1e-12:
        middle = math.sqrt(low * high) if high / low > 2 else (low + high) / 2
        if fits(middle):
            high = middle
        else:
            low = middle
    return high


@CALIBRATORS.register("prv")
def prv_calibrator(mechanism: str, target_epsilon: float, sampling_rate: float, steps: int,
                   delta: float, *, tolerance: float = 1e-4) -> float:
    """Opacus's PRV accountant as a :class:`dpcore.accounting.Calibrator` (registered as
    ``prv`` when this module is imported): :func:`opacus_calibrate`, Gaussian noise only."""
    from dpcore.errors import ConfigError

    accountants = get_mechanism(mechanism).accountants
    if "prv" not in accountants:
        raise ConfigError(f"calibration accountant='prv' does not know {mechanism} (Opacus's "
                          f"PRV accountant knows Gaussian noise only); valid: "
                          f"{', '.join(accountants)}")
    return opacus_calibrate(target_epsilon, sampling_rate, steps, delta, tolerance=tolerance)



def accountant_epsilons(
    noise_multiplier: float, sampling_rate: float, steps: int, delta: float, *, n: int,
    batch_size: int, epochs: float,
) -> dict[str, float | None]:
    """Opacus's figures of one DP-SGD setting as ``dpcompare epsilon`` shows them
    (:func:`opacus_epsilons`: ``opacus_rdp`` and ``opacus_prv``); ``n``, ``batch_size`` and
    ``epochs`` are not used (the backend contract's signature: TF Privacy's user-facing call
    needs them)."""
    del n, batch_size, epochs
    return dict(opacus_epsilons(noise_multiplier, sampling_rate, steps, delta))
