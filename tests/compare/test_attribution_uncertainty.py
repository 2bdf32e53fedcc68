"""The share of the gap the attribution's factors explain, with its bootstrap interval, the
Holm correction of its effects, and the additivity it assumes (tested where the grid has an
interaction run)."""

from __future__ import annotations

import numpy as np
import pytest
from statsmodels.stats.multitest import multipletests

from compare.reporting.attribution import attribute, configurations
from compare.reporting.attribution_uncertainty import (
    _pairing_groups,
    additivity_sentence,
    gap_share,
    interaction_tests,
)
from compare.reporting.stats import contrast_interval
from tests.compare import attribution_fakes
from tests.compare.attribution_fakes import EXPLAINED, make_grid


def test_effects_are_holm_adjusted_together() -> None:
    a = attribute(configurations(make_grid(EXPLAINED)))
    effects = [*a.factor_effects, *a.stock_effects, a.gap]
    raw = [e.p_value for e in effects]
    assert all(0 < p <= 1 for p in raw)
    assert [e.p_holm for e in effects] == pytest.approx(
        list(multipletests(raw, method="holm")[1]))
    shuffle = next(e for e in a.factor_effects if e.label.startswith("flip: shuffled"))
    assert shuffle.significant == (shuffle.p_holm < 0.05)


def test_the_share_is_exact_when_no_seed_varies() -> None:
    constant = {label: [values[0]] * 5 for label, values in EXPLAINED.items()}
    constant["flip: shuffled fixed batches"] = [0.88] * 5
    constant["harmonised tf"] = [0.80] * 5
    a = attribute(configurations(make_grid(constant)))
    # the flip's effect has no spread: it is known exactly (its interval a point), counted
    assert [e.label.split(" − ")[0] for e in a.counted] == ["flip: shuffled fixed batches"]
    share = gap_share(a, resamples=500)
    assert share is not None
    assert share.share.mean == pytest.approx(0.08 / 0.10)
    assert (share.share.low, share.share.high) == pytest.approx((0.8, 0.8))
    assert (share.gap.low, share.gap.high) == pytest.approx((0.10, 0.10))


def test_the_share_interval_holds_the_point_estimate() -> None:
    a = attribute(configurations(make_grid(EXPLAINED)))
    share = gap_share(a, resamples=2000)
    assert share is not None
    assert share.share.mean == pytest.approx(0.09 / (0.31 / 3))  # 87 %
    assert share.share.low <= share.share.mean <= share.share.high
    assert share.explained.low <= 0.09 <= share.explained.high
    again = gap_share(a, resamples=2000)
    assert again == share  # seeded: the same interval every time
    # the same draws with another seed give another, similar interval
    other = gap_share(a, resamples=2000, seed=1)
    assert other is not None and other.share.low != share.share.low
    assert abs(other.share.low - share.share.low) < 0.2


def test_runs_that_pair_share_their_resampled_seeds() -> None:
    configs = configurations(make_grid({**EXPLAINED,
                                        "flip: standardised inputs": [0.83, 0.85, 0.85]}))
    groups = {tuple(sorted(c.setting for c in g)) for g in _pairing_groups(configs)}
    # same backend, sampling and initialisation: one group; every other configuration alone
    assert ("flip: standardised inputs", "harmonised") in groups
    assert ("TF Privacy stock (library)",) in groups


def test_without_an_interaction_run_additivity_is_an_assumption() -> None:
    a = attribute(configurations(make_grid(EXPLAINED)))
    assert interaction_tests(a) == []
    assert additivity_sentence(a).startswith("Additivity is assumed, not tested")


def test_an_interaction_run_tests_additivity(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(attribution_fakes.SETTINGS, "flip: shuffled + standardised",
                        ("tf", "harmonised", {"sampling": "shuffle"},
                         {"input_scaling": "standardised"}))
    accuracies = {**EXPLAINED, "flip: standardised inputs": [0.83, 0.85, 0.85],
                  "flip: shuffled + standardised": [0.95, 0.97, 0.96]}
    a = attribute(configurations(make_grid(accuracies)))
    (test,) = interaction_tests(a)
    assert test.combined.label.startswith("flip: shuffled + standardised")
    assert {p.label.split(" − ")[0] for p in test.parts} == {
        "flip: shuffled fixed batches", "flip: standardised inputs"}
    # combined - (shuffle - base) - (standardised - base), four independent groups
    mean = (np.mean(accuracies["flip: shuffled + standardised"])
            - np.mean(accuracies["flip: shuffled fixed batches"])
            - np.mean(accuracies["flip: standardised inputs"])
            + np.mean(accuracies["harmonised tf"]))
    assert test.interval.mean == pytest.approx(mean)
    base = contrast_interval([(1.0, test.combined.parts[0][1]),
                              (-1.0, test.parts[0].parts[0][1]),
                              (-1.0, test.parts[1].parts[0][1]),
                              (1.0, test.parts[0].parts[1][1])])
    assert (test.interval.low, test.interval.high) == pytest.approx((base.low, base.high))
    assert additivity_sentence(a).startswith("Additivity tested by the grid's interaction runs")
