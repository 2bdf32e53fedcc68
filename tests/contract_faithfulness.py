"""The faithfulness contract every backend's ``predict_proba`` + ``gradcam`` pair must meet.

Subclass :class:`FaithfulnessContract` in a ``Test*`` class (one per backend) and provide:

* ``make_predict_proba(self) -> Callable[[np.ndarray], np.ndarray]``: images [n, H, W, C]
  float in [0, 1] -> softmax probabilities [n, K] (a small model, eval mode);
* ``make_saliency(self, x, target) -> np.ndarray``: maps [N, H, W] in [0, 1] of the classes
  ``target`` [N] for the images ``x`` (the backend's Grad-CAM on the same model).

Optionally override ``image_shape``, ``n_images``, ``n_steps`` or ``atol`` (float32 models
need about 1e-5). pytest makes a new instance per test, so a backend whose model is slow to
build should cache it at class or module level.

This base class is not collected by pytest (no ``Test`` prefix, not a ``test_*.py`` file).
"""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np

from dpcore.metrics import (
    faithfulness_metrics,
    make_baseline,
    perturbation_curve,
    predict_in_batches,
)

PredictProba = Callable[[np.ndarray], np.ndarray]


class FaithfulnessContract:
    """Abstract contract test base; see the module docstring."""

    image_shape: tuple[int, int, int] = (8, 8, 3)
    n_images: int = 6
    n_steps: int = 4
    atol: float = 1e-5
    seed: int = 0

    # --- provided by subclasses -------------------------------------------------------------
    def make_predict_proba(self) -> PredictProba:
        raise NotImplementedError

    def make_saliency(self, x: np.ndarray, target: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    # --- shared fixtures --------------------------------------------------------------------
    def make_inputs(self) -> np.ndarray:
        """Seeded uniform images [n_images, *image_shape], float32 in [0, 1]."""
        rng = np.random.default_rng(self.seed)
        return rng.uniform(0.0, 1.0, (self.n_images, *self.image_shape)).astype(np.float32)

    def _setup(self) -> tuple[np.ndarray, PredictProba, np.ndarray]:
        x = self.make_inputs()
        predict = self.make_predict_proba()
        target = np.argmax(predict(x), axis=1)
        return x, predict, target

    def _target_proba(self, predict: PredictProba, x: np.ndarray, target: np.ndarray) -> np.ndarray:
        return predict_in_batches(predict, x, batch_size=len(x))[np.arange(len(x)), target]

    # --- the contract -----------------------------------------------------------------------
    def test_predict_proba_is_a_probability(self) -> None:
        x, predict, _ = self._setup()
        proba = np.asarray(predict(x), dtype=np.float64)
        assert proba.ndim == 2 and proba.shape[0] == len(x) and proba.shape[1] >= 2
        assert np.all(np.isfinite(proba))
        assert proba.min() >= 0.0 and proba.max() <= 1.0 + self.atol
        np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-4)

    def test_predict_proba_does_not_depend_on_the_batch(self) -> None:
        x, predict, _ = self._setup()
        whole = np.asarray(predict(x), dtype=np.float64)
        one_by_one = predict_in_batches(predict, x, batch_size=1)
        np.testing.assert_allclose(one_by_one, whole, atol=self.atol)

    def test_saliency_has_the_image_shape_and_unit_range(self) -> None:
        x, _, target = self._setup()
        maps = np.asarray(self.make_saliency(x, target))
        assert maps.shape == x.shape[:3]
        assert np.all(np.isfinite(maps))
        assert maps.min() >= 0.0 and maps.max() <= 1.0 + self.atol

    def test_metrics_are_in_range_and_json_able(self) -> None:
        x, predict, target = self._setup()
        maps = np.clip(self.make_saliency(x, target), 0.0, 1.0)
        out = faithfulness_metrics(
            x, maps, predict, target, labels=target, n_steps=self.n_steps, batch_size=4
        )
        assert out["n"] == len(x)
        for key in ("average_drop", "increase_in_confidence"):
            assert 0.0 <= out[key] <= 100.0, (key, out[key])
        for key in ("original_score", "masked_score", "accuracy", "masked_accuracy",
                    "deletion_auc", "insertion_auc"):
            assert 0.0 <= out[key] <= 1.0 + self.atol, (key, out[key])
        assert out["accuracy"] == 1.0  # the targets are the predicted classes
        json.dumps(out, allow_nan=False)

    def test_all_ones_map_gives_o_equal_to_y(self) -> None:
        x, predict, target = self._setup()
        ones = np.ones(x.shape[:3])
        out = faithfulness_metrics(x, ones, predict, target, curves=False, batch_size=4)
        assert abs(out["masked_score"] - out["original_score"]) <= self.atol
        assert out["average_drop"] <= 100.0 * self.atol

    def test_zero_map_gives_the_baseline_prediction(self) -> None:
        x, predict, target = self._setup()
        out = faithfulness_metrics(
            x, np.zeros(x.shape[:3]), predict, target, curves=False, batch_size=4
        )
        # x * 0 is the all-zero image for every i: O_i = p(zeros)[c_i].
        expected = self._target_proba(predict, np.zeros_like(x), target)
        assert abs(out["masked_score"] - float(np.mean(expected))) <= self.atol

    def test_curves_start_and_end_at_the_right_images(self) -> None:
        x, predict, target = self._setup()
        maps = np.clip(self.make_saliency(x, target), 0.0, 1.0)
        y = self._target_proba(predict, x, target)
        _, deletion = perturbation_curve(
            x, maps, predict, target, mode="deletion", n_steps=self.n_steps, batch_size=5
        )
        _, insertion = perturbation_curve(
            x, maps, predict, target, mode="insertion", n_steps=self.n_steps, batch_size=5
        )
        zeros = self._target_proba(predict, np.zeros_like(x), target)
        blurred = self._target_proba(predict, make_baseline(x, "blur"), target)
        np.testing.assert_allclose(deletion[:, 0], y, atol=self.atol)
        np.testing.assert_allclose(deletion[:, -1], zeros, atol=self.atol)
        np.testing.assert_allclose(insertion[:, 0], blurred, atol=self.atol)
        np.testing.assert_allclose(insertion[:, -1], y, atol=self.atol)
