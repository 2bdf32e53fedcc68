"""The privacy of a hyper-parameter selection, from the RDP curve of one repetition.

One repetition of the selection draws a candidate (uniformly, or from any fixed law), trains it
with DP-SGD and releases its validation score plus Gaussian noise. Its privacy is the RDP
curve of the training's DpEvent composed with the score's (:func:`repetition_event`); a draw
among several candidates is a mixture, whose Renyi divergence at each order is at most the
largest of the candidates' (Renyi divergence is jointly quasi-convex), so the repetition's
curve is the pointwise maximum over the candidates (:func:`repetition_curve`).

Then:

* :func:`selection_curve`: Papernot & Steinke 2022, Theorem 2 (truncated negative binomial K)
  and Theorem 6 (Poisson K): the RDP of "K repetitions, release the best noised score and its
  run". The formulas are dp_accounting's (``RepeatAndSelectDpEvent``, implemented in
  ``rdp_privacy_accountant._compute_rdp_repeat_and_select``). Its public event takes one
  repeated DpEvent, and no DpEvent expresses the maximum over candidates; so this module
  reads the accountant's curve (``RdpAccountant._rdp``) and calls that function on the
  maximum: two private names of dp_accounting (0.4.3, pinned in constraints.txt), checked
  against the public ``RepeatAndSelectDpEvent`` path on one candidate by
  ``tests/dpcore/test_tuning_bound.py``.
* :func:`full_grid_epsilon`: the plain alternative, every candidate run once with its noised
  score, composed (RDP and PLD).
* :func:`calibrate_selection`: the per-run epsilon (each candidate's noise multiplier
  calibrated to it) at which the whole selection meets a target epsilon.

Neighbouring data sets differ by adding or removing one example of the private training data
(the relation of the DP-SGD accounting). The validation split is treated as a fixed partition
of that data: an example is in the fit part, the validation part or neither, and the bound
composes the training's and the score's events for every candidate, so it holds wherever the
example is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
from dp_accounting import dp_event as dpe
from dp_accounting.rdp import rdp_privacy_accountant as rdp

from dpcore.accounting import calibrate_noise_multiplier, dpsgd_event, epsilon_pld, epsilon_rdp
from dpcore.errors import ConfigError
from dpcore.tuning.laws import RepetitionLaw

#: The RDP orders of every curve here (dp_accounting's defaults: 1.1 to 1024).
ORDERS: tuple[float, ...] = tuple(float(a) for a in rdp.DEFAULT_RDP_ORDERS)

#: The validation metrics a repetition may release, and the sensitivity rule of each.
SCORE_METRICS = ("accuracy", "auc")


@dataclass(frozen=True)
class ScoreMechanism:
    """The Gaussian mechanism on a repetition's validation score.

    Attributes:
        metric: ``accuracy`` or ``auc`` (the exact score computed on the validation split).
        noise_std: std of the Gaussian noise added to the score, in score units (0.01 = one
            accuracy point), > 0.
        sensitivity: the most one example added or removed can change the score:
            1 / n_val for accuracy (:func:`accuracy_sensitivity`); for AUC
            1 / (smallest class count) (:func:`auc_sensitivity`).
    """

    metric: str
    noise_std: float
    sensitivity: float

    def __post_init__(self) -> None:
        if self.metric not in SCORE_METRICS:
            raise ConfigError(f"score metric {self.metric!r} is not valid; valid: "
                              f"{', '.join(SCORE_METRICS)}")
        if not (math.isfinite(self.noise_std) and self.noise_std > 0):
            raise ConfigError(f"score noise std={self.noise_std!r} is not valid; valid: a "
                              "finite number > 0 (in score units: 0.01 = one point)")
        if not 0 < self.sensitivity <= 1:
            raise ConfigError(f"score sensitivity={self.sensitivity!r} is not valid; valid: "
                              "(0, 1]")

    @property
    def noise_multiplier(self) -> float:
        """Noise std divided by the sensitivity (the Gaussian mechanism's multiplier)."""
        return self.noise_std / self.sensitivity

    @property
    def event(self) -> dpe.DpEvent:
        return dpe.GaussianDpEvent(self.noise_multiplier)

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "noise_std": self.noise_std,
                "sensitivity": self.sensitivity}


def accuracy_sensitivity(n_validation: int) -> float:
    """1 / n_val: adding or removing one validation example moves the accuracy c / n by at
    most 1 / max(n, n') <= 1 / n_val for the neighbour of size n_val - 1 or n_val + 1. The
    split's size n_val is taken as public (every report prints it)."""
    if n_validation < 1:
        raise ConfigError(f"n_validation={n_validation!r} is not valid; valid: >= 1")
    return 1.0 / n_validation


def auc_sensitivity(labels: np.ndarray) -> float:
    """1 / (m - 1), m the smaller class count of the binary validation labels: the AUC is the
    mean over positives of the fraction of negatives ranked below (and symmetrically), so one
    example added to or removed from a split whose smaller class has m' examples moves it by
    at most 1 / m'; m - 1 covers this split and its neighbours. The bound treats m (a class
    count of the validation split) as public: say so wherever it is used."""
    counts = np.bincount(np.asarray(labels, dtype=int), minlength=2)
    if counts.size != 2 or counts.min() < 2:
        raise ConfigError(f"AUC sensitivity needs binary labels with >= 2 of each class; "
                          f"class counts {counts.tolist()}")
    return 1.0 / (int(counts.min()) - 1)


def rdp_curve(event: dpe.DpEvent) -> np.ndarray:
    """RDP epsilon of ``event`` at each of :data:`ORDERS` (dp_accounting's RDP accountant).

    Raises:
        ConfigError: the RDP accountant does not support ``event``.
    """
    accountant = rdp.RdpAccountant(list(ORDERS))
    if not accountant.supports(event):
        raise ConfigError(f"dp_accounting's RDP accountant cannot bound {event!r}; valid: "
                          "Gaussian DP-SGD events")
    accountant.compose(event)
    return np.array(accountant._rdp, dtype=float)  # no public getter of the curve


def epsilon_of_curve(curve: np.ndarray, delta: float) -> float:
    """(epsilon, ``delta``)-DP of an RDP curve at :data:`ORDERS` (dp_accounting's
    conversion)."""
    return float(rdp.compute_epsilon(list(ORDERS), list(curve), delta)[0])


def repetition_event(train_event: dpe.DpEvent, score: ScoreMechanism) -> dpe.DpEvent:
    """One repetition of one candidate: its training composed with its noised score."""
    return dpe.ComposedDpEvent([train_event, score.event])


def repetition_curve(events: Sequence[dpe.DpEvent]) -> np.ndarray:
    """RDP curve of one repetition that draws one of ``events`` (any fixed law): the pointwise
    maximum of their curves (joint quasi-convexity of the Renyi divergence)."""
    if not events:
        raise ConfigError("a selection needs at least one candidate")
    return np.max([rdp_curve(e) for e in events], axis=0)


def selection_curve(repetition: np.ndarray, law: RepetitionLaw) -> np.ndarray:
    """RDP curve of the whole selection: Papernot & Steinke 2022, Theorem 2 (truncated
    negative binomial) or Theorem 6 (Poisson), applied to the repetition's curve by
    dp_accounting (see the module docstring). For a truncated negative binomial,
    dp_accounting maps E[K] back to a gamma no larger than the law's (a conservative
    bound)."""
    return np.asarray(rdp._compute_rdp_repeat_and_select(
        list(ORDERS), list(repetition), law.mean, law.shape), dtype=float)


def selection_epsilon(events: Sequence[dpe.DpEvent], law: RepetitionLaw, delta: float) -> float:
    """Epsilon at ``delta`` of the selection whose repetition draws one of ``events``."""
    return epsilon_of_curve(selection_curve(repetition_curve(events), law), delta)


def full_grid_epsilon(events: Sequence[dpe.DpEvent], delta: float) -> dict[str, float | None]:
    """The plain alternative: every candidate run once (its training and its noised score),
    all composed. ``{"rdp": ..., "pld": ...}`` (PLD None where it fails numerically)."""
    composed = dpe.ComposedDpEvent(list(events))
    return {"rdp": epsilon_rdp(composed, delta), "pld": epsilon_pld(composed, delta)}


def with_final_run(selection: np.ndarray, final_event: dpe.DpEvent, delta: float) -> float:
    """Epsilon at ``delta`` of the selection followed by a final run (``final_event``, e.g.
    the chosen candidate retrained on all the training data): RDP composition."""
    return epsilon_of_curve(selection + rdp_curve(final_event), delta)


@dataclass(frozen=True)
class CandidateSteps:
    """What a candidate's DP-SGD event depends on besides its noise: mechanism, Poisson
    sampling rate q in (0, 1] and the number of noised steps."""

    sampling_rate: float
    steps: int
    mechanism: str = "dpsgd-gaussian"


@lru_cache(maxsize=4096)
def _calibrated(candidate: CandidateSteps, epsilon: float, delta: float) -> float:
    return calibrate_noise_multiplier(candidate.mechanism, epsilon, delta,
                                      candidate.sampling_rate, candidate.steps,
                                      accountant="rdp", tolerance=1e-5)


@dataclass(frozen=True)
class SelectionBudget:
    """The result of :func:`calibrate_selection` (epsilons at ``delta``).

    Attributes:
        law, score, delta: the selection's settings.
        per_run_epsilon: the epsilon each candidate's training alone is calibrated to.
        noise_multipliers: per candidate (in the order given), its calibrated multiplier.
        repetition_epsilon: one repetition (training and noised score, the worst candidate).
        selection_epsilon: the whole selection (Theorem 2 / 6), <= the target.
        full_grid: :func:`full_grid_epsilon` of every candidate run once at these noises.
    """

    law: RepetitionLaw
    score: ScoreMechanism
    delta: float
    per_run_epsilon: float
    noise_multipliers: tuple[float, ...]
    repetition_epsilon: float
    selection_epsilon: float
    full_grid: dict[str, float | None] = field(default_factory=dict)


def candidate_events(candidates: Sequence[CandidateSteps], noise_multipliers: Sequence[float],
                     score: ScoreMechanism) -> list[dpe.DpEvent]:
    """Each candidate's repetition event (training at its multiplier, then its score)."""
    return [repetition_event(dpsgd_event(c.mechanism, nm, c.sampling_rate, c.steps), score)
            for c, nm in zip(candidates, noise_multipliers, strict=True)]


def budget_at(candidates: Sequence[CandidateSteps], per_run_epsilon: float,
              law: RepetitionLaw, score: ScoreMechanism, delta: float, *,
              full_grid: bool = True) -> SelectionBudget:
    """The selection's figures when every candidate is calibrated to ``per_run_epsilon``
    (``full_grid``: also the plain composition, whose PLD takes seconds)."""
    noises = tuple(_calibrated(c, float(per_run_epsilon), float(delta)) for c in candidates)
    events = candidate_events(candidates, noises, score)
    repetition = repetition_curve(events)
    return SelectionBudget(
        law=law, score=score, delta=delta, per_run_epsilon=float(per_run_epsilon),
        noise_multipliers=noises, repetition_epsilon=epsilon_of_curve(repetition, delta),
        selection_epsilon=epsilon_of_curve(selection_curve(repetition, law), delta),
        full_grid=full_grid_epsilon(events, delta) if full_grid else {})


def calibrate_selection(candidates: Sequence[CandidateSteps], target_epsilon: float,
                        law: RepetitionLaw, score: ScoreMechanism, delta: float, *,
                        rtol: float = 2e-3) -> SelectionBudget:
    """The largest per-run epsilon (to ``rtol``, relative) whose selection meets
    ``target_epsilon`` at ``delta``: bisection on log(per-run epsilon); each step calibrates
    every candidate's noise multiplier to the per-run epsilon by the shared RDP calibrator and
    bounds the selection by :func:`selection_curve`. The returned budget's
    ``selection_epsilon`` is <= ``target_epsilon`` (the lower end of the final bracket).

    Raises:
        ConfigError: no per-run epsilon down to 1e-3 meets the target (the score's noise
            alone, or the law's E[K], costs more than the target).
    """
    if not (math.isfinite(target_epsilon) and target_epsilon > 0):
        raise ConfigError(f"target_epsilon={target_epsilon!r} is not valid; valid: a finite "
                          "number > 0")
    lo, hi = 1e-3, float(target_epsilon)
    low = budget_at(candidates, lo, law, score, delta, full_grid=False)
    if low.selection_epsilon > target_epsilon:
        raise ConfigError(
            f"a selection under {law.describe()} with score noise std {score.noise_std:g} "
            f"costs epsilon {low.selection_epsilon:.3g} even at per-run epsilon {lo:g}, above "
            f"the target {target_epsilon:g}; valid: a larger target, more score noise or a "
            "smaller E[K]")
    if budget_at(candidates, hi, law, score, delta,
                 full_grid=False).selection_epsilon > target_epsilon:
        while hi / lo > 1 + rtol:
            mid = math.sqrt(lo * hi)
            if budget_at(candidates, mid, law, score, delta,
                         full_grid=False).selection_epsilon <= target_epsilon:
                lo = mid
            else:
                hi = mid
    else:  # a selection costs at least one run: only for a vanishing E[K] term
        lo = hi
    return budget_at(candidates, lo, law, score, delta)


__all__ = [
    "ORDERS", "SCORE_METRICS", "CandidateSteps", "ScoreMechanism", "SelectionBudget",
    "accuracy_sensitivity", "auc_sensitivity", "budget_at", "calibrate_selection",
    "candidate_events", "epsilon_of_curve", "full_grid_epsilon", "rdp_curve",
    "repetition_curve", "repetition_event", "selection_curve", "selection_epsilon",
    "with_final_run",
]
