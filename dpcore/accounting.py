"""The one privacy ledger: settings -> dp_accounting DpEvent -> epsilon (RDP and PLD).

Epsilon is never tracked by hand: every run's privacy is described by a dp_accounting
:class:`~dp_accounting.DpEvent`, and epsilon is computed from that event by dp_accounting's
RDP and PLD accountants. The libraries' own accountants (Opacus RDP/PRV, TF Privacy's
``compute_dp_sgd_privacy``) are kept as cross-checks in the backends (``*/accounting.py``).

Conventions:
    * ``noise_multiplier``: std of the Gaussian noise (or scale of the Laplace noise) divided
      by the clip norm (L2 for Gaussian, L1 for Laplace).
    * Neighbouring data sets differ by adding or removing one example (the relation under which
      Poisson subsampling amplifies privacy).
    * ``sampling="shuffle"`` is accounted as Poisson sampling with q = B / N, the common practice
      (TF Privacy's own statement does the same). This is an approximation known to understate
      epsilon for shuffled fixed-size batches; results record it in ``accounting_note``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import dp_accounting
from dp_accounting import dp_event as dpe
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

from dpcore.config import PrivacySpec, RunConfig
from dpcore.errors import ConfigError
from dpcore.sampling import BatchPlan, plan_batches

SHUFFLE_NOTE = (
    "shuffled fixed-size batches accounted as Poisson sampling with q = B/N "
    "(common practice; not a proven bound for shuffling)"
)

#: Discretisation of the PLD accountant: small enough for 3 significant digits of epsilon.
PLD_DISCRETIZATION = 1e-4


def dpsgd_event(
    mechanism: str, noise_multiplier: float, sampling_rate: float, steps: int
) -> dpe.DpEvent:
    """The DpEvent of ``steps`` Poisson-subsampled Gaussian or Laplace DP-SGD steps.

    Args:
        mechanism: ``dpsgd-gaussian`` or ``dpsgd-laplace``.
        noise_multiplier: noise std (Gaussian) or scale (Laplace) divided by the clip norm.
        sampling_rate: q in (0, 1], the probability that an example joins a batch.
        steps: number of noised logical batches, >= 1.
    """
    if noise_multiplier < 0:
        raise ConfigError(f"noise_multiplier={noise_multiplier!r} must be >= 0")
    if not 0 < sampling_rate <= 1:
        raise ConfigError(f"sampling rate q={sampling_rate!r} is not valid; valid: (0, 1]")
    if steps < 1:
        raise ConfigError(f"steps={steps!r} must be >= 1")
    if noise_multiplier == 0:
        return dpe.NonPrivateDpEvent()
    if mechanism == "dpsgd-gaussian":
        base: dpe.DpEvent = dpe.GaussianDpEvent(noise_multiplier)
    elif mechanism == "dpsgd-laplace":
        base = dpe.LaplaceDpEvent(noise_multiplier)
    else:
        raise ConfigError(
            f"mechanism={mechanism!r} has no DP-SGD event; valid: dpsgd-gaussian, dpsgd-laplace"
        )
    if sampling_rate < 1:
        base = dpe.PoissonSampledDpEvent(sampling_rate, base)
    return dpe.SelfComposedDpEvent(base, steps)


def epsilon_rdp(event: dpe.DpEvent, delta: float) -> float | None:
    """Epsilon of ``event`` at ``delta`` by dp_accounting's RDP accountant.

    Returns ``None`` where the RDP accountant does not support the event (Poisson-subsampled
    Laplace), and ``inf`` for a non-private event.
    """
    accountant = rdp_privacy_accountant.RdpAccountant()
    if not accountant.supports(event):
        return None
    return float(accountant.compose(event).get_epsilon(delta))


def epsilon_pld(event: dpe.DpEvent, delta: float) -> float | None:
    """Epsilon of ``event`` at ``delta`` by dp_accounting's PLD accountant (tighter than RDP)."""
    accountant = pld_privacy_accountant.PLDAccountant(
        value_discretization_interval=PLD_DISCRETIZATION
    )
    if not accountant.supports(event):
        return None
    return float(accountant.compose(event).get_epsilon(delta))


#: Lowest noise multiplier the calibration tries. Laplace PLDs overflow below ~0.05 (a per-step
#: epsilon of 1/0.05 = 20 already exceeds every target a DP-SGD run would ask for).
_CALIBRATION_LOWER = {"dpsgd-gaussian": 1e-3, "dpsgd-laplace": 0.05}


def calibration_accountant(mechanism: str) -> str:
    """The accountant used to calibrate noise: RDP for Gaussian (conservative: PLD then reports
    at most the target too), PLD for Laplace (RDP only knows the pure-DP conversion)."""
    return "rdp" if mechanism == "dpsgd-gaussian" else "pld"


def calibrate_noise_multiplier(
    mechanism: str, target_epsilon: float, delta: float, sampling_rate: float, steps: int,
    *, tolerance: float = 1e-4, accountant: str | None = None,
) -> float:
    """Smallest noise multiplier whose epsilon after ``steps`` steps is at most the target.

    Uses dp_accounting's ``calibrate_dp_mechanism`` with the accountant named by
    :func:`calibration_accountant` (or ``accountant``, ``rdp`` or ``pld``, when given: the
    ``factors.calibration_accountant`` switch). The returned value is within ``tolerance``
    (absolute, in noise-multiplier units) above the optimum, so the target is never exceeded.
    """
    if not target_epsilon > 0 or math.isinf(target_epsilon):
        raise ConfigError(f"target_epsilon={target_epsilon!r} is not valid; valid: a finite > 0")
    if not 0 < delta < 1:
        raise ConfigError(f"delta={delta!r} is not valid; valid: (0, 1)")
    if mechanism not in _CALIBRATION_LOWER:
        raise ConfigError(
            f"mechanism={mechanism!r} cannot be calibrated; valid: dpsgd-gaussian, dpsgd-laplace"
        )
    accountant_name = accountant or calibration_accountant(mechanism)
    if accountant_name not in ("rdp", "pld"):
        raise ConfigError(f"calibration accountant={accountant_name!r} is not known; valid: "
                          "rdp, pld")

    def make_accountant() -> dp_accounting.PrivacyAccountant:
        if accountant_name == "rdp":
            return rdp_privacy_accountant.RdpAccountant()
        return pld_privacy_accountant.PLDAccountant(
            value_discretization_interval=PLD_DISCRETIZATION
        )

    def make_event(noise: float) -> dpe.DpEvent:
        return dpsgd_event(mechanism, noise, sampling_rate, steps)

    bracket: Any = dp_accounting.LowerEndpointAndGuess(_CALIBRATION_LOWER[mechanism], 1.0)
    if accountant_name == "pld" and mechanism == "dpsgd-gaussian":
        # A Gaussian PLD at a tiny noise multiplier needs tens of GiB: bracket the PLD optimum
        # below the RDP one (RDP is the looser bound, so it needs at least as much noise).
        upper = calibrate_noise_multiplier(mechanism, target_epsilon, delta, sampling_rate,
                                           steps, tolerance=tolerance, accountant="rdp")
        bracket = dp_accounting.ExplicitBracketInterval(max(0.5 * upper, 1e-3), upper)
    try:
        return float(
            dp_accounting.calibrate_dp_mechanism(
                make_accountant, make_event, target_epsilon, delta, bracket, tol=tolerance,
            )
        )
    except (dp_accounting.mechanism_calibration.NoBracketIntervalFoundError,
            dp_accounting.mechanism_calibration.NoOptimumFoundError) as exc:
        raise ConfigError(
            f"no noise multiplier reaches target_epsilon={target_epsilon} at delta={delta} "
            f"with q={sampling_rate} over {steps} steps: {exc}"
        ) from exc


@dataclass(frozen=True)
class PrivacyPlan:
    """The resolved privacy of one run: what the trainers use and what results record.

    Attributes:
        mechanism: the PrivacySpec mechanism.
        noise_multiplier: the one the trainers apply (calibrated if a target was given);
            0.0 for non-private and local-DP runs.
        calibrated: True when ``noise_multiplier`` came from ``target_epsilon``.
        delta: delta used for every epsilon.
        batches: steps, q and steps per epoch.
        event: the run's DpEvent (NoOp for non-private runs).
        epsilon_rdp / epsilon_pld: shared-accountant epsilons (``inf`` if non-private; ``None``
            where an accountant does not support the event).
        accounting_note: caveats of the accounting, empty if none.
    """

    mechanism: str
    noise_multiplier: float
    calibrated: bool
    delta: float
    batches: BatchPlan
    event: dpe.DpEvent
    epsilon_rdp: float | None
    epsilon_pld: float | None
    accounting_note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "mechanism": self.mechanism,
            "noise_multiplier": self.noise_multiplier,
            "calibrated": self.calibrated,
            "delta": self.delta,
            "steps": self.batches.steps,
            "sampling_rate": self.batches.sampling_rate,
            "expected_batch_size": self.batches.expected_batch_size,
            "n_examples": self.batches.n_examples,
            "epochs": self.batches.epochs,
            "epsilon_rdp": self.epsilon_rdp,
            "epsilon_pld": self.epsilon_pld,
            "dp_event": event_to_dict(self.event),
            "accounting_note": self.accounting_note,
        }


def plan_privacy(config: RunConfig, n_train: int) -> PrivacyPlan:
    """Resolve a config's privacy for a training set of ``n_train`` examples.

    DP-SGD: calibrate the noise if a target epsilon is given, build the event, compute epsilon.
    ``none``: a NonPrivate event and epsilon = inf. ``ldp``: training is non-private with respect
    to the (already privatised) images; the LDP guarantee is stated by the LDP layer, so the
    training event is NoOp and the epsilons here are ``None``.
    """
    privacy: PrivacySpec = config.privacy
    batches = plan_batches(
        n_train, config.train.batch_size, epochs=config.train.epochs, steps=config.train.steps,
        sampling=privacy.sampling,
    )
    delta = privacy.resolved_delta(n_train)
    note = SHUFFLE_NOTE if privacy.sampling == "shuffle" and privacy.is_dpsgd else ""
    if privacy.is_dpsgd:
        calibrated = privacy.target_epsilon is not None
        if calibrated:
            assert privacy.target_epsilon is not None
            noise = calibrate_noise_multiplier(
                privacy.mechanism, privacy.target_epsilon, delta, batches.sampling_rate,
                batches.steps, accountant=config.factors.calibration_accountant,
            )
        else:
            assert privacy.noise_multiplier is not None
            noise = float(privacy.noise_multiplier)
        event = dpsgd_event(privacy.mechanism, noise, batches.sampling_rate, batches.steps)
        return PrivacyPlan(
            privacy.mechanism, noise, calibrated, delta, batches, event,
            epsilon_rdp(event, delta), epsilon_pld(event, delta), note,
        )
    if privacy.mechanism == "none":
        return PrivacyPlan("none", 0.0, False, delta, batches, dpe.NonPrivateDpEvent(),
                           math.inf, math.inf, "")
    return PrivacyPlan("ldp", 0.0, False, delta, batches, dpe.NoOpDpEvent(), None, None,
                       "training is not private; the images were privatised locally (see ldp)")


def event_to_dict(event: dpe.DpEvent) -> dict[str, Any]:
    """A JSON-able description of a DpEvent (dp_accounting's own ``to_named_tuple`` form)."""
    from dpcore.io import json_safe

    return json_safe(event.to_named_tuple())
