"""The one-run audit's p-value and epsilon bound (Steinke, Nasr, Jagielski 2023)."""

from __future__ import annotations

import numpy as np
import pytest

from dpcore.audit.one_run import audit_scores, epsilon_lower_bound, one_run_p_value
from dpcore.errors import ConfigError


@pytest.mark.parametrize(("m", "k", "correct", "delta", "expected"), [
    (1000, 100, 100, 0.0, 3.493),
    (1000, 100, 100, 1e-5, 3.465),
    (1000, 100, 90, 1e-5, 1.626),
    (1000, 500, 400, 1e-5, 1.198),
])
def test_bound_matches_the_papers_formula(m: int, k: int, correct: int, delta: float,
                                          expected: float) -> None:
    assert epsilon_lower_bound(m, k, correct, delta) == pytest.approx(expected, abs=0.01)


def test_p_value_is_the_significance_at_the_bound_and_grows_with_epsilon() -> None:
    eps = epsilon_lower_bound(1000, 100, 90, 1e-5)
    assert one_run_p_value(1000, 100, 90, eps, 1e-5) == pytest.approx(0.05, abs=1e-4)
    values = [one_run_p_value(1000, 100, 90, e, 1e-5) for e in (0.5, 1.0, 2.0, 4.0)]
    assert values == sorted(values)


def test_chance_level_guesses_bound_nothing() -> None:
    assert epsilon_lower_bound(1000, 100, 50, 1e-5) == 0.0


def test_bad_counts_are_refused() -> None:
    with pytest.raises(ConfigError, match="k=200"):
        epsilon_lower_bound(100, 200, 10, 0.0)
    with pytest.raises(ConfigError, match="correct=11"):
        one_run_p_value(100, 10, 11, 1.0, 0.0)


def test_audit_counts_right_guesses_among_the_top_k() -> None:
    included = np.array([True, False, True, False, True, False])
    scores = np.array([5.0, 4.0, 3.0, 2.0, 1.0, 0.0])
    audit = audit_scores(scores, included, 3, 1e-5, kind="gradient", seed=1, score="s")
    assert (audit.m, audit.k, audit.correct, audit.included) == (6, 3, 2, 3)
    both = audit_scores(scores, included, 2, 1e-5, guess_out=True, kind="input", seed=1,
                        score="s")
    # top 2: indices 0 (in), 1 (out); bottom 2: indices 4 (in), 5 (out)
    assert (both.k, both.correct) == (4, 2)


def test_nan_scores_rank_last() -> None:
    included = np.array([True, False, False])
    audit = audit_scores(np.array([np.nan, 1.0, 0.5]), included, 1, 0.0, kind="gradient",
                         seed=0, score="s")
    assert audit.correct == 0
