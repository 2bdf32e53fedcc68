"""Membership-inference helpers: the (epsilon, delta) bound on membership advantage, and an
empirical advantage with a confidence interval to compare against it.

The attacks themselves are run elsewhere (TF Privacy's membership-inference module); this
module only turns their per-example scores into an advantage, an interval, and a verdict.

Membership advantage (Yeom et al. 2018) of an attack that says "member" when its score is
>= t: Adv(t) = TPR(t) - FPR(t), with TPR over members (training examples) and FPR over
non-members (held-out examples). Scores must be oriented so that higher means "more likely a
member" (e.g. the negative loss or the true-class confidence).
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
from scipy.special import expit
from scipy.stats import binomtest
from sklearn.metrics import roc_auc_score, roc_curve

from dpcore.errors import ConfigError, DataError


def advantage_upper_bound(epsilon: float, delta: float) -> float:
    """The largest membership advantage any attack can have on an (epsilon, delta)-DP model.

    bound = (e^eps - 1 + 2 * delta) / (e^eps + 1) = tanh(eps / 2) + 2 * delta / (e^eps + 1),

    computed in the second form (tanh and a logistic function), which neither overflows for
    large epsilons nor loses delta to cancellation at small ones; it is 1.0 for eps = inf (no
    privacy), exactly delta for eps = 0, and tanh(eps / 2) for delta = 0.

    Where it comes from: (epsilon, delta)-DP is equivalent to every test between two
    neighbouring data sets having FPR + e^eps * FNR >= 1 - delta and
    FNR + e^eps * FPR >= 1 - delta (Wasserman & Zhou 2010; Kairouz, Oh & Viswanath 2015,
    "The composition theorem for differential privacy", Thm. 2.1). Adding the two gives
    FPR + FNR >= 2 (1 - delta) / (1 + e^eps), so TPR - FPR = 1 - FNR - FPR is at most the
    bound above; Humphries et al. 2020 ("Investigating membership inference attacks under
    data dependencies") state it as the bound on membership advantage. It is tighter than
    Yeom et al.'s e^eps - 1.

    Args:
        epsilon: epsilon >= 0 (``math.inf`` allowed: no privacy).
        delta: delta in [0, 1].

    Raises:
        ConfigError: for a negative or NaN epsilon, or delta outside [0, 1].
    """
    if math.isnan(epsilon) or epsilon < 0:
        raise ConfigError(f"epsilon={epsilon} is not valid; valid: >= 0 (or inf)")
    if not 0.0 <= delta <= 1.0:
        raise ConfigError(f"delta={delta} is not valid; valid: [0, 1]")
    if math.isinf(epsilon):
        return 1.0
    # (e^eps - 1) / (e^eps + 1) = tanh(eps / 2) and 1 / (e^eps + 1) = expit(-eps).
    return float(min(1.0, math.tanh(epsilon / 2.0) + 2.0 * delta * expit(-epsilon)))


def empirical_advantage(
    member_scores: np.ndarray,
    nonmember_scores: np.ndarray,
    *,
    method: Literal["clopper-pearson", "bootstrap"] = "clopper-pearson",
    confidence: float = 0.95,
    n_bootstrap: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """Empirical membership advantage of a score-threshold attack, with a confidence interval.

    Two estimates are reported:

    * ``advantage``: max over thresholds t of TPR(t) - FPR(t) on all the scores (the number
      attack tables usually print; the one-sided Kolmogorov-Smirnov statistic). Choosing t on
      the same scores biases it upwards: it is about 1/sqrt(n) even when members and
      non-members are identically distributed, so it is NOT used for the interval.
      (TF Privacy prints max |TPR - FPR|, which equals it whenever the attack beats chance in
      the member-scores-higher direction.)
    * ``heldout_advantage``: each score set is split in two halves by a seeded permutation;
      t is chosen on the first halves (the maximiser of TPR - FPR, moved to the midpoint
      between that score and the next lower one), and TPR(t) - FPR(t) is measured on the
      second halves. Because t does not depend on the evaluation halves, the interval
      [``ci_low``, ``ci_high``] covers the true advantage of that fixed attack (which is at
      most the best attack's) with probability >= ``confidence``:

      - ``"clopper-pearson"``: exact binomial intervals for TPR and FPR, each at level
        1 - (1 - confidence) / 2 (Bonferroni), combined as
        [TPR_low - FPR_high, TPR_high - FPR_low];
      - ``"bootstrap"``: percentile interval of TPR* - FPR* over ``n_bootstrap`` resamples
        of the evaluation halves (drawn as binomial counts, which is the same distribution).
        Its coverage is only approximately ``confidence``; prefer the default for a
        verdict (:func:`exceeds_bound`).

      This follows the threshold-on-one-half, Clopper-Pearson-on-the-other practice of
      DP auditing (Jagielski et al. 2020; Nasr et al. 2021).

    Args:
        member_scores: attack scores of members [n1], n1 >= 2; higher = "member".
        nonmember_scores: attack scores of non-members [n0], n0 >= 2.
        method: interval method, see above.
        confidence: interval level in (0, 1).
        n_bootstrap: resamples for ``method="bootstrap"``.
        seed: seed of the split (and of the bootstrap).

    Returns:
        ``{"advantage", "auc", "heldout_advantage", "ci_low", "ci_high", "threshold" (float,
        None if no score reaches it), "tpr", "fpr" (on the evaluation halves), "method",
        "confidence", "n_members", "n_nonmembers", "n_bootstrap" (None for
        Clopper-Pearson), "seed"}``; ``auc`` is the ROC AUC of the scores on all examples.
    """
    members = _scores(member_scores, "member_scores")
    nonmembers = _scores(nonmember_scores, "nonmember_scores")
    if method not in ("clopper-pearson", "bootstrap"):
        raise ConfigError(f"method={method!r} is not known; valid: 'clopper-pearson', 'bootstrap'")
    if not 0.0 < confidence < 1.0:
        raise ConfigError(f"confidence={confidence} is not valid; valid: (0, 1)")
    if method == "bootstrap" and n_bootstrap < 1:
        raise ConfigError(f"n_bootstrap={n_bootstrap} is not valid; valid: >= 1")

    labels = np.r_[np.ones(members.size), np.zeros(nonmembers.size)]
    scores = np.r_[members, nonmembers]
    fpr_all, tpr_all, _ = roc_curve(labels, scores)
    in_sample = float(np.max(tpr_all - fpr_all))
    auc = float(roc_auc_score(labels, scores))

    rng = np.random.default_rng(seed)
    sel_m, eval_m = _halves(members, rng)
    sel_u, eval_u = _halves(nonmembers, rng)
    threshold = _best_threshold(sel_m, sel_u)
    k1, n1 = int(np.sum(eval_m >= threshold)), eval_m.size
    k0, n0 = int(np.sum(eval_u >= threshold)), eval_u.size
    tpr, fpr = k1 / n1, k0 / n0
    alpha = 1.0 - confidence
    if method == "clopper-pearson":
        tpr_ci = binomtest(k1, n1).proportion_ci(1.0 - alpha / 2, method="exact")
        fpr_ci = binomtest(k0, n0).proportion_ci(1.0 - alpha / 2, method="exact")
        ci_low, ci_high = tpr_ci.low - fpr_ci.high, tpr_ci.high - fpr_ci.low
    else:
        boot = rng.binomial(n1, tpr, n_bootstrap) / n1 - rng.binomial(n0, fpr, n_bootstrap) / n0
        ci_low, ci_high = np.quantile(boot, [alpha / 2, 1.0 - alpha / 2])
    return {
        "advantage": in_sample,
        "auc": auc,
        "heldout_advantage": float(tpr - fpr),
        "ci_low": float(ci_low),
        "ci_high": float(ci_high),
        "threshold": float(threshold) if math.isfinite(threshold) else None,
        "tpr": float(tpr),
        "fpr": float(fpr),
        "method": method,
        "confidence": float(confidence),
        "n_members": int(members.size),
        "n_nonmembers": int(nonmembers.size),
        "n_bootstrap": int(n_bootstrap) if method == "bootstrap" else None,
        "seed": int(seed),
    }


def exceeds_bound(result: dict[str, Any], bound: float) -> bool:
    """True only when the advantage's interval lies entirely above ``bound``: ci_low > bound.

    A True verdict means the measured attack beats what (epsilon, delta)-DP allows at the
    interval's confidence, i.e. the claimed guarantee (or its implementation) is violated.
    A missing or NaN ``ci_low`` gives False.
    """
    low = result.get("ci_low")
    return low is not None and math.isfinite(low) and low > bound


def _scores(values: np.ndarray, name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1 or arr.size < 2:
        raise DataError(f"{name} must be a vector of at least 2 scores; got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise DataError(f"{name} holds non-finite values; valid: finite scores")
    return arr


def _halves(values: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    shuffled = values[rng.permutation(values.size)]
    half = values.size // 2
    return shuffled[:half], shuffled[half:]


def _best_threshold(members: np.ndarray, nonmembers: np.ndarray) -> float:
    """The threshold maximising TPR - FPR on these scores, at a midpoint between scores."""
    labels = np.r_[np.ones(members.size), np.zeros(nonmembers.size)]
    scores = np.r_[members, nonmembers]
    fpr, tpr, thresholds = roc_curve(labels, scores, drop_intermediate=False)
    best = int(np.argmax(tpr - fpr))  # first maximiser: the highest such threshold
    if not math.isfinite(thresholds[best]):
        return math.inf
    if best + 1 < thresholds.size:
        return float((thresholds[best] + thresholds[best + 1]) / 2.0)
    return float(thresholds[best])
