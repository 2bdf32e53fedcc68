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

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import dp_accounting
from dp_accounting import dp_event as dpe
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

from dpcore.accountants import ACCOUNTANTS
from dpcore.config import PrivacySpec, RunConfig
from dpcore.errors import ConfigError
from dpcore.mechanisms import DP_MECHANISMS, dpsgd_names, get_mechanism
from dpcore.registry import Registry
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
    """The DpEvent of ``steps`` Poisson-subsampled DP-SGD steps of ``mechanism``.

    Args:
        mechanism: a DP-SGD mechanism of :data:`dpcore.mechanisms.DP_MECHANISMS`
            (``dpsgd-gaussian``, ``dpsgd-laplace``); its ``step_event`` is the base event.
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
    known = DP_MECHANISMS.get(mechanism)
    if known is None or not known.noises_gradients:
        raise ConfigError(
            f"mechanism={mechanism!r} has no DP-SGD event; valid: {', '.join(dpsgd_names())}"
        )
    base = known.step_event(noise_multiplier)
    if sampling_rate < 1:
        base = dpe.PoissonSampledDpEvent(sampling_rate, base)
    return dpe.SelfComposedDpEvent(base, steps)


#: Distinct results each accounting memo keeps per process (:func:`_memoised`).
MEMO_SIZE = 4096


def _memoised(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` with its results kept per process for hashable arguments.

    For the pure functions of this module only (the same event, delta, rate and steps give the
    same epsilon or noise with one dp_accounting): a grid plans each run's privacy in its
    pre-flight check and again when the run trains, and a preset's runs share settings across
    seeds and backends. Errors are not kept (they are raised again); an argument that cannot
    be hashed (a ``ComposedDpEvent`` holds a list) is computed every time.
    """
    cached = functools.lru_cache(maxsize=MEMO_SIZE)(function)

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            hash((args, tuple(sorted(kwargs.items()))))
        except TypeError:
            return function(*args, **kwargs)
        return cached(*args, **kwargs)

    call.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
    call.cache_info = cached.cache_info  # type: ignore[attr-defined]
    return call


@_memoised
def epsilon_rdp(event: dpe.DpEvent, delta: float) -> float | None:
    """Epsilon of ``event`` at ``delta`` by dp_accounting's RDP accountant (kept per process:
    :func:`_memoised`).

    Returns ``None`` where the RDP accountant does not support the event (Poisson-subsampled
    Laplace), and ``inf`` for a non-private event.
    """
    accountant = rdp_privacy_accountant.RdpAccountant()
    if not accountant.supports(event):
        return None
    return float(accountant.compose(event).get_epsilon(delta))


@_memoised
def epsilon_pld(event: dpe.DpEvent, delta: float) -> float | None:
    """Epsilon of ``event`` at ``delta`` by dp_accounting's PLD accountant (tighter than RDP;
    kept per process: :func:`_memoised`);
    ``None`` where it does not support the event, or where its grid fails numerically (a noise
    so large that the privacy loss spans less than a few grid steps: epsilon is about 0; or an
    epsilon in the millions, whose grid step overflows).

    The discretisation is :data:`PLD_DISCRETIZATION` unless the event's privacy-loss grid would
    exceed :data:`PLD_MAX_POINTS` points, in which case it is coarsened so that it does not
    (:func:`pld_discretization`): time and memory stay bounded for any noise, rate and step
    count, and the result stays an upper bound (pessimistic rounding)."""
    accountant = BoundedPLDAccountant()
    if not accountant.supports(event):
        return None
    try:
        return float(accountant.compose(event).get_epsilon(delta))
    except (ValueError, OverflowError):
        # dp_accounting's grid fails numerically at the extremes: a noise so large that the
        # loss spans a few grid steps (epsilon about 0), or a grid so coarse (epsilon in the
        # millions) that its mass update overflows.
        return None


#: Most points a PLD of the shared accountant may hold (one float64 array is 8 bytes a point;
#: dp_accounting holds a few such arrays and their FFTs at once: about 100 MB at this size).
PLD_MAX_POINTS = 1_000_000
#: Points of the coarse one-step grid on which the composed width is estimated.
_PROBE_POINTS = 2_000
#: Log of the tail mass dp_accounting drops when it builds and composes a PLD (its defaults).
_PLD_LOG_TRUNCATION = -50.0
_PLD_TAIL_TRUNCATION = 1e-15


def _single_loss_width(base: dpe.DpEvent, sampling_rate: float) -> float:
    """Width (in privacy-loss units, nats) of the grid dp_accounting builds for one step of
    ``base`` (Gaussian or Laplace, sensitivity 1) subsampled at ``sampling_rate``: the span of
    its connect-the-dots bounds, widest over both adjacency types. No array is built."""
    from dp_accounting.pld import privacy_loss_mechanism as plm

    width = 0.0
    for adjacency in (plm.AdjacencyType.REMOVE, plm.AdjacencyType.ADD):
        if isinstance(base, dpe.GaussianDpEvent):
            loss: plm.AdditiveNoisePrivacyLoss = plm.GaussianPrivacyLoss(
                base.noise_multiplier, log_mass_truncation_bound=_PLD_LOG_TRUNCATION,
                sampling_prob=sampling_rate, adjacency_type=adjacency)
        else:
            loss = plm.LaplacePrivacyLoss(base.noise_multiplier, sampling_prob=sampling_rate,
                                          adjacency_type=adjacency)
        bounds = loss.connect_dots_bounds()
        width = max(width, float(bounds.epsilon_upper) - float(bounds.epsilon_lower))
    return width


def _composed_width(base: dpe.DpEvent, sampling_rate: float, steps: int,
                    single_width: float) -> float:
    """Width (nats) of the ``steps``-fold composition of one subsampled step, as dp_accounting's
    truncated FFT composition bounds it (its own Chernoff bounds,
    :func:`dp_accounting.pld.common.compute_self_convolve_bounds`), estimated on a coarse
    one-step grid of about :data:`_PROBE_POINTS` points (fast, and wider than on a fine grid:
    pessimistic rounding only moves mass up)."""
    from dp_accounting.pld import common
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    interval = max(PLD_DISCRETIZATION, single_width / _PROBE_POINTS)
    if isinstance(base, dpe.GaussianDpEvent):
        pld = pld_lib.from_gaussian_mechanism(
            base.noise_multiplier, value_discretization_interval=interval,
            sampling_prob=sampling_rate)
    else:
        pld = pld_lib.from_laplace_mechanism(
            base.noise_multiplier, value_discretization_interval=interval,
            sampling_prob=sampling_rate)
    points = 0
    for pmf in {id(p): p for p in (pld._pmf_remove, pld._pmf_add)}.values():  # noqa: SLF001
        probs = pmf.to_dense_pmf()._probs  # noqa: SLF001
        lower, upper = (0, len(probs) - 1) if steps == 1 else (
            common.compute_self_convolve_bounds(probs, steps, _PLD_TAIL_TRUNCATION))
        points = max(points, upper - lower + 1, len(probs))
    return points * interval


def _sampled_parts(event: dpe.DpEvent) -> tuple[dpe.DpEvent, float, int] | None:
    """(base mechanism, sampling rate, steps) of an event :func:`dpsgd_event` builds, after
    dp_accounting's own rewriting (a non-subsampled Gaussian composed k times is one Gaussian
    of noise sigma / sqrt(k)); None for any other event."""
    steps = 1
    if isinstance(event, dpe.SelfComposedDpEvent):
        steps, event = int(event.count), event.event
    rate = 1.0
    if isinstance(event, dpe.PoissonSampledDpEvent):
        rate, event = float(event.sampling_probability), event.event
    if isinstance(event, dpe.GaussianDpEvent) and rate == 1.0 and steps > 1:
        return dpe.GaussianDpEvent(event.noise_multiplier / math.sqrt(steps)), 1.0, 1
    if isinstance(event, dpe.GaussianDpEvent | dpe.LaplaceDpEvent) and event.noise_multiplier > 0:
        return event, rate, steps
    return None


def pld_discretization(event: dpe.DpEvent) -> float:
    """The PLD discretisation interval (nats) the shared accountant uses for ``event``.

    :data:`PLD_DISCRETIZATION` (1e-4, three significant digits of epsilon at the settings the
    bench runs) unless the one-step grid or the composed grid would exceed
    :data:`PLD_MAX_POINTS`: then the interval is widened in proportion, which bounds memory
    (about 100 MB) and time (seconds) for any noise multiplier, rate and step count. A wider
    interval rounds every loss up (pessimistic), so the epsilon stays an upper bound; it only
    happens where epsilon is already large (tiny noise, or very many steps at a tiny noise).
    Hand-written because dp_accounting's PLD accountant takes one fixed interval.
    """
    parts = _sampled_parts(event)
    if parts is None:
        return PLD_DISCRETIZATION
    base, rate, steps = parts
    single = _single_loss_width(base, rate)
    composed = _composed_width(base, rate, steps, single)
    return max(PLD_DISCRETIZATION, single / PLD_MAX_POINTS, composed / PLD_MAX_POINTS)


class BoundedPLDAccountant(dp_accounting.PrivacyAccountant):
    """dp_accounting's PLD accountant with the discretisation of :func:`pld_discretization`
    chosen per composed event, so that no input makes it allocate more than a bounded grid.

    Supports what :class:`~dp_accounting.pld.pld_privacy_accountant.PLDAccountant` supports;
    each event is composed into a fresh PLD accountant at that event's interval when an
    epsilon is asked for.
    """

    def __init__(self) -> None:
        super().__init__(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
        self._events: list[dpe.DpEvent] = []

    def _maybe_compose(self, event: dpe.DpEvent, count: int, do_compose: bool) -> Any:
        probe = pld_privacy_accountant.PLDAccountant()
        error = probe._maybe_compose(event, count, False)  # noqa: SLF001
        if error is None and do_compose:
            self._events.append(event if count == 1 else dpe.SelfComposedDpEvent(event, count))
        return error

    def get_epsilon(self, target_delta: float) -> float:
        if len(self._events) == 1:
            interval = pld_discretization(self._events[0])
        else:
            interval = PLD_DISCRETIZATION
        accountant = pld_privacy_accountant.PLDAccountant(
            value_discretization_interval=interval)
        for event in self._events:
            accountant.compose(event)
        return float(accountant.get_epsilon(target_delta))


def noise_floor(mechanism: str) -> float | None:
    """Lowest noise multiplier the calibration tries, and the lowest non-zero one the shared
    accountant evaluates (:func:`check_noise_multiplier`): the mechanism's
    :attr:`~dpcore.mechanisms.DpSgdMechanism.noise_floor` (Laplace PLDs overflow below ~0.05;
    a Gaussian noise of 0.001 clip norms gives epsilon in the millions); None for a name that
    is not a DP-SGD mechanism."""
    known = DP_MECHANISMS.get(mechanism)
    return known.noise_floor if known is not None and known.noises_gradients else None


def check_noise_multiplier(mechanism: str, noise_multiplier: float, *,
                           key: str = "noise_multiplier") -> None:
    """Refuse a non-zero noise multiplier below :func:`noise_floor` (one-line ConfigError
    naming ``key``, the floor, and ``none`` for no privacy): below it the accountants cannot
    bound their work (and the privacy is nil anyway). 0 is allowed (a non-private event)."""
    floor = noise_floor(mechanism)
    if floor is not None and 0 < noise_multiplier < floor:
        raise ConfigError(
            f"{key}={noise_multiplier:g} is below {floor:g}, the smallest noise multiplier of "
            f"{mechanism} the accountants evaluate (epsilon there is already in the millions); "
            f"valid: 0 (not private), or at least {floor:g}; for no privacy, mechanism none "
            "(dpcompare train --mechanism none)"
        )


def calibration_accountant(mechanism: str) -> str:
    """The accountant used to calibrate noise: the mechanism's first accountant
    (:attr:`~dpcore.mechanisms.DpSgdMechanism.calibration_accountant`): RDP for Gaussian
    (conservative: PLD then reports at most the target too), PLD for Laplace (RDP only knows
    the pure-DP conversion)."""
    return get_mechanism(mechanism).calibration_accountant


class Calibrator(Protocol):
    """Turns a target epsilon into a noise multiplier (an entry of :data:`CALIBRATORS`).

    Called as ``calibrator(mechanism, target_epsilon, sampling_rate, steps, delta,
    tolerance=...)`` with the inputs already checked (finite target > 0, delta in (0, 1), a
    calibratable mechanism); returns the smallest noise multiplier (noise std or scale over
    the clip norm) whose epsilon by this accountant is at most the target, within
    ``tolerance`` above the optimum; raises ConfigError (one line) where none is reachable or
    the accountant does not know the mechanism.
    """

    def __call__(self, mechanism: str, target_epsilon: float, sampling_rate: float,
                 steps: int, delta: float, *, tolerance: float) -> float: ...


#: Registered calibrators: ``factors.calibration_accountant`` name -> :class:`Calibrator`.
#: ``rdp`` and ``pld`` (dp_accounting) are registered here; a backend registers its library's
#: own (the torch backend's ``torchpipe.accounting`` registers Opacus's ``prv``) when it is
#: imported. Each name is one of :data:`dpcore.accountants.ACCOUNTANTS`, which states what it
#: supports.
CALIBRATORS: Registry[str, Calibrator] = Registry("calibrators",
                                                  key="factors.calibration_accountant")

#: Calibration accountants a backend provides: name -> the backend (a name of
#: :data:`dpcore.backend.BACKEND_PACKAGES`) whose import registers it (the ``provider`` of
#: its :data:`dpcore.accountants.ACCOUNTANTS` entry). The compare layer loads that backend
#: (:func:`dpcore.backend.load_backend`) before it calibrates with one.
CALIBRATOR_BACKENDS: dict[str, str] = {
    name: accountant.provider for name, accountant in ACCOUNTANTS.items()
    if accountant.provider is not None}


def get_calibrator(name: str) -> Calibrator:
    """The calibrator registered as ``name``.

    Raises:
        ConfigError: ``name`` is not registered (:meth:`dpcore.registry.Registry.missing`,
            and which backend provides it when a backend does).
    """
    if name not in CALIBRATORS:
        provider = CALIBRATOR_BACKENDS.get(name)
        hint = (f" ({name!r} is registered by the {provider} backend, which is not loaded: "
                f"dpcore.backend.load_backend({provider!r}) registers it)") if provider else ""
        raise ConfigError(f"{CALIBRATORS.missing(name)}{hint}")
    return CALIBRATORS[name]


def calibrate_noise_multiplier(
    mechanism: str, target_epsilon: float, delta: float, sampling_rate: float, steps: int,
    *, tolerance: float = 1e-4, accountant: str | None = None,
) -> float:
    """Smallest noise multiplier whose epsilon after ``steps`` steps is at most the target.

    Uses the calibrator registered (:data:`CALIBRATORS`) as ``accountant`` (the
    ``factors.calibration_accountant`` switch: ``rdp``, ``pld``, or ``prv`` once the torch
    backend is loaded), or the one :func:`calibration_accountant` names when it is None. The
    returned value is within ``tolerance`` (absolute, in noise-multiplier units) above the
    optimum, so the target is never exceeded by that accountant.
    """
    if not target_epsilon > 0 or math.isinf(target_epsilon):
        raise ConfigError(f"target_epsilon={target_epsilon!r} is not valid; valid: a finite > 0")
    if not 0 < delta < 1:
        raise ConfigError(f"delta={delta!r} is not valid; valid: (0, 1)")
    if noise_floor(mechanism) is None:
        raise ConfigError(
            f"mechanism={mechanism!r} cannot be calibrated; valid: {', '.join(dpsgd_names())}"
        )
    calibrator = get_calibrator(accountant or calibration_accountant(mechanism))
    return _calibrated(calibrator, get_mechanism(mechanism), mechanism, target_epsilon,
                       sampling_rate, steps, delta, tolerance)


@_memoised
def _calibrated(calibrator: Calibrator, registered: object, mechanism: str,
                target_epsilon: float, sampling_rate: float, steps: int, delta: float,
                tolerance: float) -> float:
    """``calibrator``'s noise multiplier, kept per process (:func:`_memoised`). Keyed by the
    calibrator and the registered mechanism objects themselves (``registered``, only a key),
    so a name registered again is not served another's result."""
    return calibrator(mechanism, target_epsilon, sampling_rate, steps, delta,
                      tolerance=tolerance)


def _calibrate_dp_accounting(
    accountant_name: str, mechanism: str, target_epsilon: float, sampling_rate: float,
    steps: int, delta: float, *, tolerance: float,
) -> float:
    """The :class:`Calibrator` of dp_accounting's RDP (``rdp``) and bounded PLD (``pld``)
    accountants, by dp_accounting's ``calibrate_dp_mechanism``."""

    def make_accountant() -> dp_accounting.PrivacyAccountant:
        if accountant_name == "rdp":
            return rdp_privacy_accountant.RdpAccountant()
        return BoundedPLDAccountant()

    def make_event(noise: float) -> dpe.DpEvent:
        return dpsgd_event(mechanism, noise, sampling_rate, steps)

    floor = get_mechanism(mechanism).noise_floor
    largest = make_accountant().compose(make_event(floor)).get_epsilon(delta)
    if target_epsilon >= largest:
        raise ConfigError(
            f"target_epsilon={target_epsilon:g} needs a noise multiplier below {floor:g}, the "
            f"smallest the bench calibrates (at q={sampling_rate:.4g}, {steps} steps, "
            f"delta={delta:g} it already gives epsilon {largest:.4g} by "
            f"{accountant_name.upper()}); valid: a target below {largest:.4g}; for no privacy, "
            "mechanism none (dpcompare train --mechanism none)"
        )
    bracket: Any = dp_accounting.LowerEndpointAndGuess(floor, 1.0)
    if accountant_name == "pld" and "rdp" in get_mechanism(mechanism).accountants:
        # A Gaussian PLD at a tiny noise multiplier needs tens of GiB: bracket the PLD optimum
        # below the RDP one (RDP is the looser bound, so it needs at least as much noise).
        upper = _calibrate_dp_accounting("rdp", mechanism, target_epsilon, sampling_rate,
                                         steps, delta, tolerance=tolerance)
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
            f"no noise multiplier reaches target_epsilon={target_epsilon:g} at delta={delta:g} "
            f"with q={sampling_rate:.4g} over {steps} steps (the search gave up {2**30}x "
            "above a noise of 1); valid: a larger target_epsilon or delta, fewer steps or a "
            "smaller sampling rate"
        ) from exc


@CALIBRATORS.register("rdp")
def _rdp_calibrator(mechanism: str, target_epsilon: float, sampling_rate: float, steps: int,
                    delta: float, *, tolerance: float) -> float:
    """dp_accounting's RDP accountant as a :class:`Calibrator` (for the mechanisms it
    supports, :attr:`~dpcore.mechanisms.DpSgdMechanism.accountants`: not Laplace, whose
    subsampled event it does not know)."""
    known = get_mechanism(mechanism)
    if "rdp" not in known.accountants:
        raise ConfigError(f"calibration accountant='rdp' does not know {mechanism} "
                          "(dp_accounting's RDP accountant has no subsampled-Laplace bound); "
                          f"valid: {', '.join(known.accountants)}")
    return _calibrate_dp_accounting("rdp", mechanism, target_epsilon, sampling_rate, steps,
                                    delta, tolerance=tolerance)


@CALIBRATORS.register("pld")
def _pld_calibrator(mechanism: str, target_epsilon: float, sampling_rate: float, steps: int,
                    delta: float, *, tolerance: float) -> float:
    """dp_accounting's PLD accountant (bounded grid) as a :class:`Calibrator`."""
    return _calibrate_dp_accounting("pld", mechanism, target_epsilon, sampling_rate, steps,
                                    delta, tolerance=tolerance)


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
            check_noise_multiplier(privacy.mechanism, noise, key="privacy.noise_multiplier")
        event = dpsgd_event(privacy.mechanism, noise, batches.sampling_rate, batches.steps)
        return PrivacyPlan(
            privacy.mechanism, noise, calibrated, delta, batches, event,
            epsilon_rdp(event, delta), epsilon_pld(event, delta), note,
        )
    known = get_mechanism(privacy.mechanism)
    if known.non_private:
        return PrivacyPlan(known.name, 0.0, False, delta, batches, known.training_event(),
                           math.inf, math.inf, "")
    return PrivacyPlan(known.name, 0.0, False, delta, batches, known.training_event(), None,
                       None, "training is not private; the images were privatised locally "
                       "(see ldp)")


def event_to_dict(event: dpe.DpEvent) -> dict[str, Any]:
    """A JSON-able description of a DpEvent (dp_accounting's own ``to_named_tuple`` form)."""
    from dpcore.io import json_safe

    return json_safe(event.to_named_tuple())
