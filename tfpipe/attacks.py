"""TF Privacy's membership-inference attacks (``tensorflow-empirical-privacy``, module
``tensorflow_privacy.privacy.privacy_tests.membership_inference_attack``), run for the audit of
a model of either backend (:mod:`dpcore.evaluation.membership`, which loads this backend by
name and calls these functions: :class:`dpcore.evaluation.membership.MembershipAttacker`).

The attacks see only arrays (log-probabilities, labels, losses), never a model.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Sequence
from importlib import metadata
from typing import Any

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from tensorflow_privacy.privacy.privacy_tests.membership_inference_attack import (
    data_structures,
    membership_inference_attack,
)

#: The distribution the attacks come from (its version is recorded with every audit).
ATTACK_LIBRARY = "tensorflow-empirical-privacy"


def membership_attack_names() -> tuple[str, ...]:
    """The attack types TF Privacy knows (the names of its ``AttackType`` enum)."""
    return tuple(data_structures.AttackType.__members__)


def membership_attack_library() -> dict[str, str | None]:
    """``{ATTACK_LIBRARY: its installed version}`` (None when not installed as a
    distribution)."""
    try:
        version: str | None = metadata.version(ATTACK_LIBRARY)
    except metadata.PackageNotFoundError:
        version = None
    return {ATTACK_LIBRARY: version}


@contextlib.contextmanager
def _seeded_global_numpy(seed: int) -> Iterator[None]:
    """TF Privacy shuffles with numpy's global generator: seed it, then restore its state."""
    state = np.random.get_state()
    np.random.seed(seed % 2**32)
    try:
        yield
    finally:
        np.random.set_state(state)


def membership_attacks(
    log_m: np.ndarray, log_u: np.ndarray, labels_m: np.ndarray, labels_u: np.ndarray,
    loss_m: np.ndarray, loss_u: np.ndarray, attacks: Sequence[str], seed: int,
) -> dict[str, dict[str, Any]]:
    """Run TF Privacy's attacks ``attacks`` (``AttackType`` names) on members' and
    non-members' log-probabilities [n, K] (as logits), labels [n] and losses [n] (nats),
    with numpy's global generator seeded by ``seed`` (and restored).

    Returns:
        Per attack run (lower-case name): ``{"auc", "advantage", "epsilon_lower_bound"}``;
        advantage = max |TPR - FPR| over thresholds, the epsilon lower bound TF Privacy's
        (best threshold; None when none is finite). Empty when TF Privacy ran none.
    """
    known = data_structures.AttackType.__members__
    data = data_structures.AttackInputData(
        logits_train=log_m, logits_test=log_u, labels_train=labels_m, labels_test=labels_u,
        loss_train=loss_m, loss_test=loss_u,
    )
    spec = data_structures.SlicingSpec(entire_dataset=True)
    # Its epsilon lower bound divides by zero rates at extreme thresholds (inf / nan entries
    # that it then skips), and its logistic-regression grid search stops lbfgs at sklearn's
    # default iteration limit for some C values: silence those two warnings only.
    with (_seeded_global_numpy(seed), np.errstate(divide="ignore", invalid="ignore"),
          warnings.catch_warnings()):
        warnings.simplefilter("ignore", ConvergenceWarning)
        results = membership_inference_attack.run_attacks(
            data, spec, attack_types=[known[name] for name in attacks])
    out: dict[str, dict[str, Any]] = {}
    for single in results.single_attack_results:
        bounds = np.asarray(single.get_epsilon_lower_bound(), dtype=np.float64)
        bounds = bounds[np.isfinite(bounds)]
        out[single.attack_type.name.lower()] = {
            "auc": float(single.get_auc()),
            "advantage": float(single.get_attacker_advantage()),
            "epsilon_lower_bound": float(bounds.max()) if bounds.size else None,
        }
    return out


__all__ = ["ATTACK_LIBRARY", "membership_attack_library", "membership_attack_names",
           "membership_attacks"]
