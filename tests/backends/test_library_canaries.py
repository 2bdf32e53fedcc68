"""Gradient canaries through the libraries' own recipes (``recipe: library``), white-box.

Opacus's stock ``DPOptimizer`` (``make_private``) clips canary rows appended to
``grad_sample``; TF Privacy's ``DPKerasSGDOptimizer`` (through ``model.fit``) clips canary
records with its ``GaussianSumQuery.accumulate_record``. On one step of all 32 examples (one
epoch) with noise 0, the run with canaries minus the stock run without them is exactly the
canaries clipped by the library to C, divided like the examples; the noised sum each reports
at the canaries' coordinates is the applied gradient times the divisor. TF Privacy's
``VectorizedDPKerasSGDOptimizer`` has no entry for a record: a run of it is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from dpcore.architectures import architecture
from dpcore.audit.canary_records import (
    CANARY_NORM_MULTIPLE,
    CanaryRecords,
    canary_records,
    clipped_sum,
)
from dpcore.config import ModelSpec, PerfSpec, RunConfig
from dpcore.errors import ConfigError
from dpcore.pipeline import privacy_plan
from tests.backends.test_recipes_steps import INDICES, _library_config, _tiny_dataset
from tests.backends.train_helpers import FRAMEWORKS, SIDE

LR, CLIP = 1.0, 1.0


class FixedCanaries:
    """A canary source with ``records`` in its first step only, watching their own
    coordinates."""

    def __init__(self, records: list[Any]) -> None:
        self.records = records
        self.steps = 0
        self.reports: list[dict[str, np.ndarray]] = []

    def step_records(self) -> CanaryRecords | None:
        self.steps += 1
        return CanaryRecords.of(self.records) if self.steps == 1 else None

    def coordinates(self) -> dict[str, np.ndarray]:
        out: dict[str, list[int]] = {}
        for r in self.records:
            out.setdefault(r.key, []).append(r.flat)
        return {k: np.asarray(v) for k, v in out.items()}

    def observed(self, values: Mapping[str, np.ndarray]) -> None:
        self.reports.append({k: np.asarray(v) for k, v in values.items()})


def _records() -> tuple[list[Any], dict[str, tuple[int, ...]]]:
    arch = architecture(ModelSpec(name="cnn4"), (SIDE, SIDE, 1), 10)
    shapes = arch.weight_shapes()
    keys = ["fc2.kernel", "fc2.bias", "conv1.kernel", "conv2.bias", "fc1.kernel",
            "conv1.kernel"]
    flats = [7, 3, 100, 5, 900, 101]
    return canary_records(arch, keys, flats, CANARY_NORM_MULTIPLE * CLIP, "l2"), shapes


def _runner(name: str, cfg: RunConfig, jacobian: int | None) -> tuple[Any, Any, dict]:
    framework = FRAMEWORKS[name]
    models = framework.modules()[0]
    model = framework.build(0)
    start = models.get_weights(model)
    data = _tiny_dataset()
    plan = privacy_plan(cfg, len(data.x_train))
    if name == "tf":
        from tfpipe.library import KerasFitRunner
        return KerasFitRunner(model, cfg, data, plan, jacobian), models, start
    from torchpipe.library import OpacusRunner
    return OpacusRunner(model, cfg, data, plan), models, start


@pytest.mark.parametrize(("name", "jacobian"), [("tf", 16), ("tf", 8), ("torch", None)])
def test_a_stock_step_adds_each_canary_clipped_by_the_library(name: str,
                                                              jacobian: int | None) -> None:
    stock = _library_config(name)
    audited = RunConfig.from_dict({**stock.to_dict(), "audit_canaries": {"count": 6}})
    records, shapes = _records()
    updates, canaries = [], FixedCanaries(records)
    for cfg in (stock, audited):
        runner, models, start = _runner(name, cfg, jacobian)
        if cfg is audited:
            runner.use_canaries(canaries)
        runner.train_epoch(1)
        updates.append({k: models.get_weights(runner.model)[k].astype(np.float64) - start[k]
                        for k in start})
        runner.close()
    expected = {k: np.zeros(int(np.prod(s))) for k, s in shapes.items()}
    for key, entries in clipped_sum(records, CLIP, "l2").items():
        for flat, value in entries.items():
            expected[key][flat] += value
    for key in shapes:
        np.testing.assert_allclose(updates[1][key] - updates[0][key],
                                   -LR * expected[key].reshape(shapes[key]) / len(INDICES),
                                   atol=2e-6, err_msg=key)
    assert canaries.steps == 1 and len(canaries.reports) == 1
    for key, flat in canaries.coordinates().items():  # the noised sum: update * B / -lr
        np.testing.assert_allclose(
            canaries.reports[0][key], -updates[1][key].reshape(-1)[flat] * len(INDICES) / LR,
            rtol=1e-4, atol=1e-5, err_msg=key)


def test_the_vectorized_tf_privacy_optimizer_is_refused_with_gradient_canaries() -> None:
    from tfpipe.library import NO_CANARY_ENTRY, library_recipe

    framework = FRAMEWORKS["tf"]
    cfg = RunConfig.from_dict({**_library_config("tf").to_dict(),
                               "audit_canaries": {"count": 6}})
    with pytest.raises(ConfigError) as caught:
        library_recipe(framework.build(0), cfg, PerfSpec(library_jacobian_batch_size=None))
    assert str(caught.value) == NO_CANARY_ENTRY
    assert "VectorizedDPKerasSGDOptimizer" in NO_CANARY_ENTRY
    library_recipe(framework.build(0), cfg, PerfSpec(library_jacobian_batch_size=16))
