"""The epoch loop's hook protocol (dpcore.trainhooks) and its step (dpcore.trainstep), with a
numpy engine: the order the loop calls a hook in, how signals end a run, how the extra
vectors of several hooks add up, and what one logical step hands the engine."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from dpcore.accounting import plan_privacy
from dpcore.config import FactorSpec, PerfSpec, PrivacySpec, RunConfig, TrainSpec
from dpcore.epochlog import TestSet
from dpcore.trainhooks import (
    DivergenceGuard,
    EpochCallbacks,
    LoopHook,
    Signal,
    StepDone,
    epoch_done,
    step_extra,
)
from dpcore.trainloop import run_epochs
from dpcore.trainstep import LogicalSteps

X = np.random.default_rng(0).integers(0, 256, size=(40, 4, 4, 1), dtype=np.uint8)
Y = np.arange(40, dtype=np.int64) % 3


class Engine:
    """Records every ``train_step``; returns the losses it is given (1 per example after)."""

    def __init__(self, losses: Sequence[float] = ()) -> None:
        self.steps: list[dict[str, Any]] = []
        self.losses = list(losses)

    def train_step(self, chunks: Sequence[tuple[np.ndarray, np.ndarray]],
                   divisor: float | None = None,
                   extra: Mapping[str, np.ndarray] | None = None) -> float:
        self.steps.append({"sizes": [len(x) for x, _ in chunks], "divisor": divisor,
                           "extra": extra})
        return self.losses.pop(0) if self.losses else float(sum(len(x) for x, _ in chunks))

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        return np.full((len(x), 3), 1 / 3, np.float32)

    def predict_outputs(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.zeros((len(x), 3), np.float32), self.predict_proba(x)

    def get_weights(self) -> dict[str, np.ndarray]:
        return {"w": np.zeros(2, np.float32)}

    def set_weights(self, weights: Mapping[str, np.ndarray]) -> None:
        pass

    def close(self) -> None:
        pass


class Recorder(LoopHook):
    """Logs each call of the protocol; gives an extra vector and a signal when told to."""

    def __init__(self, log: list[str], name: str, *, extra: float | None = None,
                 stop_after_epoch: int | None = None) -> None:
        self.log, self.name, self.extra, self.stop_after = log, name, extra, stop_after_epoch

    def epoch_started(self, epoch: int, n_epochs: int, steps: int) -> None:
        self.log.append(f"{self.name}:start {epoch}/{n_epochs} ({steps} steps)")

    def step_extra(self, step: int) -> Mapping[str, np.ndarray] | None:
        self.log.append(f"{self.name}:extra {step}")
        return None if self.extra is None else {"w": np.full(2, self.extra, np.float32)}

    def step_done(self, done: StepDone) -> Signal:
        self.log.append(f"{self.name}:step {done.step}")
        return Signal.CONTINUE

    def evaluating(self) -> Any:
        self.log.append(f"{self.name}:evaluating")
        return super().evaluating()

    def epoch_done(self, record: Mapping[str, Any], diverged: bool) -> Signal:
        self.log.append(f"{self.name}:epoch {record['epoch']}{' diverged' if diverged else ''}")
        return Signal.STOP if record["epoch"] == self.stop_after else Signal.CONTINUE

    def training_done(self) -> None:
        self.log.append(f"{self.name}:done")


def config(steps: int = 5, batch_size: int = 10, **factors: Any) -> RunConfig:
    return RunConfig(privacy=PrivacySpec(mechanism="dpsgd-gaussian", noise_multiplier=1.0,
                                         sampling="shuffle" if factors else "poisson"),
                     train=TrainSpec(steps=steps, epochs=None, batch_size=batch_size),
                     factors=FactorSpec(**factors), seed=3)


def loop(cfg: RunConfig, engine: Engine, hooks: Sequence[LoopHook]) -> Any:
    plan = plan_privacy(cfg, len(X))
    steps = LogicalSteps.of_run(cfg, PerfSpec(), plan, X, Y, "image")
    return run_epochs(engine, steps, plan, TestSet(X[:9], Y[:9], "image"), hooks)


def test_the_loop_calls_each_hook_in_order_at_each_point() -> None:
    log: list[str] = []
    out = loop(config(steps=6), Engine(), [Recorder(log, "a"), Recorder(log, "b")])
    assert log[:10] == ["a:start 1/2 (4 steps)", "b:start 1/2 (4 steps)",
                        "a:extra 1", "b:extra 1", "a:step 1", "b:step 1",
                        "a:extra 2", "b:extra 2", "a:step 2", "b:step 2"]
    assert log[18:22] == ["a:evaluating", "b:evaluating", "a:epoch 1", "b:epoch 1"]
    assert log[-4:] == ["a:epoch 2", "b:epoch 2", "a:done", "b:done"]
    assert out.status == "finished" and out.steps_completed == 6 and not out.stopped_early


def test_a_stop_ends_the_run_after_that_epoch() -> None:
    log: list[str] = []
    out = loop(config(steps=12), Engine(), [Recorder(log, "a", stop_after_epoch=1)])
    assert out.status == "finished" and out.stopped_early and out.steps_completed == 4
    assert [r["epoch"] for r in out.history] == [1] and log[-1] == "a:done"


def test_a_diverged_step_ends_the_epoch_unevaluated() -> None:
    log: list[str] = []
    out = loop(config(steps=8), Engine([2.0, math.inf, 1.0]),
               [DivergenceGuard(), Recorder(log, "a")])
    assert out.status == "diverged" and out.diverged_at_step == 2 and out.test_proba is None
    assert math.isnan(out.history[-1]["test_loss"]) and "a:evaluating" not in log
    assert log[-2:] == ["a:epoch 1 diverged", "a:done"]


def test_the_extra_vectors_of_the_hooks_add_up_in_order() -> None:
    engine = Engine()
    loop(config(steps=2), engine, [Recorder([], "a", extra=1.0), Recorder([], "b"),
                                   Recorder([], "c", extra=0.5)])
    for step in engine.steps:
        np.testing.assert_array_equal(step["extra"]["w"], [1.5, 1.5])
    loop(config(steps=2), engine := Engine(), [Recorder([], "a")])
    assert [s["extra"] for s in engine.steps] == [None, None]  # passed only when given
    assert step_extra([], 1) is None


def test_divergence_guard_and_callbacks_after_an_epoch() -> None:
    record = {"epoch": 1, "loss": math.nan, "test_loss": 0.5}
    assert DivergenceGuard().epoch_done(record, False) is Signal.CONTINUE
    assert DivergenceGuard(epoch_loss=True).epoch_done(record, False) is Signal.DIVERGED
    nan_test = {**record, "loss": 1.0, "test_loss": math.nan}
    assert DivergenceGuard().epoch_done(nan_test, False) is Signal.DIVERGED
    seen: list[dict[str, Any]] = []

    def stop(r: dict[str, Any]) -> bool:
        seen.append(r)
        return True

    def keep(r: dict[str, Any]) -> None:
        seen.append(r)

    callbacks = EpochCallbacks([stop, keep])
    # a later hook sees the divergence an earlier one signalled: the callbacks are skipped
    assert epoch_done([DivergenceGuard(), callbacks], nan_test, False) == (True, False)
    assert seen == []
    assert epoch_done([DivergenceGuard(), callbacks], {**nan_test, "test_loss": 0.1},
                      False) == (False, True)
    assert len(seen) == 2 and seen[0] is not seen[1]  # every callback, each with its copy


@pytest.mark.parametrize(("normalisation", "divisor"), [("expected", None), ("actual", 10.0)])
def test_a_logical_step_hands_the_engine_its_chunks_and_divisor(normalisation: str,
                                                               divisor: float | None) -> None:
    cfg = config(steps=1, normalisation=normalisation)
    engine = Engine()
    steps = LogicalSteps.of_run(cfg, PerfSpec(physical_batch_size=4),
                                plan_privacy(cfg, len(X)), X, Y, "image")
    loss, n = steps.take(engine, 1, lambda step: None)
    assert (loss, n) == (10.0, 10)
    assert engine.steps == [{"sizes": [4, 4, 2], "divisor": divisor, "extra": None}]


def test_a_logical_step_keeps_whole_microbatches() -> None:
    cfg = config(steps=1, batch_size=12, microbatch_size=4)
    steps = LogicalSteps.of_run(cfg, PerfSpec(physical_batch_size=6),
                                plan_privacy(cfg, len(X)), X, Y, "image")
    assert steps.chunk_size == 4  # 6 rounded down to whole microbatches of 4
    steps.batches = iter([np.arange(11)])  # a partial last batch: 11 = 2 * 4 + 3
    engine = Engine()
    assert steps.take(engine, 1, lambda step: None) == (8.0, 8)
    assert engine.steps[0]["sizes"] == [4, 4]
