"""The final weights a report keeps of its shared-noise runs (compare.final_weights): in full
for small models, as a seeded Johnson-Lindenstrauss projection for large ones; stored
byte-identically; the relative difference exact or estimated."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compare import final_weights as fw


def _weights(seed: int, n: int = 20_000) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"a/kernel": rng.normal(size=(n // 10, 10)).astype(np.float32),
            "b/bias": rng.normal(size=7).astype(np.float32)}


def _exact(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    va = np.concatenate([a[k].ravel() for k in sorted(a)]).astype(np.float64)
    vb = np.concatenate([b[k].ravel() for k in sorted(b)]).astype(np.float64)
    return float(np.linalg.norm(va - vb) / np.linalg.norm(vb))


def test_small_models_keep_their_weights_and_the_difference_is_exact(tmp_path: Path) -> None:
    w_tf = _weights(0)
    w_torch = {k: v + np.float32(0.01) * _weights(1)[k] for k, v in w_tf.items()}
    a, b = fw.compact_weights(w_tf), fw.compact_weights(w_torch)
    assert a.kind == "weights" and a.parameters == 20_007
    value, method = fw.relative_difference(a, b)
    assert method == "exact" and value == pytest.approx(_exact(w_tf, w_torch), rel=1e-12)
    first = fw.save_final_weights(tmp_path / "x.npz", a)
    again = fw.save_final_weights(tmp_path / "y.npz", fw.load_final_weights(first))
    assert first.read_bytes() == again.read_bytes()


def test_large_models_keep_a_projection_whose_ratio_estimates_the_difference(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fw, "MAX_FULL_BYTES", 4_000)
    w_tf = _weights(0)
    w_torch = {k: v + np.float32(0.05) * _weights(1)[k] for k, v in w_tf.items()}
    a, b = fw.compact_weights(w_tf), fw.compact_weights(w_torch)
    assert a.kind == "projection" and a.arrays["projection"].shape == (512,)
    value, method = fw.relative_difference(a, b)
    # 512 directions: each projected norm within ~3 % (1 / sqrt(2 * 512)); the ratio within 10 %
    assert method == "JL estimate" and value == pytest.approx(_exact(w_tf, w_torch), rel=0.1)


def test_kept_differently_is_not_comparable() -> None:
    small = fw.FinalWeights("weights", 3, {"w": np.ones(3, np.float32)})
    projected = fw.FinalWeights("projection", 3, {"projection": np.ones(512, np.float32)})
    value, method = fw.relative_difference(small, projected)
    assert np.isnan(value) and method == "not comparable"
