"""Faithfulness metrics on tiny images with closed-form answers."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from dpcore.errors import ConfigError, DataError
from dpcore.metrics import (
    average_drop,
    deletion_auc,
    faithfulness_metrics,
    increase_in_confidence,
    insertion_auc,
    make_baseline,
    perturbation_curve,
    saliency_rank,
    seeded_subset,
    step_fractions,
)
from dpcore.metrics.faithfulness import default_blur_sigma


def mean_model(x: np.ndarray) -> np.ndarray:
    """p(class 0) = mean of all pixel values, p(class 1) = 1 - that."""
    m = x.mean(axis=(1, 2, 3))
    return np.stack([m, 1.0 - m], axis=1)


# One 2x2 single-channel image:  x = [[0.8, 0.4],   saliency = [[1.0, 0.5],
#                                     [0.2, 0.6]]                [0.0, 0.75]]
# saliency order: 0.8 (L 1), 0.6 (L .75), 0.4 (L .5), 0.2 (L 0)
X = np.array([[[0.8], [0.4]], [[0.2], [0.6]]])[None]
L = np.array([[1.0, 0.5], [0.0, 0.75]])[None]
TARGET = np.array([0])


def test_average_drop_and_increase_by_hand() -> None:
    Y = np.array([0.8, 0.5, 0.2])
    O = np.array([0.4, 0.6, 0.1])  # noqa: E741
    # drops: max(0, .4) / .8 = .5; max(0, -.1) = 0; .1 / .2 = .5 -> mean 1/3 -> 33.33 %
    assert average_drop(Y, O) == pytest.approx(100 / 3)
    # increases: .8 < .4 no, .5 < .6 yes, .2 < .1 no -> 1/3 -> 33.33 %
    assert increase_in_confidence(Y, O) == pytest.approx(100 / 3)
    # equal scores: no drop, no (strict) increase
    assert average_drop(Y, Y) == 0.0 and increase_in_confidence(Y, Y) == 0.0
    # Y = 0 cannot drop: that term is 0, not 0/0
    assert average_drop(np.array([0.0, 0.5]), np.array([0.0, 0.25])) == pytest.approx(25.0)


def test_deletion_curve_closed_form() -> None:
    fractions, probs = perturbation_curve(X, L, mean_model, TARGET, mode="deletion", n_steps=4)
    # remove 0.8, then 0.6, 0.4, 0.2 (set to 0): means 2.0/4, 1.2/4, 0.6/4, 0.2/4, 0
    np.testing.assert_allclose(fractions, [0, 0.25, 0.5, 0.75, 1])
    np.testing.assert_allclose(probs[0], [0.5, 0.3, 0.15, 0.05, 0.0])
    # trapezoid, h = 1/4: 0.25 * (0.5/2 + 0.3 + 0.15 + 0.05 + 0/2) = 0.1875
    assert deletion_auc(X, L, mean_model, TARGET, n_steps=4) == pytest.approx(0.1875)


def test_insertion_curve_closed_form_from_zeros() -> None:
    _, probs = perturbation_curve(
        X, L, mean_model, TARGET, mode="insertion", n_steps=4, baseline=0.0
    )
    # insert 0.8, 0.6, 0.4, 0.2 into zeros: 0, 0.2, 0.35, 0.45, 0.5
    np.testing.assert_allclose(probs[0], [0.0, 0.2, 0.35, 0.45, 0.5])
    # 0.25 * (0/2 + 0.2 + 0.35 + 0.45 + 0.5/2) = 0.3125
    auc = insertion_auc(X, L, mean_model, TARGET, n_steps=4, baseline=0.0)
    assert auc == pytest.approx(0.3125)


def test_ties_are_broken_in_raster_order() -> None:
    flat = np.full((1, 2, 2), 0.5)
    np.testing.assert_array_equal(saliency_rank(flat)[0], [0, 1, 2, 3])
    # delete 0.8, 0.4, 0.2, 0.6 in that order: means 0.5, 0.3, 0.2, 0.15, 0
    # -> 0.25 * (0.25 + 0.3 + 0.2 + 0.15 + 0) = 0.225
    assert deletion_auc(X, flat, mean_model, TARGET, n_steps=4) == pytest.approx(0.225)


def test_unequal_steps_use_the_actual_fractions() -> None:
    counts, fractions = step_fractions(4, 3)
    # floor(s * 4 / 3) for s = 0..3
    np.testing.assert_array_equal(counts, [0, 1, 2, 4])
    np.testing.assert_allclose(fractions, [0, 0.25, 0.5, 1.0])
    # deletion probs 0.5, 0.3, 0.15, 0 over x = 0, .25, .5, 1:
    # .25 * (.5 + .3) / 2 + .25 * (.3 + .15) / 2 + .5 * (.15 + 0) / 2 = .1 + .05625 + .0375
    assert deletion_auc(X, L, mean_model, TARGET, n_steps=3) == pytest.approx(0.19375)


def test_batching_does_not_change_the_curves() -> None:
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(5, 4, 3, 2))
    maps = rng.uniform(size=(5, 4, 3))
    target = np.array([0, 1, 0, 1, 1])
    calls: list[int] = []

    def counting(batch: np.ndarray) -> np.ndarray:
        calls.append(len(batch))
        return mean_model(batch)

    reference = perturbation_curve(x, maps, mean_model, target, mode="insertion", n_steps=6,
                                   batch_size=64)[1]
    for batch_size in (1, 3, 7):
        calls.clear()
        _, probs = perturbation_curve(x, maps, counting, target, mode="insertion", n_steps=6,
                                      batch_size=batch_size)
        np.testing.assert_allclose(probs, reference)
        assert max(calls) <= batch_size and sum(calls) == 5 * 7


def test_faithfulness_metrics_on_the_tiny_image() -> None:
    out = faithfulness_metrics(X, L, mean_model, TARGET, labels=TARGET, n_steps=4)
    # masked image x * L = [[.8, .2], [0, .45]] -> O = 1.45 / 4 = .3625; Y = .5
    assert out["original_score"] == pytest.approx(0.5)
    assert out["masked_score"] == pytest.approx(0.3625)
    assert out["average_drop"] == pytest.approx(100 * 0.1375 / 0.5)  # 27.5 %
    assert out["increase_in_confidence"] == 0.0
    # argmax: original [.5, .5] -> class 0 (tie to the first); masked [.3625, .6375] -> 1
    assert out["accuracy"] == 1.0 and out["masked_accuracy"] == 0.0
    assert out["deletion_auc"] == pytest.approx(0.1875)
    assert out["deletion_curve"] == pytest.approx([0.5, 0.3, 0.15, 0.05, 0.0])
    assert out["insertion_curve"][-1] == pytest.approx(0.5)
    assert out["settings"]["insertion_baseline"] == "blur"
    json.dumps(out, allow_nan=False)
    quick = faithfulness_metrics(X, L, mean_model, TARGET, curves=False)
    assert quick["deletion_auc"] is None and quick["accuracy"] is None


def test_blur_baseline_blurs_space_only() -> None:
    assert default_blur_sigma((224, 224)) == pytest.approx(5.0)
    assert default_blur_sigma((28, 28)) == 1.0
    x = np.zeros((2, 9, 9, 2))
    x[0, 4, 4, 0] = 1.0  # one bright pixel in channel 0 of image 0
    blurred = make_baseline(x, "blur", blur_sigma=1.5)
    assert blurred.shape == x.shape
    assert blurred[0, 4, 4, 0] < 1.0 and blurred[0, 4, 5, 0] > 0.0  # spread over space
    assert np.all(blurred[0, ..., 1] == 0) and np.all(blurred[1] == 0)  # not over C or N
    assert blurred[0, ..., 0].sum() == pytest.approx(1.0)  # reflect mode keeps the mass
    np.testing.assert_allclose(make_baseline(np.full((1, 5, 5, 1), 0.3), "blur"), 0.3)


def test_seeded_subset() -> None:
    a = seeded_subset(10_000, 500, seed=3)
    assert a.shape == (500,) and np.all(np.diff(a) > 0) and a.max() < 10_000
    np.testing.assert_array_equal(a, seeded_subset(10_000, 500, seed=3))
    assert not np.array_equal(a, seeded_subset(10_000, 500, seed=4))
    np.testing.assert_array_equal(seeded_subset(300, 500), np.arange(300))
    with pytest.raises(ConfigError):
        seeded_subset(0)


def test_bad_inputs_name_the_problem() -> None:
    with pytest.raises(DataError, match="saliency must have shape"):
        faithfulness_metrics(X, L[:, :1], mean_model, TARGET)
    with pytest.raises(DataError, match="saliency has values"):
        faithfulness_metrics(X, L * 2, mean_model, TARGET)
    with pytest.raises(DataError, match="x must have shape"):
        faithfulness_metrics(X[0], L, mean_model, TARGET)
    with pytest.raises(DataError, match="predict_proba returned shape"):
        faithfulness_metrics(X, L, lambda b: b.mean(axis=(1, 2, 3)), TARGET)
    with pytest.raises(ConfigError, match="n_steps=0"):
        deletion_auc(X, L, mean_model, TARGET, n_steps=0)
    with pytest.raises(DataError, match="O must be a vector of length 2"):
        average_drop(np.array([0.5, 0.5]), np.array([0.5]))


unit = st.floats(0.0, 1.0, allow_nan=False)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 6).flatmap(
        lambda n: st.tuples(arrays(np.float64, n, elements=unit),
                            arrays(np.float64, n, elements=unit))
    )
)
def test_drop_and_increase_are_percentages(pair: tuple[np.ndarray, np.ndarray]) -> None:
    Y, O = pair  # noqa: E741
    assert 0.0 <= average_drop(Y, O) <= 100.0
    assert 0.0 <= increase_in_confidence(Y, O) <= 100.0


@settings(max_examples=25, deadline=None)
@given(
    arrays(np.float64, (2, 3, 3, 1), elements=unit),
    arrays(np.float64, (2, 3, 3), elements=unit),
    st.integers(1, 12),
)
def test_curve_aucs_are_in_the_unit_interval(x: np.ndarray, maps: np.ndarray, steps: int) -> None:
    target = np.array([0, 1])
    d = deletion_auc(x, maps, mean_model, target, n_steps=steps)
    i = insertion_auc(x, maps, mean_model, target, n_steps=steps)
    assert 0.0 <= d <= 1.0 and 0.0 <= i <= 1.0
