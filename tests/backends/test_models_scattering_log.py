"""A gradient through the TF scattering layer does not flood the log with TensorFlow's
complex-to-real cast warning (the exact gradient of kymatio's real-to-complex cast); other
TensorFlow warnings still reach the log."""

from __future__ import annotations

import logging

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
pytest.importorskip("kymatio")


def test_a_gradient_through_the_scattering_logs_no_cast_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    from tfpipe.models import COMPLEX_CAST_WARNING, Scattering

    layer = Scattering(J=2, L=8)
    x = tf.constant(np.random.default_rng(0).random((2, 16, 16, 1), dtype=np.float32))
    with caplog.at_level(logging.WARNING, logger="tensorflow"):
        with tf.GradientTape() as tape:
            tape.watch(x)
            total = tf.reduce_sum(layer(x))
        grad = tape.gradient(total, x)
        tf.get_logger().warning("another TensorFlow warning")
    assert grad is not None and np.isfinite(grad.numpy()).all()
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if m.startswith(COMPLEX_CAST_WARNING)]
    assert "another TensorFlow warning" in messages
