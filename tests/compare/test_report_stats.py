"""Seed statistics of the report: t intervals and backends paired by seed, against hand
computations; the collapsed-run rule."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from compare.reporting.collapse import collapse_reason, majority_rate, predicted_shares
from compare.reporting.frames import results_frame
from compare.reporting.stats import mean_interval, paired_backend_table, verdict
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
    tf = [0.90, 0.92, 0.91]
    torch = [0.93, 0.94, 0.95]          # differences 0.03, 0.02, 0.04
    runs = [fake_result(backend="tf", seed=s, accuracy=a) for s, a in enumerate(tf)]
    runs += [fake_result(backend="torch", seed=s, accuracy=a) for s, a in enumerate(torch)]
    table = paired_backend_table(results_frame(runs))
    row = table.iloc[0]
    # by hand: mean 0.03, sd 0.01, se 0.01/sqrt(3), t_{0.975, 2} = 4.302652729911275
    se = 0.01 / math.sqrt(3)
    assert row["pairs"] == 3
    assert row["mean_difference"] == pytest.approx(0.03)
    assert row["ci_low"] == pytest.approx(0.03 - 4.302652729911275 * se)
    assert row["ci_high"] == pytest.approx(0.03 + 4.302652729911275 * se)
    # paired t statistic 0.03 / se = 5.196; two-sided p with 2 df = 0.035098
    assert row["p_value"] == pytest.approx(0.0350983, abs=1e-6)
    assert row["verdict"] == "differ"


def test_pairs_use_only_seeds_finished_on_both_backends() -> None:
    runs = [fake_result(backend="tf", seed=s, accuracy=0.9) for s in range(3)]
    runs += [fake_result(backend="torch", seed=s, accuracy=0.9) for s in (1, 2)]
    row = paired_backend_table(results_frame(runs)).iloc[0]
    assert row["pairs"] == 2 and row["mean_difference"] == 0.0
    assert row["verdict"] == "agree" and math.isnan(row["p_value"])


def test_verdicts() -> None:
    assert verdict(mean_interval([0.001, -0.002, 0.0])) == "agree"
    assert verdict(mean_interval([0.05, -0.04, 0.01])) == "inconclusive"
    assert verdict(mean_interval([0.02])) == "one seed: no interval"


def test_a_model_predicting_one_class_is_collapsed() -> None:
    # 625 pneumonia, 375 normal; every prediction "pneumonia": recall 1 / 0, precision .625
    classes = per_class([375, 625], [0.0, 1.0], [math.nan, 0.625], ["normal", "pneumonia"])
    assert predicted_shares(classes) == pytest.approx([0.0, 1.0])
    assert majority_rate(classes) == pytest.approx(0.625)
    reason = collapse_reason({"accuracy": 0.625, "per_class": classes})
    assert reason is not None and "'pneumonia'" in reason


def test_accuracy_at_the_majority_rate_is_collapsed_even_with_mixed_predictions() -> None:
    # 3 classes (50/30/20); predictions spread out but accuracy 0.505 ~ majority 0.5
    classes = per_class([50, 30, 20], [0.7, 0.3, 0.3], [0.6, 0.4, 0.3])
    assert max(predicted_shares(classes)) < 0.98
    reason = collapse_reason({"accuracy": 0.505, "per_class": classes})
    assert reason is not None and "majority rate 0.500" in reason


def test_accuracy_below_the_majority_rate_is_collapsed() -> None:
    # balanced cats vs dogs at 0.483 (a Laplace DP-SGD run at epsilon 0.5): predictions
    # spread over both classes, 1.7 points under always predicting one class
    classes = per_class([500, 500], [0.55, 0.416], [0.485, 0.48])
    assert max(predicted_shares(classes)) < 0.98
    reason = collapse_reason({"accuracy": 0.483, "per_class": classes})
    assert reason == "accuracy 0.483 is below the majority rate 0.500"


def test_a_healthy_model_is_not_collapsed() -> None:
    classes = per_class([375, 625], [0.8, 0.9], [0.83, 0.88])
    assert collapse_reason({"accuracy": 0.8625, "per_class": classes}) is None
    # just outside the 1-point margin
    assert collapse_reason({"accuracy": 0.6351, "per_class": classes}) is None


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
            for b in ("tf", "torch") for s in range(3)]
    frame = results_frame(runs)
    sentences = headline(frame, paired_backend_table(frame))
    assert 2 <= len(sentences) <= 4
    assert "1 agree" in sentences[0] and "95% CI" in sentences[0]
    assert "over 1 setting:" in sentences[0]  # not "1 settings"
    assert sentences[-1].startswith("None of the 6 finished runs collapsed")


def test_dp_pairs_say_each_backend_draws_its_own_noise(tmp_path) -> None:  # noqa: ANN001
    """A DP-SGD pair of one seed shares batches and weights, not the noise: the headline and
    the paired section say so; a grid without DP-SGD says nothing of noise."""
    from compare.report import NOISE_PAIRING_NOTE, _backend_section
    from compare.reporting.headline import backend_sentence

    def runs(mechanism: str) -> list:
        return [fake_result(backend=b, seed=s, mechanism=mechanism,
                            accuracy=0.8 + (0.05 if b == "torch" else 0.001 * s))
                for b in ("tf", "torch") for s in range(3)]

    noised = paired_backend_table(results_frame(runs("dpsgd-gaussian")))
    assert bool(noised["noised"].iloc[0])
    assert "each backend draws its own noise" in backend_sentence(noised)
    assert NOISE_PAIRING_NOTE in _backend_section(noised, tmp_path)
    plain = paired_backend_table(results_frame(runs("none")))
    assert not bool(plain["noised"].iloc[0])
    assert "noise" not in backend_sentence(plain)
    assert NOISE_PAIRING_NOTE not in _backend_section(plain, tmp_path)


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
    from compare.runner import montage_column_title

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
