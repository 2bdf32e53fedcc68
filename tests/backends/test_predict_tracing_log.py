"""Explaining several Keras models in a row (a report's montages) does not log TensorFlow's
"triggered tf.function retracing" warning: each model's probability function is traced once."""

from __future__ import annotations

import logging

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")


def test_one_trace_per_model_logs_no_retracing_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    from tfpipe.predict import probability_function

    x = np.random.default_rng(0).random((3, 4), dtype=np.float32)
    with caplog.at_level(logging.WARNING, logger="tensorflow"):
        outputs = []
        for seed in range(7):  # TF warns from the 5th traced call of one code object
            tf.keras.utils.set_random_seed(seed)
            model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(2)])
            proba = probability_function(model)
            outputs.append(proba(x))
            outputs.append(proba(x[:2]))  # another batch size: the same trace
    assert all(o.shape[1] == 2 and np.allclose(o.sum(axis=1), 1.0, atol=1e-6) for o in outputs)
    retracing = [r.getMessage() for r in caplog.records if "retracing" in r.getMessage()]
    assert not retracing, retracing[0]
