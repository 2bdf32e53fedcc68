"""Reproducibility: the same config and seed, in the same process on the same machine, give the
same metrics and the same weights, bit for bit, in each backend.

What makes it hold: one seeded sampler (``dpcore.sampling``) feeds both runs the same index
batches; the initial weights are ``dpcore.weights.init_weights(seed)``; the DP noise comes
from a generator keyed by ``dpcore.noise_key.noise_key`` (``noise_key: seed``: from the seed
and the config hash; a ``secret`` key is not reproducible, by design); TF runs with op determinism
(``tf.config.experimental.enable_op_determinism``), torch with
``torch.use_deterministic_algorithms(True)`` (both set by ``perf.deterministic``, the
default). The comparison is exact (``np.array_equal``), not within a tolerance: the two runs
execute the same kernels in the same order, so float non-associativity does not enter.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
import pytest

from dpcore.config import PerfSpec
from tests.backends.train_helpers import config, digits16

#: History fields that are wall-clock measurements, not results.
TIMING_KEYS = ("seconds", "eval_seconds")


def _outcome(backend: str) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, np.ndarray]]:
    train = importlib.import_module(f"{backend}pipe.train" if backend == "tf" else
                                    "torchpipe.train")
    cfg = config(mechanism="dpsgd-gaussian", noise=1.0, clip=1.0, lr=0.5, momentum=0.9,
                 ema=0.9, epochs=2.0, batch_size=50, seed=7)
    dataset = digits16(n_train=200, n_test=60)
    trained = train.train(cfg, dataset, PerfSpec(physical_batch_size=16), progress=False)
    result = trained.result
    assert result.status == "finished"
    history = [{k: v for k, v in record.items() if k not in TIMING_KEYS}
               for record in result.history]
    return result.metrics, history, trained.weights


@pytest.mark.parametrize("backend", ["tf", "torch"])
def test_same_config_and_seed_give_identical_metrics_and_weights(backend: str) -> None:
    pytest.importorskip("tensorflow" if backend == "tf" else "torch")
    metrics_a, history_a, weights_a = _outcome(backend)
    metrics_b, history_b, weights_b = _outcome(backend)
    assert history_a == history_b  # per-epoch loss, test loss/accuracy, epsilon spent
    assert metrics_a == metrics_b  # accuracy, AUC, per-class figures...
    assert sorted(weights_a) == sorted(weights_b)
    for name in weights_a:
        assert np.array_equal(weights_a[name], weights_b[name]), name
    # the run really trained (a constant model would be trivially reproducible)
    assert history_a[-1]["step"] == 8 and np.isfinite(history_a[-1]["loss"])
    assert len({round(r["loss"], 6) for r in history_a}) == len(history_a)
