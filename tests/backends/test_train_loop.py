"""The framework-neutral driver (dpcore.trainloop, dpcore.pipeline, dpcore.runrecord) with a
fake numpy step engine: chunking, empty batches, history, EMA, divergence, callbacks."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from dpcore.accounting import plan_privacy
from dpcore.config import DataSpec, PerfSpec, PrivacySpec, RunConfig, TrainSpec
from dpcore.data.dataset import Dataset
from dpcore.pipeline import fit, prepare_dataset
from dpcore.results import validate_result_dict
from dpcore.sampling import batches_for
from dpcore.trainloop import (
    WeightEma,
    ema_decay_at,
    epsilon_spent,
    run_training,
    step_mechanism,
)


def tiny_dataset(n: int = 40) -> Dataset:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(n, 4, 4, 1), dtype=np.uint8)
    y = np.arange(n, dtype=np.int64) % 3
    return Dataset("tiny", "image", x, y, x[:9], y[:9], ("a", "b", "c"))


class FakeEngine:
    """Records what the driver feeds it; "training" adds the chunk count to one weight."""

    def __init__(self, losses: Sequence[float] = ()) -> None:
        self.weights = {"w": np.zeros(3, np.float32)}
        self.calls: list[list[int]] = []
        self.dtypes: set[Any] = set()
        self.losses = list(losses)
        self.closed = 0

    def train_step(self, chunks: Sequence[tuple[np.ndarray, np.ndarray]],
                   divisor: float | None = None) -> float:
        self.calls.append([len(x) for x, _ in chunks])
        self.dtypes.update(x.dtype for x, _ in chunks)
        self.weights["w"] = self.weights["w"] + 1.0
        if self.losses:
            return self.losses.pop(0)
        return float(sum(len(x) for x, _ in chunks))  # loss 1 per example

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        p = np.full((len(x), 3), 0.2, np.float32)
        p[:, int(self.weights["w"][0]) % 3] = 0.6
        return p

    def predict_outputs(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        proba = self.predict_proba(x)  # logits whose softmax is proba
        return np.log(proba), proba

    def get_weights(self) -> dict[str, np.ndarray]:
        return {k: v.copy() for k, v in self.weights.items()}

    def set_weights(self, weights: Mapping[str, np.ndarray]) -> None:
        self.weights = {k: np.asarray(v, np.float32).copy() for k, v in weights.items()}

    def close(self) -> None:
        self.closed += 1


def cfg(**train: Any) -> RunConfig:
    train.setdefault("steps", 5)
    train.setdefault("epochs", None)
    train.setdefault("batch_size", 10)
    return RunConfig(privacy=PrivacySpec(mechanism="dpsgd-gaussian", noise_multiplier=1.0),
                     train=TrainSpec(**train), seed=1)


def test_batches_are_chunked_and_empty_ones_passed_as_no_chunks() -> None:
    config = cfg(steps=30, batch_size=2)
    ds = tiny_dataset()
    plan = plan_privacy(config, len(ds.x_train))
    engine = FakeEngine()
    out = run_training(config, ds, PerfSpec(physical_batch_size=3), plan, engine,
                       progress=False)
    expected = [len(b) for b in batches_for(plan.batches, "poisson", config.seed)]
    assert 0 in expected
    assert [sum(c) for c in engine.calls] == expected
    assert all(max(c, default=0) <= 3 for c in engine.calls)
    assert [] in engine.calls  # the empty batch is still a step
    assert engine.dtypes == {np.dtype(np.float32)}  # uint8 images were scaled to [0, 1]
    assert out.steps_completed == 30 and out.examples_seen == sum(expected)


def test_history_records_each_epoch() -> None:
    config = cfg(steps=None, epochs=2.5, batch_size=10)
    ds = tiny_dataset()
    plan = plan_privacy(config, len(ds.x_train))
    out = run_training(config, ds, PerfSpec(), plan, FakeEngine(), progress=False)
    assert [h["step"] for h in out.history] == [4, 8, 10]  # 4 steps per epoch, last partial
    for h in out.history:
        assert h["loss"] == pytest.approx(1.0)
        assert h["epsilon_spent"] == pytest.approx(epsilon_spent(plan, h["step"]))
        assert {"test_accuracy", "test_loss", "seconds", "examples", "eval_seconds"} <= set(h)
    assert out.history[-1]["epsilon_spent"] == pytest.approx(plan.epsilon_rdp)
    assert out.status == "finished" and out.test_proba is not None


def test_nan_loss_marks_the_run_diverged() -> None:
    config = cfg(steps=5)
    ds = tiny_dataset()
    out = run_training(config, ds, PerfSpec(), plan_privacy(config, 40),
                       FakeEngine([3.0, math.nan, 1.0]), progress=False)
    assert out.status == "diverged" and out.diverged_at_step == 2 and out.test_proba is None
    assert math.isnan(out.history[-1]["test_accuracy"])


def test_a_callback_can_stop_training() -> None:
    config = cfg(steps=None, epochs=3, batch_size=10)
    seen: list[int] = []

    def stop_after_first(record: dict[str, Any]) -> bool:
        seen.append(record["epoch"])
        return True

    out = run_training(config, tiny_dataset(), PerfSpec(), plan_privacy(config, 40),
                       FakeEngine(), progress=False, callbacks=[stop_after_first])
    assert seen == [1] and out.stopped_early and out.steps_completed == 4


def test_ema_schedule_and_evaluation_weights() -> None:
    assert ema_decay_at(1, 0.999) == pytest.approx(2 / 11)
    assert ema_decay_at(10_000, 0.9) == 0.9
    ema = WeightEma({"w": np.zeros(2)}, 0.5)
    ema.update({"w": np.full(2, 4.0)}, 1)  # d = min(0.5, 2/11)
    np.testing.assert_allclose(ema.weights()["w"], 4.0 * (1 - 2 / 11))
    config = cfg(steps=3, ema_decay=0.5)
    engine = FakeEngine()
    out = run_training(config, tiny_dataset(), PerfSpec(), plan_privacy(config, 40), engine,
                       progress=False)
    # raw weights after steps 1..3 are 1, 2, 3; the EMA starts at 0
    expected = 0.0
    for step, w in zip((1, 2, 3), (1.0, 2.0, 3.0), strict=True):
        d = ema_decay_at(step, 0.5)
        expected = d * expected + (1 - d) * w
    np.testing.assert_allclose(out.weights["w"], expected, rtol=1e-6)
    np.testing.assert_allclose(engine.weights["w"], expected, rtol=1e-6)


def test_step_mechanism_of_each_privacy_setting() -> None:
    base = cfg()
    plan = plan_privacy(base, 40)
    gauss = step_mechanism(base, plan)
    assert (gauss.clip_kind, gauss.noise_kind, gauss.noise_scale) == ("l2", "gaussian", 1.0)
    lap_cfg = base.replace(privacy=PrivacySpec(mechanism="dpsgd-laplace", noise_multiplier=2.0,
                                               max_grad_norm=0.5))
    lap = step_mechanism(lap_cfg, plan_privacy(lap_cfg, 40))
    assert (lap.clip_kind, lap.noise_kind, lap.noise_scale) == ("l1", "laplace", 1.0)
    none_cfg = base.replace(privacy=PrivacySpec())
    plain = step_mechanism(none_cfg, plan_privacy(none_cfg, 40))
    assert not plain.private and plain.noise_scale == 0 and plain.expected_batch_size == 10


def test_fit_builds_a_schema_valid_result() -> None:
    config = cfg(steps=4)
    ds = tiny_dataset()
    no_layers = SimpleNamespace(layers=[])  # the fake engine holds the weights itself
    engine = FakeEngine()
    trained = fit(config, ds, PerfSpec(), backend="torch", model=no_layers,
                  make_engine=lambda plan, mech: engine,
                  library_epsilon=lambda plan: {"opacus_rdp": 1.0}, progress=False)
    assert engine.closed == 1
    raw = trained.result.to_dict()
    validate_result_dict(raw)
    assert raw["privacy"]["library_epsilon"] == {"opacus_rdp": 1.0}
    assert raw["privacy"]["steps_completed"] == 4
    assert raw["dataset"]["fingerprint"] == ds.fingerprint
    assert raw["metrics"]["accuracy"] == pytest.approx(raw["history"][-1]["test_accuracy"])
    assert raw["timing"]["examples_per_second"] > 0


def test_prepare_dataset_loads_and_privatises(tmp_path: Any, monkeypatch: Any) -> None:
    monkeypatch.setenv("DPCOMPARE_CACHE_DIR", str(tmp_path))
    plain = RunConfig(data=DataSpec(name="digits"))
    ds = prepare_dataset(plain)
    assert ds.x_train.dtype == np.uint8 and len(ds.x_train) == 1437
    ldp = RunConfig(data=DataSpec(name="digits", ldp_mechanism="laplace",
                                  ldp_params={"scale": 1.0}),
                    privacy=PrivacySpec(mechanism="ldp"))
    noised = prepare_dataset(ldp)
    assert noised.x_train.dtype == np.float32
    assert noised.ldp is not None and noised.ldp.mechanism == "laplace"
    assert not np.allclose(noised.x_train, ds.x_train / 255.0)


def test_fit_closes_the_engine_when_training_raises() -> None:
    class BoomError(Exception):
        pass

    def explode(record: dict[str, Any]) -> bool:
        raise BoomError

    engine = FakeEngine()
    with pytest.raises(BoomError):
        fit(cfg(steps=4), tiny_dataset(), PerfSpec(), backend="torch",
            model=SimpleNamespace(layers=[]), make_engine=lambda plan, mech: engine,
            library_epsilon=lambda plan: {}, progress=False, callbacks=[explode])
    assert engine.closed == 1
