"""Claimed and proved epsilon of a run: what the accountant reports, and what holds for what ran.

*Claimed* is the shared accountant's epsilon of the run's plan (``privacy.epsilon_rdp``, PLD
where RDP does not apply), which assumes Poisson sampling, per-example clipping and a fixed
divisor. *Proved* is the tightest bound this module knows for the step that actually ran,
from a dp_accounting DpEvent, or ``None`` with the reason when no bound is known. Each rule
states the neighbouring relation it assumes:

* Poisson sampling, per-example clipping, a fixed divisor (B): the claim itself
  (add-or-remove-one example; sensitivity C).
* Microbatches of k > 1 examples under Poisson sampling: ``None``. The bound TF Privacy's
  ``compute_dp_sgd_privacy_statement(used_microbatching=True)`` states (noise multiplier
  sigma / 2: one example moves its microbatch's clipped mean by up to 2C) assumes that one
  example touches one microbatch. Here a Poisson batch is sorted and cut into consecutive
  groups of k (both engines), so adding or removing one example shifts every later group:
  the clipped sum can move by up to 2C per group after it (one constructed batch of 63 moves
  by 31 C, tests/dpcore/test_proved.py). A grouping fixed by each example's identity (group =
  a function of the example, not of its position in the batch) would make the 2C bound true;
  the engines do not group that way.
* Shuffled fixed-size batches (any k): no amplification by sampling. Under replace-one (the
  relation of fixed-size batches, where a data set's size is public; the replaced example
  keeps its index, so the sorted batches and their microbatch groups stay the same) the
  replaced example sits in exactly one batch per epoch and moves that batch's clipped sum by
  at most 2C (from one clipped unit to another), so each epoch is one Gaussian release with
  noise multiplier sigma / 2, composed over the epochs (TF Privacy's statement, "each example
  occurring once per epoch", composes per epoch the same way). The proved figure is that
  composition by PLD (dp_accounting's ``PLDAccountant``: exact up to its pessimistic
  discretisation), with the RDP figure of the same event beside it (``epsilon_rdp``; both
  valid upper bounds, PLD the tighter). Still a loose upper bound: shuffling does amplify,
  but no tight bound for it is implemented here.
* A divisor that depends on who is in the batch (the actual size under Poisson), pixel
  statistics of the private set (``input_scaling: standardised``), accuracy measured on the
  training set (``eval_split: train``): ``None``, with the reason (no bound is cited).
* Local DP: the per-image epsilon the LDP layer computes (training is post-processing).
* A deliberately broken run (``factors.fault``): the proof is of the algorithm the config
  specifies, which the faulty step (a simulated implementation bug) no longer runs; the audit
  is what can tell.

:func:`privacy_figures` gives both figures for any stored RunResult: a record that stores none, or
stores them under other rules than :data:`PROVED_RULES`, gets them computed by the current rules, so
no report repeats a bound the rules do not give. Epsilons come from dp_accounting's RDP accountant
(Gaussian under Poisson sampling; as the claim) or PLD accountant (Laplace, which RDP supports only
without subsampling; and the shuffled rule, with the RDP figure beside it); this module only builds
events and calls :mod:`dpcore.accounting`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from dp_accounting import dp_event as dpe

from dpcore.accounting import epsilon_pld, epsilon_rdp
from dpcore.as_run import as_run_privacy
from dpcore.errors import ConfigError
from dpcore.mechanisms import (
    dpsgd_names,
    find_mechanism,
    get_mechanism,
    is_non_private,
    privatises_images,
)
from dpcore.recipes import effective_factors
from dpcore.registry import Registry

ADD_REMOVE = "add-or-remove-one example"
REPLACE_ONE = "replace-one example (the data set's size is public)"
LDP_RELATION = "one image's pixel values changed (local DP, per image)"

#: Version of the rules above, stored with a record's figures (``epsilon_proved_rules``): 2
#: gives microbatches under Poisson sampling no bound and the shuffled rule by PLD (1 proved
#: the former at sigma / 2 and the latter by RDP).
PROVED_RULES = 2

#: Why microbatches under Poisson sampling have no proved epsilon (see the module docstring).
POISSON_MICROBATCH_REASON = (
    "microbatches of {k} under Poisson sampling: the batch is sorted and cut into consecutive "
    "groups of {k}, so adding or removing one example shifts every later group and moves the "
    "clipped sum by up to 2C per group, not 2C; the sigma / 2 bound holds only for groups "
    "fixed by each example's identity, which the engines do not use; no bound is cited")

#: Data-dependent divisors (:func:`dpcore.recipes.divisor_rule`) no bound covers.
DATA_DEPENDENT_DIVISORS = ("actual batch size", "actual microbatch count")


@dataclass(frozen=True)
class ProvedEpsilon:
    """A run's proved epsilon (``None`` when no bound is known) with its basis.

    Attributes:
        epsilon: the bound at the run's delta (``inf`` for a non-private run).
        relation: the neighbouring relation the bound assumes ("" where none applies).
        reason: how the bound was obtained, or why there is none.
        accountant: ``rdp``, ``pld``, ``ldp`` (the LDP layer's) or ``None``.
        epsilon_rdp: where ``epsilon`` is by PLD, the RDP accountant's figure of the same
            event (another valid, looser, bound), else ``None``.
    """

    epsilon: float | None
    relation: str
    reason: str
    accountant: str | None = None
    epsilon_rdp: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class StepFacts:
    """What one DP-SGD run ran, as far as its privacy is concerned.

    Attributes:
        mechanism: a DP-SGD mechanism name (``dpsgd-gaussian``, ``dpsgd-laplace``...).
        noise_multiplier: sigma (noise std / C, or Laplace scale / C).
        sampling: ``poisson`` or ``shuffle``.
        sampling_rate: q (Poisson) or B / N (shuffle).
        steps: noised steps taken.
        steps_per_epoch: steps of one pass over the data (shuffle).
        delta: the run's delta.
        microbatch_size: k, examples per clipped unit.
        divisor: :func:`dpcore.recipes.divisor_rule` of the step.
        input_scaling: ``unit`` or ``standardised``.
        eval_split: ``test`` or ``train``.
    """

    mechanism: str
    noise_multiplier: float
    sampling: str
    sampling_rate: float
    steps: int
    steps_per_epoch: int
    delta: float
    microbatch_size: int = 1
    divisor: str = "B"
    input_scaling: str = "unit"
    eval_split: str = "test"


# -- settings no bound covers: each returns the reason, or None ----------------------------
#: Registered checks, by name, in registration order: any reason they give makes the proved
#: epsilon ``None`` (``@UNPROVABLE.register()`` on ``check(facts) -> reason or None``).
UNPROVABLE: Registry[str, Callable[[StepFacts], str | None]] = Registry(
    "unprovable-setting checks", key="check", key_of=lambda check: check.__name__)


@UNPROVABLE.register()
def _data_dependent_divisor(f: StepFacts) -> str | None:
    if f.divisor in DATA_DEPENDENT_DIVISORS:
        return (f"the noised sum is divided by the {f.divisor}, which depends on who is in the "
                "batch (membership leaks through the divisor); no bound is cited for it")
    return None


@UNPROVABLE.register()
def _standardised(f: StepFacts) -> str | None:
    if f.input_scaling == "standardised":
        return ("the pixel mean and std of the private training set are released without "
                "noise (input_scaling=standardised); no bound covers them")
    return None


@UNPROVABLE.register()
def _train_accuracy(f: StepFacts) -> str | None:
    if f.eval_split == "train":
        return ("the reported accuracy is measured on the private training set and released "
                "without noise (eval_split=train); no bound covers it")
    return None


def _base_event(mechanism: str, noise_multiplier: float) -> dpe.DpEvent:
    known = find_mechanism(mechanism)
    if known is None or not known.noises_gradients:
        raise ConfigError(f"mechanism={mechanism!r} has no DP-SGD event; valid: "
                          f"{', '.join(dpsgd_names())}")
    return known.step_event(noise_multiplier)


#: The shared accountants a proved epsilon is computed by (the mechanism's calibration one).
_EPSILON_OF = {"rdp": epsilon_rdp, "pld": epsilon_pld}


def _epsilon(event: dpe.DpEvent, mechanism: str, delta: float) -> tuple[float | None, str]:
    accountant = get_mechanism(mechanism).calibration_accountant
    return _EPSILON_OF[accountant](event, delta), accountant


@functools.lru_cache(maxsize=512)
def proved_dpsgd(f: StepFacts) -> ProvedEpsilon:
    """The proved epsilon of a DP-SGD run described by ``f`` (see the module docstring).

    Cached by ``f`` (frozen): the seeds of a setting share one computation (a PLD composition
    takes seconds)."""
    reasons = [r for check in UNPROVABLE.values() if (r := check(f)) is not None]
    if reasons:
        return ProvedEpsilon(None, "", "; ".join(reasons))
    if f.noise_multiplier <= 0:
        return ProvedEpsilon(math.inf, "", "no noise: not private")
    if f.sampling == "shuffle":
        epochs = max(1, math.ceil(f.steps / max(f.steps_per_epoch, 1)))
        event = dpe.SelfComposedDpEvent(
            _base_event(f.mechanism, f.noise_multiplier / 2), epochs)
        eps, rdp = epsilon_pld(event, f.delta), epsilon_rdp(event, f.delta)
        poisson = _poisson_event(f, halve=True)
        as_poisson, _ = _epsilon(poisson, f.mechanism, f.delta)
        return ProvedEpsilon(
            eps, REPLACE_ONE,
            f"shuffled fixed-size batches: no amplification by sampling; each example is in "
            f"one batch per epoch, whose clipped sum it moves by at most 2C, so one release at "
            f"noise multiplier {f.noise_multiplier:g} / 2 per epoch, composed over {epochs} "
            f"epochs by PLD ({_fmt(rdp)} by RDP for the same releases; a loose upper bound: "
            f"shuffling amplifies, but no tight bound is implemented; the same sigma / 2 with "
            f"Poisson amplification, not proved for shuffling, would give "
            f"{_fmt(as_poisson)})", "pld", epsilon_rdp=rdp)
    if f.microbatch_size > 1:
        return ProvedEpsilon(None, "", POISSON_MICROBATCH_REASON.format(k=f.microbatch_size))
    eps, accountant = _epsilon(_poisson_event(f, halve=False), f.mechanism, f.delta)
    return ProvedEpsilon(eps, ADD_REMOVE,
                         "Poisson sampling, per-example clipping, fixed divisor: the claim "
                         "is proved", accountant)


def _poisson_event(f: StepFacts, *, halve: bool) -> dpe.DpEvent:
    base = _base_event(f.mechanism, f.noise_multiplier / (2 if halve else 1))
    if f.sampling_rate < 1:
        base = dpe.PoissonSampledDpEvent(f.sampling_rate, base)
    return dpe.SelfComposedDpEvent(base, max(int(f.steps), 1))


def _fmt(value: float | None) -> str:
    return "no epsilon" if value is None else f"epsilon {value:.4g}"


# -- stored records ------------------------------------------------------------------------
def claimed_epsilon(privacy: Mapping[str, Any]) -> float | None:
    """The claimed epsilon of a RunResult's ``privacy`` entry: the shared accountant's
    (RDP, PLD where RDP is unsupported) for DP-SGD, the LDP layer's per-image epsilon for
    local DP, ``inf`` for a non-private run, ``None`` where none was recorded."""
    mechanism = privacy.get("mechanism")
    if is_non_private(mechanism):
        return math.inf
    if privatises_images(mechanism):
        return _ldp_per_image(privacy)
    for key in ("epsilon_rdp", "epsilon_pld"):
        if privacy.get(key) is not None:
            return float(privacy[key])
    return None


def _ldp_per_image(privacy: Mapping[str, Any]) -> float | None:
    ldp = privacy.get("ldp") or {}
    value = ldp.get("epsilon_per_image") if isinstance(ldp, Mapping) else None
    return None if value is None else float(value)


def step_facts(config: Mapping[str, Any], backend: str, privacy: Mapping[str, Any]
               ) -> StepFacts:
    """The :class:`StepFacts` of a stored run (config dict, backend, ``privacy`` entry).

    A ``library`` run's sampling rate, steps and steps per epoch are those it ran with
    (``privacy.as_run``); its divisor and fixed factors are its library's own.
    """
    priv_cfg = config.get("privacy") or {}
    sampling = str(priv_cfg.get("sampling", "poisson"))
    recipe = str(config.get("recipe", "harmonised"))
    factors = {k: v for k, v in (config.get("factors") or {}).items() if k != "fault"}
    eff = effective_factors(recipe, backend, sampling, factors)
    ran = as_run_privacy(privacy)  # the steps that ran (one rule: dpcore.as_run)
    steps = ran["steps"] or 0
    rate = float(ran["sampling_rate"] or 1.0)
    per_epoch = ran["steps_per_epoch"]
    if per_epoch is None:
        n, b = privacy.get("n_examples"), privacy.get("expected_batch_size")
        per_epoch = math.ceil(n / b) if n and b else max(1, round(1 / rate))
    return StepFacts(
        mechanism=str(privacy.get("mechanism")),
        noise_multiplier=float(privacy.get("noise_multiplier") or 0.0),
        sampling=sampling, sampling_rate=rate, steps=int(steps),
        steps_per_epoch=int(per_epoch), delta=float(privacy["delta"]),
        microbatch_size=int(eff["microbatch_size"]), divisor=str(eff["divisor"]),
        input_scaling=str(eff["input_scaling"]), eval_split=str(eff["eval_split"]),
    )


def proved_for_record(config: Mapping[str, Any], backend: str, privacy: Mapping[str, Any]
                      ) -> ProvedEpsilon:
    """The proved epsilon of a stored run (config dict as stored, backend, ``privacy``)."""
    mechanism = privacy.get("mechanism")
    if is_non_private(mechanism):
        return ProvedEpsilon(math.inf, "", "not private (no DP-SGD)")
    if privatises_images(mechanism):
        eps = _ldp_per_image(privacy)
        return ProvedEpsilon(
            eps, LDP_RELATION,
            "local DP: the per-image epsilon of the LDP layer (training on the privatised "
            "images is post-processing)" if eps is not None else
            "local DP: no per-image epsilon recorded", "ldp" if eps is not None else None)
    if privacy.get("delta") is None or privacy.get("noise_multiplier") is None:
        return ProvedEpsilon(None, "", "no privacy plan recorded (the run did not train)")
    proved = proved_dpsgd(step_facts(config, backend, privacy))
    fault = str((config.get("factors") or {}).get("fault", "none"))
    if fault != "none":
        proved = ProvedEpsilon(
            proved.epsilon, proved.relation,
            f"{proved.reason}; DELIBERATELY BROKEN (factors.fault={fault}): this is the bound "
            "of the algorithm the config specifies, which the faulty step does not run",
            proved.accountant, proved.epsilon_rdp)
    return proved


def privacy_figures(config: Mapping[str, Any], backend: str, privacy: Mapping[str, Any]
                    ) -> dict[str, Any]:
    """The RunResult ``privacy`` keys of both figures: ``epsilon_claimed``,
    ``epsilon_proved``, ``epsilon_proved_reason``, ``epsilon_proved_relation``,
    ``epsilon_proved_accountant``, ``epsilon_proved_rdp`` (the RDP figure beside a PLD
    proved one, else None) and ``epsilon_proved_rules`` (:data:`PROVED_RULES`)."""
    proved = proved_for_record(config, backend, privacy)
    return {"epsilon_claimed": claimed_epsilon(privacy), "epsilon_proved": proved.epsilon,
            "epsilon_proved_reason": proved.reason,
            "epsilon_proved_relation": proved.relation,
            "epsilon_proved_accountant": proved.accountant,
            "epsilon_proved_rdp": proved.epsilon_rdp, "epsilon_proved_rules": PROVED_RULES}


def figures_of_result(result: Any) -> dict[str, Any]:
    """:func:`privacy_figures` of a RunResult; a record that stores them under the current
    :data:`PROVED_RULES` keeps its own (``epsilon_proved`` null in JSON for a non-private run
    is read back as ``inf``), any other gets them computed from its config and plan."""
    privacy = result.privacy or {}
    if privacy.get("epsilon_proved_rules") == PROVED_RULES:
        out = {k: privacy.get(k) for k in (
            "epsilon_claimed", "epsilon_proved", "epsilon_proved_reason",
            "epsilon_proved_relation", "epsilon_proved_accountant", "epsilon_proved_rdp",
            "epsilon_proved_rules")}
        if is_non_private(privacy.get("mechanism")):
            out["epsilon_claimed"] = out["epsilon_proved"] = math.inf
        return out
    return privacy_figures(result.config, result.backend, privacy)


def is_violation(audited: float | None, claimed: float | None, proved: float | None) -> bool:
    """True when an audited epsilon lower bound is above the proved epsilon, or above the
    claimed one where nothing is proved: the run leaks more than its guarantee allows
    (with the audit's confidence, 95 %)."""
    reference = proved if proved is not None else claimed
    if audited is None or reference is None:
        return False
    return float(audited) > float(reference)


__all__ = ["ADD_REMOVE", "POISSON_MICROBATCH_REASON", "PROVED_RULES", "REPLACE_ONE",
           "UNPROVABLE",
           "ProvedEpsilon", "StepFacts",
           "claimed_epsilon", "figures_of_result", "is_violation", "privacy_figures",
           "proved_dpsgd", "proved_for_record", "step_facts"]
