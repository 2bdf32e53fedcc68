"""Membership-inference audit of a trained model (either backend), as a RunResult ``audit``.

Members are training examples, non-members held-out (test) examples; both sets have the same
size ``n`` and are seeded subsets. From the model's class probabilities (the backend
contract's ``predict_proba``) this module derives the per-example cross-entropy loss and
log-probabilities (used as logits: softmax(log p) = p), then runs

* TF Privacy's attacks (``tensorflow-empirical-privacy``): the loss threshold attack and a
  logistic-regression attack on [log-probabilities, loss] by default; each gives an ROC AUC
  and the membership advantage max |TPR - FPR| (in-sample, no interval). They are run by the
  backend that wraps TF Privacy (:data:`ATTACK_BACKEND`, its :class:`MembershipAttacker`
  functions), loaded by name with :func:`dpcore.backend.load_backend` on the first audit, for
  runs of either backend;
* our own held-out loss-threshold advantage with a confidence interval
  (:func:`dpcore.metrics.audit.empirical_advantage`), compared against the largest advantage
  (epsilon, delta)-DP allows (:func:`dpcore.metrics.audit.advantage_upper_bound`).

``suspected_privacy_bug`` is True only when that interval lies entirely above the bound, i.e.
the attack beats what the claimed guarantee permits at the interval's confidence. The
TF Privacy figures (in-sample maxima over thresholds / attack models) are reported, not used
for the verdict.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, cast

import numpy as np

from dpcore.backend import Backend, load_backend
from dpcore.data.dataset import Dataset
from dpcore.errors import ConfigError, DataError
from dpcore.mechanisms import noises_gradients, privatises_images
from dpcore.metrics.audit import advantage_upper_bound, empirical_advantage, exceeds_bound
from dpcore.trained import TrainedModel

#: The backend whose package wraps TF Privacy's membership-inference attacks (its backend
#: module provides the :class:`MembershipAttacker` functions).
ATTACK_BACKEND = "tf"


class MembershipAttacker(Protocol):
    """What the :data:`ATTACK_BACKEND` provides for the audit (``tfpipe/attacks.py``)."""

    def membership_attack_names(self) -> tuple[str, ...]:
        """The attack types it knows (TF Privacy's ``AttackType`` names)."""

    def membership_attacks(
        self, log_m: np.ndarray, log_u: np.ndarray, labels_m: np.ndarray,
        labels_u: np.ndarray, loss_m: np.ndarray, loss_u: np.ndarray,
        attacks: Sequence[str], seed: int,
    ) -> dict[str, dict[str, Any]]:
        """Per attack run (lower-case name): ``{"auc", "advantage", "epsilon_lower_bound"}``
        from members' and non-members' log-probabilities [n, K], labels [n] and losses [n]
        (nats); seeded by ``seed``."""

    def membership_attack_library(self) -> dict[str, str | None]:
        """The attack library's distribution name -> its installed version."""


def attacker() -> MembershipAttacker:
    """The :data:`ATTACK_BACKEND`'s attacks, loaded now (imports TensorFlow)."""
    return cast(MembershipAttacker, load_backend(ATTACK_BACKEND))


#: TF Privacy attack types run by default (names of its ``AttackType`` enum).
DEFAULT_ATTACKS: tuple[str, ...] = ("THRESHOLD_ATTACK", "LOGISTIC_REGRESSION")

#: Smallest member / non-member set: the logistic-regression attack cross-validates (2 folds,
#: then 3-fold grid search inside each), and the held-out interval splits each set in halves.
MIN_EXAMPLES = 10

#: Probabilities are floored here before taking logs (the smallest normal float32), so a
#: probability that underflowed to 0 gives a large finite loss (~87.3) instead of inf.
PROB_FLOOR = float(np.finfo(np.float32).tiny)

#: The keys of the audit dict (the RunResult ``audit`` entry).
AUDIT_KEYS: tuple[str, ...] = (
    "method", "n_members", "n_nonmembers", "seed", "epsilon", "epsilon_accountant", "delta",
    "private", "bound",
    "attacks", "attack_auc", "advantage", "best_attack", "max_epsilon_lower_bound",
    "loss_threshold", "suspected_privacy_bug", "member_accuracy", "nonmember_accuracy",
    "member_mean_loss", "nonmember_mean_loss", "library",
)


#: ``x -> probabilities [len(x), K]`` of the audited model.
PredictProba = Callable[[np.ndarray], np.ndarray]


def run_membership_audit(
    predict_proba: PredictProba,
    x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray,
    *, epsilon: float | None, delta: float | None, n: int | None = None, seed: int = 0,
    attacks: Sequence[str] = DEFAULT_ATTACKS, confidence: float = 0.95,
    epsilon_accountant: str | None = None,
) -> dict[str, Any]:
    """Membership-inference audit of one model on equal-size member / non-member sets.

    Args:
        predict_proba: ``x -> probabilities [len(x), K]`` of the audited model.
        x_train, y_train: the model's training set (members) and labels.
        x_test, y_test: held-out examples (non-members) and labels.
        epsilon: the claimed epsilon; ``None`` or ``inf`` for a run without a DP-SGD
            guarantee (the bound is then 1.0, nothing can be flagged).
        delta: the claimed delta (required for a finite epsilon).
        n: examples per set; default ``min(len(x_train), len(x_test))``.
        seed: seed of the subsets, of TF Privacy's attack splits and of the held-out split.
        attacks: TF Privacy ``AttackType`` names to run.
        confidence: level of the advantage's interval.
        epsilon_accountant: the accountant that computed ``epsilon`` (``rdp``, ``pld``...),
            recorded beside it; None when not known or not private.

    Returns:
        A JSON-able dict with the keys :data:`AUDIT_KEYS`:

        * ``attacks``: per attack (lower-case name) ``{"auc", "advantage",
          "epsilon_lower_bound"}``; advantage = max |TPR - FPR| over thresholds; the epsilon
          lower bound is TF Privacy's (Bailey method, alpha 0.05, best threshold), informative;
        * ``attack_auc``, ``advantage``: the maxima over the attacks, ``best_attack`` the one
          with the largest advantage, ``max_epsilon_lower_bound`` the largest epsilon bound;
        * ``loss_threshold``: :func:`empirical_advantage` on the negated losses (its
          ``heldout_advantage`` with ``ci_low``/``ci_high``);
        * ``bound``: :func:`advantage_upper_bound` (1.0 when not private);
        * ``suspected_privacy_bug``: :func:`exceeds_bound` of ``loss_threshold`` and ``bound``;
        * accuracies and mean losses (nats) on the two audited sets, the method, sizes, seed,
          the claimed ``epsilon``/``delta`` the bound is computed from (``epsilon`` None
          when nothing is claimed), ``epsilon_accountant`` (the accountant of that epsilon,
          None when nothing is claimed) and the attack library's version.

    Raises:
        ConfigError: bad ``n``, ``epsilon``/``delta``, or an unknown attack name.
        DataError: too few examples, mismatched arrays, or probabilities of the wrong shape
            or with non-finite values.
    """
    private = epsilon is not None and not math.isinf(epsilon)
    if private:
        if delta is None:
            raise ConfigError(f"epsilon={epsilon} needs a delta; valid: delta in [0, 1]")
        bound = advantage_upper_bound(float(epsilon), float(delta))
    else:
        if epsilon is not None and epsilon < 0:
            raise ConfigError(f"epsilon={epsilon} is not valid; valid: >= 0, inf or None")
        bound = 1.0
    attacks_of = attacker()
    attack_names = _check_attacks(attacks, attacks_of.membership_attack_names())
    size = _set_size(n, len(x_train), len(x_test))
    _same_length(x_train, y_train, "train")
    _same_length(x_test, y_test, "test")

    rng = np.random.default_rng(seed)
    members = np.sort(rng.choice(len(x_train), size, replace=False))
    nonmembers = np.sort(rng.choice(len(x_test), size, replace=False))
    labels_m = np.asarray(y_train)[members].astype(np.int64)
    labels_u = np.asarray(y_test)[nonmembers].astype(np.int64)
    probs_m = _probabilities(predict_proba(x_train[members]), labels_m, "members")
    probs_u = _probabilities(predict_proba(x_test[nonmembers]), labels_u, "non-members")
    log_m, log_u = np.log(np.maximum(probs_m, PROB_FLOOR)), np.log(np.maximum(probs_u, PROB_FLOOR))
    loss_m = -log_m[np.arange(size), labels_m]
    loss_u = -log_u[np.arange(size), labels_u]

    per_attack = attacks_of.membership_attacks(log_m, log_u, labels_m, labels_u, loss_m,
                                               loss_u, attack_names, seed)
    if not per_attack:
        raise DataError("TF Privacy ran none of the attacks (too few examples per class?)")
    ours = empirical_advantage(-loss_m, -loss_u, confidence=confidence, seed=seed)
    best = max(per_attack, key=lambda name: per_attack[name]["advantage"])
    lower_bounds = [a["epsilon_lower_bound"] for a in per_attack.values()
                    if a["epsilon_lower_bound"] is not None]
    return {
        "method": "membership inference: TF Privacy run_attacks on loss and log-probabilities; "
                  "held-out loss-threshold advantage with a Clopper-Pearson interval",
        "n_members": int(size),
        "n_nonmembers": int(size),
        "seed": int(seed),
        "epsilon": float(epsilon) if private else None,
        "epsilon_accountant": epsilon_accountant if private else None,
        "delta": None if delta is None else float(delta),
        "private": bool(private),
        "bound": float(bound),
        "attacks": per_attack,
        "attack_auc": max(a["auc"] for a in per_attack.values()),
        "advantage": per_attack[best]["advantage"],
        "best_attack": best,
        "max_epsilon_lower_bound": max(lower_bounds) if lower_bounds else None,
        "loss_threshold": ours,
        "suspected_privacy_bug": bool(exceeds_bound(ours, bound)),
        "member_accuracy": float(np.mean(np.argmax(probs_m, axis=1) == labels_m)),
        "nonmember_accuracy": float(np.mean(np.argmax(probs_u, axis=1) == labels_u)),
        "member_mean_loss": float(np.mean(loss_m)),
        "nonmember_mean_loss": float(np.mean(loss_u)),
        "library": attacks_of.membership_attack_library(),
    }


def claimed_privacy(privacy: Mapping[str, Any]) -> tuple[float | None, float | None, str]:
    """The (epsilon, delta) a run claims, from its RunResult ``privacy`` entry, and a note
    (:func:`claimed_accountant` names the accountant of that epsilon).

    DP-SGD runs claim the smaller of the RDP and PLD epsilons of the shared accountant (both
    are upper bounds on the true epsilon, so the smaller is the strongest claim, the one the
    audit checks). Non-private runs claim nothing; local-DP runs claim no bound on the
    model's membership advantage either, because the labels are not privatised.
    """
    mechanism = privacy.get("mechanism")
    delta = privacy.get("delta")
    if noises_gradients(mechanism):
        key = _claimed_key(privacy)
        if key is None:
            return None, delta, f"{mechanism} run without a finite epsilon: bound 1.0"
        return float(privacy[key]), delta, f"claimed epsilon: {key} of the shared accountant"
    if privatises_images(mechanism):
        return None, delta, ("local-DP run: the labels are not privatised, so no "
                             "membership bound is claimed (bound 1.0)")
    return None, delta, "non-private run: bound 1.0"


#: The RunResult ``privacy`` key of each shared-accountant epsilon -> the accountant's name.
EPSILON_ACCOUNTANTS = {"epsilon_rdp": "rdp", "epsilon_pld": "pld"}


def claimed_accountant(privacy: Mapping[str, Any]) -> str | None:
    """The accountant (``rdp`` or ``pld``) of the epsilon :func:`claimed_privacy` claims for
    this ``privacy`` entry: the one whose finite epsilon is the smaller; None when the run
    claims no epsilon."""
    key = _claimed_key(privacy)
    return None if key is None else EPSILON_ACCOUNTANTS[key]


def _claimed_key(privacy: Mapping[str, Any]) -> str | None:
    """The ``privacy`` key of the epsilon a DP-SGD run claims (the smaller finite one of
    :data:`EPSILON_ACCOUNTANTS`), None for other runs or without a finite epsilon."""
    if not noises_gradients(privacy.get("mechanism")):
        return None
    finite = {k: float(v) for k in EPSILON_ACCOUNTANTS
              if (v := privacy.get(k)) is not None and math.isfinite(float(v))}
    return min(finite, key=lambda k: finite[k]) if finite else None


def audit_trained(backend: Backend, trained: TrainedModel, dataset: Dataset,
                  privacy: Mapping[str, Any], *, n: int | None = None, seed: int = 0
                  ) -> dict[str, Any]:
    """Audit a :class:`~dpcore.trained.TrainedModel` on the data set it was trained on.

    Args:
        backend: the backend of ``trained`` (its ``predict_proba`` gives the probabilities).
        trained: the trained model.
        dataset: the :class:`~dpcore.data.dataset.Dataset` it was trained on (for local-DP
            runs, the privatised one).
        privacy: the run's RunResult ``privacy`` entry (see :func:`claimed_privacy`).
        n: examples per set (default: all the smaller split holds).
        seed: audit seed.

    Returns:
        :func:`run_membership_audit`'s dict plus ``"claim"`` (how the epsilon was chosen) and
        ``"backend"``.
    """
    epsilon, delta, note = claimed_privacy(privacy)
    audit = run_membership_audit(
        lambda x: backend.predict_proba(trained, x),
        dataset.x_train, dataset.y_train, dataset.x_test, dataset.y_test,
        epsilon=epsilon, delta=delta, n=n, seed=seed,
        epsilon_accountant=claimed_accountant(privacy),
    )
    audit["claim"] = note
    audit["backend"] = trained.backend
    return audit


def _check_attacks(names: Sequence[str], known: Sequence[str]) -> list[str]:
    """``names`` as a list if each is one of the attack types ``known``, else ConfigError."""
    if not names:
        raise ConfigError(f"attacks is empty; valid: one or more of {', '.join(known)}")
    bad = [name for name in names if name not in known]
    if bad:
        raise ConfigError(f"attack {bad[0]!r} is not known; valid: {', '.join(known)}")
    return list(names)


def _set_size(n: int | None, n_train: int, n_test: int) -> int:
    available = min(n_train, n_test)
    if available < MIN_EXAMPLES:
        raise DataError(f"the audit needs at least {MIN_EXAMPLES} training and {MIN_EXAMPLES} "
                        f"held-out examples; got {n_train} and {n_test}")
    if n is None:
        return available
    if not MIN_EXAMPLES <= n <= available:
        raise ConfigError(f"n={n} is not valid; valid: {MIN_EXAMPLES}..{available} "
                          f"(the smaller of {n_train} training and {n_test} held-out examples)")
    return int(n)


def _same_length(x: np.ndarray, y: np.ndarray, split: str) -> None:
    if len(x) != len(y):
        raise DataError(f"{split}: {len(x)} inputs but {len(y)} labels; counts must match")


def _probabilities(probs: np.ndarray, labels: np.ndarray, which: str) -> np.ndarray:
    arr = np.asarray(probs, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] != labels.size or arr.shape[1] < 2:
        raise DataError(f"predict_proba gave shape {arr.shape} for {labels.size} {which}; "
                        f"need [{labels.size}, K] with K >= 2 classes")
    if not np.all(np.isfinite(arr)):
        raise DataError(f"predict_proba gave non-finite probabilities for the {which} "
                        "(a diverged model?); valid: finite values in [0, 1]")
    if labels.min() < 0 or labels.max() >= arr.shape[1]:
        raise DataError(f"{which} labels range over {labels.min()}..{labels.max()}; valid: "
                        f"0..{arr.shape[1] - 1}")
    return arr


__all__ = ["ATTACK_BACKEND", "AUDIT_KEYS", "DEFAULT_ATTACKS", "EPSILON_ACCOUNTANTS",
           "MIN_EXAMPLES", "PROB_FLOOR", "MembershipAttacker", "PredictProba", "attacker",
           "audit_trained", "claimed_accountant", "claimed_privacy", "run_membership_audit"]
