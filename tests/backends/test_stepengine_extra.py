"""The audit's canary hook: one contract in both backends' DP steps, every engine.

``train_step(chunks, extra=v)`` must add the neutral-layout vector ``v`` to the clipped sum
before the noise, as one more already-clipped record: the update then differs from the same
step without it by exactly ``-lr * v / B`` (SGD, no momentum), with the same noise draw.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.backends.train_helpers import (
    TfFramework,
    TorchFramework,
    chunks_of,
    config,
    mechanism,
)

FRAMEWORKS = [TfFramework("reference"), TfFramework("fast"), TorchFramework("reference"),
              TorchFramework("fast")]
B = 16


def _step(fw: Any, extra: dict[str, np.ndarray] | None, noise: float) -> dict[str, np.ndarray]:
    cfg = config(noise=noise, lr=0.5, batch_size=B)
    model = fw.build(seed=0)
    engine = fw.engine(model, cfg, mechanism("l2", 1.0, noise, B, noise_multiplier=noise))
    try:
        engine.train_step(chunks_of(np.arange(12), 5), extra=extra)
        return engine.get_weights()
    finally:
        engine.close()


@pytest.mark.parametrize("fw", FRAMEWORKS, ids=lambda f: f"{f.name}-{f.engine_name}")
def test_extra_is_added_to_the_clipped_sum_before_the_noise(fw: Any) -> None:
    noise = 1.0  # the same seeded noise draw with and without the extra record
    base = _step(fw, None, noise)
    key = sorted(base)[0]
    vector = np.zeros(base[key].shape, np.float32)
    vector.reshape(-1)[[0, 3]] = [1.0, -2.0]
    second = sorted(base)[-1]
    other = np.zeros(base[second].shape, np.float32)
    other.reshape(-1)[-1] = 4.0
    hooked = _step(fw, {key: vector, second: other}, noise)
    expected = {k: np.zeros_like(v) for k, v in base.items()}
    expected[key] = -0.5 * vector / B
    expected[second] = -0.5 * other / B
    for k in base:
        np.testing.assert_allclose(hooked[k] - base[k], expected[k], atol=2e-6, err_msg=k)
