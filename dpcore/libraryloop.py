"""The loop of ``recipe: library``: a library's own training loop, one epoch at a time, with
the bench's evaluation, history and timing around it (the same records as the harmonised
loop, :mod:`dpcore.epochlog`)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from dpcore.accounting import PrivacyPlan
from dpcore.epochlog import EpochLog, TestSet, epsilon_spent, evaluate
from dpcore.errors import ConfigError
from dpcore.trainhooks import CanarySource, DivergenceGuard, EpochCallbacks, epoch_done

if TYPE_CHECKING:
    from dpcore.data.dataset import Dataset
    from dpcore.epochlog import EpochCallback, TrainingOutcome


class LibraryRunner(Protocol):
    """A library's own training loop, one epoch at a time (``recipe: library``).

    The backend builds it from the library's public API (``model.fit`` / an Opacus
    ``make_private`` loop); the driver below owns evaluation, history and timing, so both
    recipes report through the same metrics contract.
    """

    steps_per_epoch: int
    sampling_rate: float

    def train_epoch(self, epoch: int) -> tuple[float, int]:
        """Run epoch ``epoch`` (1-based) the library's way; returns (summed loss, examples)."""

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        """Softmax probabilities [N, K] of one batch of model inputs."""

    def predict_outputs(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(logits, softmax probabilities) of one batch from one forward pass (as
        :meth:`dpcore.stepengine.StepEngine.predict_outputs`)."""

    def get_weights(self) -> dict[str, np.ndarray]:
        """The model's current weights in the neutral layout."""

    def own_epsilon(self, plan: PrivacyPlan, steps: int) -> dict[str, float | None]:
        """The library's own epsilon of the ``steps`` steps it took under ``plan``'s noise
        and delta, keyed by the accountant's name (``{}`` where it has none)."""

    def close(self) -> None:
        """Release what the runner attached to the model (hooks); the model keeps its
        weights. Called once training ends, however it ends."""


class CanaryRunner(LibraryRunner, Protocol):
    """A :class:`LibraryRunner` whose library step takes the audit's gradient canaries
    (``audit_canaries.kind: gradient`` under ``recipe: library``): it asks ``canaries`` for
    each logical step's records (:meth:`~dpcore.trainhooks.CanarySource.step_records`),
    puts them through the library's own clipping with the step's examples, and reports the
    step's noised sum at :meth:`~dpcore.trainhooks.CanarySource.coordinates` to
    :meth:`~dpcore.trainhooks.CanarySource.observed`.

    Attributes:
        sampling: how the library samples its batches, ``poisson`` or ``shuffle`` (the
            canaries are sampled the same way, at ``sampling_rate``, ``steps_per_epoch``
            steps an epoch).
    """

    sampling: str

    def use_canaries(self, canaries: CanarySource) -> None:
        """Take ``canaries`` in every step from now on (before the first epoch)."""


def canary_runner(runner: LibraryRunner, trainer: str) -> CanaryRunner:
    """``runner`` as a :class:`CanaryRunner`.

    Raises:
        ConfigError: a runner whose library step has no entry for gradient canaries.
    """
    if not (hasattr(runner, "use_canaries") and hasattr(runner, "sampling")):
        raise ConfigError(
            f"audit_canaries.kind='gradient' has no entry into {trainer}; valid there: "
            "audit_canaries.kind=input")
    return runner  # type: ignore[return-value]


@dataclass(frozen=True)
class LibraryRecipe:
    """How a backend trains under ``recipe: library`` (its ``library_recipe`` hook).

    Attributes:
        trainer: the library class and API that trains, as the result's ``recipe`` records
            it (e.g. ``"DPKerasSGDOptimizer via model.fit"``).
        details: what the result's ``perf`` records of the trainer (beside ``engine_used``
            and the device).
        make_runner: builds the :class:`LibraryRunner` from the privacy plan and the data set.
    """

    trainer: str
    details: Mapping[str, Any]
    make_runner: Callable[[PrivacyPlan, Dataset], LibraryRunner]


def library_epochs(plan: PrivacyPlan) -> int:
    """Whole library epochs a ``library`` run trains: ``ceil(train.epochs)`` (or the epochs
    that ``train.steps`` amount to); a library loop has no fractional epoch."""
    return max(1, math.ceil(plan.batches.steps / plan.batches.steps_per_epoch))


def run_library_training(
    dataset: Dataset, plan: PrivacyPlan, runner: LibraryRunner, *, n_epochs: int,
    callbacks: Sequence[EpochCallback] = (),
) -> TrainingOutcome:
    """Train with a library's own loop for ``n_epochs`` epochs, evaluating after each.

    History records have the keys of :mod:`dpcore.epochlog`; ``epsilon_spent`` is the shared
    accountant's epsilon of the steps the library took at the library's sampling rate. A
    non-finite mean training loss or test loss of an epoch ends the run as ``diverged``
    (after that epoch's evaluation); a callback's True ends it after the epoch.
    """
    log = EpochLog()
    hooks = [DivergenceGuard(epoch_loss=True), EpochCallbacks(callbacks)]
    test = TestSet(dataset.x_test, dataset.y_test, dataset.task)
    as_run = dataclass_replace_rate(plan, runner.sampling_rate)
    step, diverged_at, stopped = 0, None, False
    last_proba: np.ndarray | None = None
    last_logits: np.ndarray | None = None
    for epoch in range(1, n_epochs + 1):
        start = time.perf_counter()
        loss_sum, examples = runner.train_epoch(epoch)
        seconds = time.perf_counter() - start
        step += runner.steps_per_epoch
        evaluation = evaluate(runner.predict_outputs, test)
        last_proba, last_logits = evaluation.proba, evaluation.logits
        record = {"epoch": epoch, "step": step,
                  "loss": loss_sum / examples if examples else math.nan,
                  "examples": examples, "seconds": seconds,
                  "epsilon_spent": epsilon_spent(as_run, step), **evaluation.record}
        log.append(record)
        diverged, stop = epoch_done(hooks, record, diverged=False)
        if diverged:
            diverged_at = step
            break
        if stop:
            stopped = epoch < n_epochs
            break
    return log.outcome(status="finished" if diverged_at is None else "diverged", steps=step,
                       weights=runner.get_weights(), test_proba=last_proba,
                       test_logits=last_logits, stopped_early=stopped,
                       diverged_at_step=diverged_at)


def dataclass_replace_rate(plan: PrivacyPlan, sampling_rate: float) -> PrivacyPlan:
    """``plan`` with its batch plan's sampling rate replaced (the rate a library ran at)."""
    return replace(plan, batches=replace(plan.batches, sampling_rate=sampling_rate))
