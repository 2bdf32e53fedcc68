"""What both training loops (:mod:`dpcore.trainloop`, :mod:`dpcore.libraryloop`) measure per
epoch and return: the test evaluation, the history records, the timings and the
:class:`TrainingOutcome`.

A history record has the keys ``{"epoch", "step", "loss" (mean train cross-entropy over the
epoch's examples, nats), "examples" (training examples seen in the epoch), "seconds"
(training time of the epoch), "epsilon_spent" (shared accountant after ``step`` steps),
"test_loss", "test_accuracy" (fraction), "eval_seconds"}``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpcore.accounting import PrivacyPlan, dpsgd_event, epsilon_pld, epsilon_rdp
from dpcore.mechanisms import get_mechanism
from dpcore.memory import PeakMemory, PeakMemoryWindow
from dpcore.predicting import predict_outputs_in_batches, test_loss_and_accuracy

#: Called after every epoch with a copy of that epoch's history record; returning True stops
#: training.
EpochCallback = Callable[[dict[str, Any]], bool | None]


def epsilon_spent(plan: PrivacyPlan, steps: int) -> float | None:
    """Epsilon of the first ``steps`` steps by the shared accountant.

    The mechanism's calibration accountant: RDP for Gaussian DP-SGD (as the plan's
    calibration), PLD for Laplace (RDP has no subsampled Laplace bound); ``inf`` for a
    non-private run and ``None`` for local DP (stated by the LDP layer) or before the first
    step.
    """
    known = get_mechanism(plan.mechanism)
    if known.non_private:
        return math.inf
    if not known.noises_gradients or steps < 1:
        return None
    event = dpsgd_event(plan.mechanism, plan.noise_multiplier, plan.batches.sampling_rate, steps)
    if known.calibration_accountant == "pld":
        return epsilon_pld(event, plan.delta)
    return epsilon_rdp(event, plan.delta)


@dataclass(frozen=True)
class TestSet:
    """The inputs an epoch is evaluated on (images, cached features or token ids) and their
    labels."""

    __test__ = False  # not a pytest test class

    x: np.ndarray
    y: np.ndarray
    task: str


@dataclass(frozen=True)
class TestEvaluation:
    """One evaluation of the test set: logits and their softmax probabilities (one forward
    pass), mean cross-entropy (nats), top-1 accuracy (fraction) and the wall-clock seconds it
    took."""

    __test__ = False  # not a pytest test class

    logits: np.ndarray
    proba: np.ndarray
    loss: float
    accuracy: float
    seconds: float

    @property
    def record(self) -> dict[str, float]:
        """The history entries of this evaluation."""
        return {"test_loss": self.loss, "test_accuracy": self.accuracy,
                "eval_seconds": self.seconds}


def evaluate(predict: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]], test: TestSet
             ) -> TestEvaluation:
    """``predict`` (an engine's or runner's ``predict_outputs``: logits and probabilities of
    a batch) over the test set in batches
    (:func:`dpcore.predicting.predict_outputs_in_batches`), scored by
    :func:`dpcore.predicting.test_loss_and_accuracy` on the probabilities."""
    start = time.perf_counter()
    logits, proba = predict_outputs_in_batches(predict, test.x, test.task)
    loss, accuracy = test_loss_and_accuracy(proba, test.y)
    return TestEvaluation(logits, proba, loss, accuracy, time.perf_counter() - start)


@dataclass
class TrainingOutcome:
    """What a loop produced; :mod:`dpcore.runrecord` turns it into a RunResult.

    Attributes:
        status: ``finished`` or ``diverged``.
        history: one record per epoch (keys: this module's docstring).
        steps_completed: optimizer steps taken.
        examples_seen: training examples processed (sum of actual batch sizes).
        epoch_seconds: wall-clock training seconds of each epoch (evaluation excluded).
        eval_seconds: wall-clock seconds of each epoch's test evaluation.
        total_seconds: wall-clock seconds of the whole loop.
        test_proba: final test probabilities (evaluation weights), ``None`` if diverged.
        test_logits: the logits ``test_proba`` is the softmax of (same forward pass), ``None``
            if diverged.
        weights: the final evaluation weights (EMA when enabled), neutral layout.
        stopped_early: True if a callback stopped training.
        diverged_at_step: the step whose loss was NaN/inf, if any.
        peak_memory: peak resident set size of the loop (:mod:`dpcore.memory`).
    """

    status: str
    history: list[dict[str, Any]]
    steps_completed: int
    examples_seen: int
    epoch_seconds: list[float]
    eval_seconds: list[float]
    total_seconds: float
    test_proba: np.ndarray | None
    weights: dict[str, np.ndarray]
    stopped_early: bool = False
    diverged_at_step: int | None = None
    peak_memory: PeakMemory | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    test_logits: np.ndarray | None = None

    @property
    def examples_per_second(self) -> float | None:
        """Training throughput over the epochs' training time (evaluation excluded)."""
        seconds = sum(self.epoch_seconds)
        return self.examples_seen / seconds if seconds > 0 else None


class EpochLog:
    """The history, timings and peak memory of one loop, from the moment it is made."""

    def __init__(self) -> None:
        self.history: list[dict[str, Any]] = []
        self.examples_seen = 0
        self._memory = PeakMemoryWindow()
        self._start = time.perf_counter()

    def append(self, record: dict[str, Any]) -> None:
        """Add one epoch's history record (keys: this module's docstring)."""
        self.history.append(record)
        self.examples_seen += int(record["examples"])

    def outcome(self, *, status: str, steps: int, weights: dict[str, np.ndarray],
                test_proba: np.ndarray | None, stopped_early: bool,
                diverged_at_step: int | None, test_logits: np.ndarray | None = None
                ) -> TrainingOutcome:
        """The :class:`TrainingOutcome` of the loop, ended now; ``test_proba`` and
        ``test_logits`` are kept only for a finished run."""
        return TrainingOutcome(
            status=status, history=self.history, steps_completed=steps,
            examples_seen=self.examples_seen,
            epoch_seconds=[r["seconds"] for r in self.history],
            eval_seconds=[r["eval_seconds"] for r in self.history],
            total_seconds=time.perf_counter() - self._start,
            test_proba=test_proba if status == "finished" else None,
            test_logits=test_logits if status == "finished" else None,
            weights=weights, stopped_early=stopped_early, diverged_at_step=diverged_at_step,
            peak_memory=self._memory.peak(),
        )
