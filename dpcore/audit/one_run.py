"""The one-run audit's statistics: p-value and epsilon lower bound (Steinke, Nasr, Jagielski
2023, "Privacy auditing with one (1) training run", arXiv 2305.08846, Theorem 3.1 / Prop. 5.7).

``m`` canaries are each included in training independently with probability 1/2. The auditor
guesses "in" for the ``k`` canaries with the highest scores (optionally "out" for the lowest);
``c`` of these guesses are right. Under (epsilon, delta)-DP the number of right guesses is
stochastically dominated by Binomial(k, e^eps / (1 + e^eps)) up to a delta term, so a large
``c`` rejects small epsilons. The bound is the largest epsilon whose p-value is still at or
below the significance level (0.05): every epsilon below it is rejected at that level.

Hand-written over scipy on purpose: jax_privacy's ``auditing.py`` (``_one_run_p_value``,
``_epsilon_one_run``) is the reference implementation, but it cannot be a dependency here (JAX
needs numpy 2; the bench pins numpy 1.26 for TF 2.15). The formula below is that function's.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy.optimize import brentq
from scipy.special import expit
from scipy.stats import binom

from dpcore.errors import ConfigError

#: Significance level of the audit's bound (the bound holds with probability >= 95 %).
SIGNIFICANCE = 0.05
#: Largest epsilon the bound search considers (p-values are flat far beyond it).
EPSILON_CEILING = 100.0


def one_run_p_value(m: int, k: int, correct: int, epsilon: float, delta: float) -> float:
    """Probability that an (epsilon, delta)-DP run gives at least ``correct`` right guesses.

    Args:
        m: number of canaries (each in with probability 1/2).
        k: number of guesses.
        correct: right guesses among them (0..k).
        epsilon: the epsilon tested (>= 0).
        delta: the delta tested (in [0, 1)).

    Returns:
        The p-value in [0, 1]; small values reject (epsilon, delta)-DP.
    """
    _check_counts(m, k, correct)
    q = float(expit(epsilon))
    beta = float(binom.sf(correct - 1, k, q))
    if delta == 0 or correct == 0:
        return beta
    i = np.arange(1, correct + 1)
    alpha = float(np.max((binom.sf(correct - i - 1, k, q) - beta) / i, initial=0.0))
    return min(beta + alpha * delta * 2 * m, 1.0)


def epsilon_lower_bound(m: int, k: int, correct: int, delta: float,
                        significance: float = SIGNIFICANCE) -> float:
    """Largest epsilon whose one-run p-value is at most ``significance`` (0 if none is).

    Found by Brent's method on ``p(eps) - significance`` (the p-value grows with epsilon).
    """
    _check_counts(m, k, correct)
    if not 0 < significance < 1:
        raise ConfigError(f"significance={significance!r} is not valid; valid: (0, 1)")

    def excess(eps: float) -> float:
        return one_run_p_value(m, k, correct, eps, delta) - significance

    if excess(0.0) > 0:
        return 0.0
    if excess(EPSILON_CEILING) <= 0:
        return EPSILON_CEILING
    return float(brentq(excess, 0.0, EPSILON_CEILING, xtol=1e-6))


def _check_counts(m: int, k: int, correct: int) -> None:
    if m < 1 or not 1 <= k <= m or not 0 <= correct <= k:
        raise ConfigError(
            f"one-run audit counts m={m}, k={k}, correct={correct} are not valid; valid: "
            "1 <= k <= m and 0 <= correct <= k"
        )


@dataclass(frozen=True)
class OneRunAudit:
    """The outcome of one run's audit (the RunResult ``audit.one_run`` entry).

    Attributes:
        kind: ``gradient`` or ``input`` canaries.
        m: canaries; ``included``: how many of them were in the training run.
        k: guesses ("in" for the top-k scores, plus "out" for the bottom-k when
            ``guess_out``).
        correct: right guesses.
        delta: the run's delta; ``significance``: the level of the bound.
        epsilon_lower_bound: the audited epsilon (the bound above holds with probability
            >= 1 - significance).
        seed: the seed of the canary generator (derived from the run seed).
        score: what a canary's score is (units in words).
    """

    kind: str
    m: int
    included: int
    k: int
    guess_out: bool
    correct: int
    delta: float
    significance: float
    epsilon_lower_bound: float
    seed: int
    score: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def audit_scores(scores: np.ndarray, included: np.ndarray, k: int, delta: float, *,
                 guess_out: bool = False, kind: str, seed: int, score: str,
                 significance: float = SIGNIFICANCE) -> OneRunAudit:
    """Guess "in" for the ``k`` highest ``scores`` (and "out" for the ``k`` lowest when
    ``guess_out``), count the right guesses against ``included`` and bound epsilon.

    Ties are broken by canary index (stable sort), never by the inclusion mask.
    """
    scores = np.asarray(scores, dtype=np.float64)
    included = np.asarray(included, dtype=bool)
    m = len(scores)
    if included.shape != scores.shape:
        raise ConfigError(f"{len(included)} inclusion flags for {m} canary scores")
    guesses = 2 * k if guess_out else k
    if not 1 <= guesses <= m:
        raise ConfigError(f"audit guesses k={k} (guess_out={guess_out}) for m={m} canaries are "
                          f"not valid; valid: 1 <= {'2k' if guess_out else 'k'} <= m")
    if not np.isfinite(scores).all():
        scores = np.nan_to_num(scores, nan=-math.inf)
    order = np.argsort(-scores, kind="stable")
    correct = int(included[order[:k]].sum())
    if guess_out:
        correct += int((~included[order[m - k:]]).sum())
    return OneRunAudit(
        kind=kind, m=m, included=int(included.sum()), k=guesses, guess_out=guess_out,
        correct=correct, delta=float(delta), significance=significance,
        epsilon_lower_bound=epsilon_lower_bound(m, guesses, correct, delta, significance),
        seed=int(seed), score=score,
    )
