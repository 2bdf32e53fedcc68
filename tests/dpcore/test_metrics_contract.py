"""The faithfulness contract on a numpy softmax-linear model (runs without either framework)."""

from __future__ import annotations

import numpy as np

from tests.contract_faithfulness import FaithfulnessContract, PredictProba

N_CLASSES = 3


class TestNumpyFaithfulness(FaithfulnessContract):
    """p(x) = softmax(W . vec(x) + b); saliency = ReLU of the per-pixel contribution to the
    target logit (summed over channels), divided by its per-image maximum."""

    def _weights(self) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(1)
        weights = rng.normal(0.0, 0.5, (*self.image_shape, N_CLASSES))
        bias = rng.normal(0.0, 0.1, N_CLASSES)
        return weights, bias

    def make_predict_proba(self) -> PredictProba:
        weights, bias = self._weights()

        def predict(x: np.ndarray) -> np.ndarray:
            logits = np.einsum("nhwc,hwck->nk", x.astype(np.float64), weights) + bias
            logits -= logits.max(axis=1, keepdims=True)
            exp = np.exp(logits)
            return exp / exp.sum(axis=1, keepdims=True)

        return predict

    def make_saliency(self, x: np.ndarray, target: np.ndarray) -> np.ndarray:
        weights, _ = self._weights()
        # contribution[n, h, w] = sum_c x[n, h, w, c] * W[h, w, c, target[n]]
        contribution = np.einsum("nhwc,hwcn->nhw", x, weights[..., target])
        relu = np.maximum(contribution, 0.0)
        peak = relu.max(axis=(1, 2), keepdims=True)
        return np.divide(relu, peak, out=np.zeros_like(relu), where=peak > 0)


def test_the_metrics_package_loads_no_framework() -> None:
    import subprocess
    import sys

    code = (
        "import sys, dpcore.metrics; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'torch', 'keras')]; "
        "sys.exit(bool(bad))"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
