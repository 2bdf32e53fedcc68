"""How many models ``verify`` builds, and how often the TF engines trace their steps: the
costs behind ``verify``'s wall time on ResNet-18 (``reports/benchmarks/verify-times.json``).

TF's engines attach nothing to their Keras model (``ENGINES_SHARE_MODELS``), so one
``verify`` builds one model for all its steppers; torch's attach hooks, so each stepper gets
its own. A TF engine traces its update once (its optimizer's variables exist before the
first trace, which would otherwise be traced again)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from compare import api
from dpcore.backend import load_backend

tf = pytest.importorskip("tensorflow")
pytest.importorskip("torch")

CONFIG = {"data": {"name": "digits"}, "model": {"name": "cnn4"},
          "privacy": {"mechanism": "dpsgd-gaussian", "noise_multiplier": 1.0}}


@pytest.mark.parametrize(("backend", "shared"), [("tf", True), ("torch", False)])
def test_verify_builds_one_model_where_the_engines_share_it(
        backend: str, shared: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    code = load_backend(backend)
    assert code.ENGINES_SHARE_MODELS is shared
    built: list[Any] = []
    original = code.build_model

    def counting(*args: Any, **kwargs: Any) -> Any:
        built.append(original(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(code, "build_model", counting)
    report = api.verify(CONFIG, backend, engine="reference")
    assert report.passed, report.failed
    # reference engine: the probe, free, raw, noisy and other-key steppers
    assert len(built) == (1 if shared else 5)


@pytest.mark.parametrize("engine", ["reference", "fast"])
def test_a_tf_engine_traces_its_update_once(engine: str) -> None:
    from tests.backends.train_helpers import TfFramework, chunks_of, config, mechanism

    fw = TfFramework(engine)
    step = fw.engine(fw.build(seed=0), config(noise=1.0, lr=0.5, batch_size=16),
                     mechanism("l2", 1.0, 1.0, 16, noise_multiplier=1.0))
    before = step.get_weights()
    for start in (0, 5):
        step.train_step(chunks_of(np.arange(start, start + 10), 5))
    assert step._apply.experimental_get_tracing_count() == 1
    assert any(not np.array_equal(before[k], v) for k, v in step.get_weights().items())
