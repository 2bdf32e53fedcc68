"""Seed statistics of the report: t, bootstrap and Wilson intervals and backends paired by
seed, against hand computations; the collapsed-run rule (binomial test against the majority
rate)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from compare.reporting.collapse import (
    above_chance_p_value,
    collapse_reason,
    majority_rate,
    n_test_examples,
    predicted_shares,
)
from compare.reporting.frames import results_frame
from compare.reporting.stats import (
    bootstrap_interval,
    few_seeds_reason,
    format_interval,
    mean_interval,
    paired_backend_table,
    verdict,
    verdict_word,
    wilson_interval,
)
from tests.compare.report_fakes import fake_result, per_class


def test_mean_interval_is_the_student_t_interval() -> None:
    # values 1, 2, 3, 4: mean 2.5, sd sqrt(5/3), t_{0.975, 3} = 3.182446305284263
    interval = mean_interval([1.0, 2.0, 3.0, 4.0])
    half = 3.182446305284263 * math.sqrt(5 / 3) / 2
    assert interval.mean == pytest.approx(2.5)
    assert (interval.low, interval.high) == pytest.approx((2.5 - half, 2.5 + half))
    one = mean_interval([0.7])
    assert one.n == 1 and one.mean == 0.7 and math.isnan(one.low) and math.isnan(one.high)


def test_backends_paired_by_seed_match_a_hand_computation() -> None:
    tf = [0.90, 0.92, 0.91, 0.90, 0.91]
    torch = [0.93, 0.94, 0.95, 0.93, 0.94]   # differences 0.03, 0.02, 0.04, 0.03, 0.03
    runs = [fake_result(backend="tf", seed=s, accuracy=a) for s, a in enumerate(tf)]
    runs += [fake_result(backend="torch", seed=s, accuracy=a) for s, a in enumerate(torch)]
    table = paired_backend_table(results_frame(runs))
    row = table.iloc[0]
    # by hand: mean 0.03, sd sqrt(0.0002 / 4) = 0.0070711, se = sd / sqrt(5),
    # t_{0.975, 4} = 2.7764451051977987
    se = math.sqrt(0.0002 / 4) / math.sqrt(5)
    assert row["pairs"] == 5
    assert row["mean_difference"] == pytest.approx(0.03)
    assert row["ci_low"] == pytest.approx(0.03 - 2.7764451051977987 * se)
    assert row["ci_high"] == pytest.approx(0.03 + 2.7764451051977987 * se)
    # paired t statistic 0.03 / se = 9.4868; two-sided p with 4 df = 0.000689
    assert row["p_value"] == pytest.approx(2 * stats.t.sf(0.03 / se, 4), rel=1e-6)
    assert row["p_value"] == pytest.approx(0.000689, abs=1e-6)
    assert row["verdict"] == "differ"
    assert row["seed_differences"] == "+3.00, +2.00, +4.00, +3.00, +3.00"
    assert (row["min_difference"], row["max_difference"]) == pytest.approx((0.02, 0.04))


def test_fewer_than_five_seeds_give_no_t_interval_test_or_verdict() -> None:
    """Three pairs: the t interval would be mean ± 4.30 * se; none is given, the seeds are."""
    runs = [fake_result(backend="tf", seed=s, accuracy=a)
            for s, a in enumerate([0.90, 0.92, 0.91])]
    runs += [fake_result(backend="torch", seed=s, accuracy=a)
             for s, a in enumerate([0.93, 0.94, 0.95])]
    row = paired_backend_table(results_frame(runs)).iloc[0]
    assert row["pairs"] == 3 and row["mean_difference"] == pytest.approx(0.03)
    assert math.isnan(row["ci_low"]) and math.isnan(row["ci_high"])
    assert math.isnan(row["p_value"]) and row["verdict"] == "3 seeds: no interval"
    assert row["seed_differences"] == "+3.00, +2.00, +4.00"


def test_pairs_use_only_seeds_finished_on_both_backends() -> None:
    runs = [fake_result(backend="tf", seed=s, accuracy=0.9) for s in range(6)]
    runs += [fake_result(backend="torch", seed=s, accuracy=0.9) for s in (1, 2, 3, 4, 5)]
    row = paired_backend_table(results_frame(runs)).iloc[0]
    assert row["pairs"] == 5 and row["mean_difference"] == 0.0
    assert row["verdict"] == "agree" and math.isnan(row["p_value"])


def test_verdicts() -> None:
    assert verdict(mean_interval([0.001, -0.002, 0.0, 0.001, -0.001])) == "agree"
    assert verdict(mean_interval([0.001, -0.002, 0.0])) == "3 seeds: no interval"
    assert verdict(mean_interval([0.05, -0.04, 0.01, 0.0, 0.02])) == "inconclusive"
    assert verdict(mean_interval([0.02])) == "one seed: no interval"
    assert verdict(mean_interval([0.03, 0.02, 0.04, 0.03, 0.03])) == "differ"
    assert verdict_word("inconclusive (collapsed run)") == "inconclusive"
    assert few_seeds_reason(2).startswith("with 2 seeds the 95% t quantile is 12.7, against 1.96")


def test_a_pair_with_a_collapsed_run_never_agrees() -> None:
    agreeing = mean_interval([0.001, -0.002, 0.0, 0.001, -0.001])
    assert verdict(agreeing, collapsed=True) == "inconclusive (collapsed run)"
    # both backends at the majority rate of a balanced binary task: identical, yet no "agree"
    at_chance = per_class([500, 500], [0.5, 0.5], [0.5, 0.5])
    runs = [fake_result(backend=b, seed=s, accuracy=0.5, classes=at_chance)
            for b in ("tf", "torch") for s in range(5)]
    row = paired_backend_table(results_frame(runs)).iloc[0]
    assert row["mean_difference"] == 0.0 and row["collapsed"] == "tf, torch"
    assert row["verdict"] == "inconclusive (collapsed run)"
    from compare.reporting.headline import backend_sentence

    text = backend_sentence(paired_backend_table(results_frame(runs)))
    assert "agree" not in text.split("(corrected for")[0] and "1 inconclusive" in text


def test_bootstrap_intervals_stay_in_the_metrics_range() -> None:
    """The issue's Increase in Confidence over 3 seeds (two saturated, one at 15%): the t
    interval "71.67 ± 120.62"-style leaves [0, 100]; the percentile bootstrap cannot."""
    values = [100.0, 100.0, 15.0]
    t = mean_interval(values)
    assert t.low < 0 and t.high > 100  # what the reports printed
    boot = bootstrap_interval(values)
    assert boot.mean == pytest.approx(71.6667, abs=1e-4) and boot.method == "bootstrap"
    assert 0.0 <= 15.0 <= boot.low <= boot.mean <= boot.high <= 100.0
    assert boot == bootstrap_interval(values)  # seeded: the same interval every time
    assert format_interval(boot, 2).startswith("71.67 [")
    rng = np.random.default_rng(3)
    for _ in range(50):
        sample = rng.uniform(0.0, 1.0, size=int(rng.integers(2, 8)))
        interval = bootstrap_interval(sample)
        assert sample.min() <= interval.low <= interval.mean <= interval.high <= sample.max()
    assert bootstrap_interval([0.5, 0.5, 0.5]).low == 0.5
    one = bootstrap_interval([0.7])
    assert one.n == 1 and math.isnan(one.low) and format_interval(one) == "0.700 (1 seed)"


def test_the_wilson_interval_of_one_run_matches_a_hand_computation() -> None:
    # 912 of 1000: Wilson centre (k + z^2/2) / (n + z^2), half z sqrt(p(1-p)/n + z^2/4n^2)
    # / (1 + z^2/n), z = 1.959964: 0.89283 to 0.92802
    interval = wilson_interval(0.912, 1000)
    assert (interval.low, interval.high) == pytest.approx((0.89283, 0.92802), abs=1e-5)
    assert wilson_interval(1.0, 20).high == 1.0 and wilson_interval(0.0, 20).low == 0.0
    assert format_interval(interval) == "0.912 [0.893, 0.928]"
    with pytest.raises(ValueError, match="n_test=0"):
        wilson_interval(0.5, 0)


def test_summary_table_intervals_stay_in_range_and_say_which() -> None:
    from compare.report import seeds_phrase, summary_table

    faith = [{"increase_in_confidence": v} for v in (100.0, 100.0, 15.0)]
    runs = [fake_result(seed=s, accuracy=a, faithfulness=f)
            for s, (a, f) in enumerate(zip((0.99, 1.0, 0.2), faith, strict=True))]
    row = summary_table(results_frame(runs)).iloc[0]
    assert 0.2 <= row["accuracy_low"] <= row["accuracy_high"] <= 1.0
    assert row["increase_in_confidence_low"] >= 15.0
    assert row["increase_in_confidence_high"] <= 100.0
    assert "bootstrap" in seeds_phrase(pd.Series([3, 3]))
    single = summary_table(results_frame([fake_result(accuracy=0.9)])).iloc[0]
    # one seed on 100 test images: Wilson 0.8256 to 0.9448
    assert (single["accuracy_low"], single["accuracy_high"]) == pytest.approx(
        (0.82565, 0.94479), abs=1e-4)
    assert "Wilson" in seeds_phrase(pd.Series([1]))


def test_a_model_predicting_one_class_is_collapsed() -> None:
    # 625 pneumonia, 375 normal; every prediction "pneumonia": recall 1 / 0, precision .625
    classes = per_class([375, 625], [0.0, 1.0], [math.nan, 0.625], ["normal", "pneumonia"])
    assert predicted_shares(classes) == pytest.approx([0.0, 1.0])
    assert majority_rate(classes) == pytest.approx(0.625)
    reason = collapse_reason({"accuracy": 0.625, "per_class": classes})
    assert reason is not None and "'pneumonia'" in reason


def test_at_chance_is_a_one_sided_binomial_test_against_the_majority_rate() -> None:
    """n = 1000, majority rate 0.5 (hand computation: P(X >= 520 | Bin(1000, 0.5)) = 0.1087,
    P(X >= 540) = 0.0062): 0.52 is at chance, 0.54 is not; the reason names the test and p."""
    classes = per_class([500, 500], [0.6, 0.44], [0.52, 0.52])
    assert max(predicted_shares(classes)) < 0.98
    assert above_chance_p_value(0.52, 0.5, 1000) == pytest.approx(0.10872, abs=1e-5)
    assert above_chance_p_value(0.54, 0.5, 1000) == pytest.approx(0.006222, abs=1e-6)
    reason = collapse_reason({"accuracy": 0.52, "per_class": classes})
    assert reason == ("at chance: accuracy 0.520 is not above the majority rate 0.500 "
                      "(one-sided binomial test, n = 1000, p = 0.11)")
    assert collapse_reason({"accuracy": 0.54, "per_class": classes}) is None
    # the old 1-point margin missed this: 0.52 is 2 points above the rate
    assert n_test_examples(classes) == 1000


def test_the_test_scales_with_the_test_size() -> None:
    """The same 0.52 at n = 10,000 is above chance (p = 3.3e-5): a margin cannot say that."""
    classes = per_class([5000, 5000], [0.6, 0.44], [0.52, 0.52])
    assert collapse_reason({"accuracy": 0.52, "per_class": classes}) is None
    # 3 classes (50/30/20), predictions spread out, accuracy 0.55 on 100 examples: p = 0.18
    small = per_class([50, 30, 20], [0.7, 0.4, 0.35], [0.6, 0.4, 0.4])
    reason = collapse_reason({"accuracy": 0.55, "per_class": small})
    assert reason is not None and "majority rate 0.500" in reason and "n = 100" in reason


def test_accuracy_below_the_majority_rate_is_collapsed() -> None:
    # balanced cats vs dogs at 0.483 (a Laplace DP-SGD run at epsilon 0.5): predictions
    # spread over both classes, 1.7 points under always predicting one class
    classes = per_class([500, 500], [0.55, 0.416], [0.485, 0.48])
    assert max(predicted_shares(classes)) < 0.98
    reason = collapse_reason({"accuracy": 0.483, "per_class": classes})
    assert reason is not None and reason.startswith("at chance: accuracy 0.483")
    assert "p = 0.87" in reason


def test_a_healthy_model_is_not_collapsed() -> None:
    classes = per_class([375, 625], [0.8, 0.9], [0.83, 0.88])
    assert collapse_reason({"accuracy": 0.8625, "per_class": classes}) is None
    # 4 points above the rate 0.625 on n = 1000: p = 0.0047, above chance
    assert collapse_reason({"accuracy": 0.665, "per_class": classes}) is None
    assert collapse_reason({"accuracy": 0.6351, "per_class": classes}) is not None


def test_collapsed_runs_are_flagged_in_the_run_table() -> None:
    bad = per_class([375, 625], [0.0, 1.0], [math.nan, 0.625])
    frame = results_frame([fake_result(accuracy=0.625, classes=bad),
                           fake_result(backend="torch", accuracy=0.9)])
    assert isinstance(frame, pd.DataFrame)
    flags = dict(zip(frame["backend"], frame["collapsed"], strict=True))
    assert flags == {"tf": True, "torch": False}


def test_the_headline_says_when_no_interval_can_be_given() -> None:
    from compare.reporting.headline import backend_sentence, headline

    one_seed = results_frame([fake_result(backend="tf", accuracy=0.90),
                              fake_result(backend="torch", accuracy=0.88)])
    text = backend_sentence(paired_backend_table(one_seed))
    assert "one seed, so no interval can be given" in text and "-2.00" in text
    runs = [fake_result(backend=b, seed=s, accuracy=0.9 + (0.001 * s if b == "tf" else 0))
            for b in ("tf", "torch") for s in range(5)]
    frame = results_frame(runs)
    sentences = headline(frame, paired_backend_table(frame))
    assert 2 <= len(sentences) <= 4
    assert "1 agree (corrected for the report's comparisons, Holm over the 1 setting" \
        in sentences[0]
    assert "over 1 setting:" in sentences[0]  # not "1 settings"
    assert sentences[-1].startswith("None of the 10 finished runs collapsed")


def test_a_two_seed_headline_gives_no_interval_and_says_why() -> None:
    """The 2-seed grid that headlined "95% t interval -286 to +303 points": now the seeds'
    range, no interval, no verdict, and why (the t quantile with 1 degree of freedom)."""
    from compare.reporting.headline import backend_sentence

    runs = [fake_result(backend=b, seed=s,
                        accuracy=0.5 + ({0: -0.3, 1: 0.31}[s] if b == "torch" else 0))
            for b in ("tf", "torch") for s in range(2)]
    paired = paired_backend_table(results_frame(runs))
    assert (mean_interval([-30.0, 31.0]).low, mean_interval([-30.0, 31.0]).high) == \
        pytest.approx((-387.0, 388.0), abs=1.0)  # what a t interval would have said
    text = backend_sentence(paired)
    assert "fewer than the 5" in text and "12.7" in text and "no verdict" in text
    assert "-30.00 to +31.00 points" in text and "interval -" not in text
    mixed = [*runs, *(fake_result(backend=b, seed=s, point="eps=8", accuracy=0.9)
                      for b in ("tf", "torch") for s in range(5))]
    text = backend_sentence(paired_backend_table(results_frame(mixed)))
    assert "over 2 settings: 1 agree (corrected for the report's comparisons" in text
    assert "; 1 setting with fewer than 5 seeds gets no interval and no verdict" in text
    assert "in 'mnist5k · eps=8'" in text  # the largest among the settings with a verdict


def test_dp_pairs_say_each_backend_draws_its_own_noise(tmp_path) -> None:  # noqa: ANN001
    """A DP-SGD pair of one seed shares batches and weights, not the noise: the headline and
    the paired section say so; a grid without DP-SGD says nothing of noise."""
    from compare.reporting.backends_section import NOISE_PAIRING_NOTE, SEED_ONLY_NOTE, backends
    from compare.reporting.headline import backend_sentence
    from tests.compare.report_fakes import render_section

    def runs(mechanism: str) -> list:
        return [fake_result(backend=b, seed=s, mechanism=mechanism,
                            accuracy=0.8 + (0.05 if b == "torch" else 0.001 * s))
                for b in ("tf", "torch") for s in range(3)]

    noised = paired_backend_table(results_frame(runs("dpsgd-gaussian")))
    assert bool(noised["noised"].iloc[0])
    assert "each backend draws its own noise" in backend_sentence(noised)
    lines = render_section(backends, runs("dpsgd-gaussian")).lines
    assert NOISE_PAIRING_NOTE in lines
    assert SEED_ONLY_NOTE in lines  # records without a noise key: keyed by the seed alone
    keyed = runs("dpsgd-gaussian")
    for result in keyed:
        result.privacy["noise_key"] = "seed"
    assert SEED_ONLY_NOTE not in render_section(backends, keyed).lines
    plain = paired_backend_table(results_frame(runs("none")))
    assert not bool(plain["noised"].iloc[0])
    assert "noise" not in backend_sentence(plain)
    assert NOISE_PAIRING_NOTE not in render_section(backends, runs("none")).lines


def test_time_ratio_uses_the_matching_non_private_run_not_a_pooled_one() -> None:
    from compare.report import time_ratio_table

    runs = []
    for dataset, plain, dp in (("mnist5k", 1.0, 3.0), ("pneumoniamnist", 10.0, 20.0)):
        for seed, jitter in enumerate((0.0, 0.5, 0.1)):
            for point, mechanism, seconds in (("eps=1", "dpsgd-gaussian", dp + jitter),
                                              ("non-private", "none", plain)):
                r = fake_result(dataset=dataset, seed=seed, point=point, mechanism=mechanism)
                r.timing = {"epoch_seconds": [99.0, seconds, seconds]}
                runs.append(r)
    table = time_ratio_table(results_frame(runs)).set_index("dataset")
    # median over seeds of (dp + jitter): dp + 0.1
    assert table.loc["mnist5k", "ratio_to_non_private"] == pytest.approx(3.1 / 1.0)
    assert table.loc["pneumoniamnist", "ratio_to_non_private"] == pytest.approx(20.1 / 10.0)


def test_montage_column_of_a_collapsed_model_says_so() -> None:
    from compare.grid_montages import montage_column_title

    bad = per_class([375, 625], [0.0, 1.0], [math.nan, 0.625])
    collapsed = fake_result(accuracy=0.625, classes=bad, epsilon=1.0)
    fine = fake_result(accuracy=0.9, epsilon=1.0)
    assert montage_column_title("pneumonia · C=0.1", collapsed) == (
        "pneumonia · C=0.1 (eps=1) (collapsed)")
    assert montage_column_title("pneumonia · eps=1", fine) == "pneumonia · eps=1"


def test_the_headline_says_when_the_compared_runs_collapsed() -> None:
    """The ResNet-18 medical grid: every run at the majority rate. A backend difference and a
    privacy cost between collapsed models are labelled so, not read as findings."""
    from compare.reporting.headline import backend_sentence, privacy_cost_sentence

    majority = per_class([400, 600], [0.0, 1.0], [math.nan, 0.6])
    good = per_class([400, 600], [0.8, 0.9], [0.85, 0.87])
    runs = [fake_result(backend=b, point=p, mechanism=m, epsilon=e, accuracy=acc, classes=c)
            for b in ("tf", "torch")
            for p, m, e, acc, c in (("eps=8", "dpsgd-gaussian", 8.0, 0.6, majority),
                                    ("non-private", "none", 0.0, 0.86, good))]
    frame = results_frame(runs)
    text = backend_sentence(paired_backend_table(frame))
    assert "1 of these 2 settings have a collapsed run" in text
    cost = privacy_cost_sentence(frame)
    assert cost is not None and "tf 0.600 (collapsed) vs 0.860, torch 0.600 (collapsed)" in cost
    everything = results_frame([r for r in runs if r.config["privacy"]["mechanism"] != "none"])
    assert "every one of them has a collapsed run" in backend_sentence(
        paired_backend_table(everything))
    healthy = results_frame([r for r in runs if r.config["privacy"]["mechanism"] == "none"])
    assert "collapsed" not in backend_sentence(paired_backend_table(healthy))
