"""AUC from logits: the log-odds scores rank examples as the exact probabilities do, where a
float32 softmax of an over-confident model rounds to 0 or 1 and ties."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import softmax
from sklearn.metrics import roc_auc_score

from dpcore.errors import DataError
from dpcore.metrics import log_odds, roc_auc, roc_auc_from_logits


def test_log_odds_are_the_log_odds_of_the_softmax() -> None:
    rng = np.random.default_rng(0)
    z = rng.normal(0.0, 3.0, size=(50, 4))
    p = softmax(z, axis=1)
    np.testing.assert_allclose(log_odds(z), np.log(p / (1 - p)), rtol=1e-9, atol=1e-9)
    binary = rng.normal(0.0, 3.0, size=(20, 2))
    np.testing.assert_allclose(log_odds(binary)[:, 1], binary[:, 1] - binary[:, 0], atol=1e-12)


@pytest.mark.parametrize("n_classes", [2, 3])
def test_moderate_logits_give_the_auc_of_the_probabilities(n_classes: int) -> None:
    rng = np.random.default_rng(n_classes)
    y = np.arange(60) % n_classes
    z = rng.normal(0.0, 1.0, size=(60, n_classes)) + 1.5 * np.eye(n_classes)[y]
    assert roc_auc_from_logits(z, y) == pytest.approx(roc_auc(softmax(z, axis=1), y), abs=1e-12)


def test_saturated_float32_softmax_ties_and_the_logits_do_not() -> None:
    """Every example predicted class 1 by 20 to 60 nats: float32 rounds every probability of
    class 1 to exactly 1, so the softmax AUC is chance; the logits keep the true, perfect
    ranking (class-1 examples have the larger margins)."""
    y = np.array([0] * 10 + [1] * 10)
    margin = np.concatenate([np.linspace(20, 39, 10), np.linspace(41, 60, 10)])
    z = np.stack([np.zeros(20), margin], axis=1)
    p32 = softmax(z.astype(np.float32), axis=1).astype(np.float32)
    assert np.all(p32[:, 1] == 1.0)
    assert roc_auc(p32, y) == 0.5
    assert roc_auc_from_logits(z, y) == 1.0
    assert roc_auc_from_logits(z, y) == pytest.approx(roc_auc_score(y, margin))


def test_an_absent_class_or_bad_logits() -> None:
    assert np.isnan(roc_auc_from_logits(np.zeros((4, 2)), np.zeros(4, dtype=int)))
    with pytest.raises(DataError, match=r"shape \[N, K\]"):
        log_odds(np.zeros(5))
    with pytest.raises(DataError, match="finite"):
        log_odds(np.array([[0.0, np.inf]]))
