"""The hooks of the epoch loop (:func:`dpcore.trainloop.run_epochs`): one :class:`LoopHook`
per concern that is not the step itself.

* :class:`DivergenceGuard`: a NaN/inf loss stops the run as ``diverged``;
* :class:`WeightAveraging`: the EMA of the weights (``train.ema_decay``), which the model holds
  while it is evaluated and after training;
* :class:`CanaryGradients`: the audit's gradient canaries, handed to each step as per-example
  records the engine clips with its examples (the engine's ``canaries``,
  :func:`step_canaries`), and the engine's report of the noised sum at their coordinates
  after each step;
* :class:`SharedNoise`: the shared noise, added to a step's clipped sum before the noise (the
  engine's ``extra``, :func:`step_extra`);
* :class:`ProgressBar`: a tqdm bar per epoch, on a terminal only;
* :class:`EpochCallbacks`: the caller's per-epoch callbacks, which may stop training.

The loop calls every hook, in list order, at each point of the protocol; a hook overrides the
methods it needs (the others do nothing). A hook never changes the batches or the step; the
signals it returns are the only way it steers the loop.
"""

from __future__ import annotations

import enum
import math
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from tqdm.auto import tqdm

from dpcore.audit.canary_records import CanaryRecords
from dpcore.ema import WeightEma
from dpcore.epochlog import EpochCallback
from dpcore.stepengine import Neutral, StepEngine, add_neutral


class Signal(enum.Enum):
    """What a hook tells the loop after a step or an epoch."""

    CONTINUE = "continue"
    #: stop after this epoch (a callback asked; the run is ``finished``)
    STOP = "stop"
    #: the loss became NaN/inf: stop now (the run is ``diverged``)
    DIVERGED = "diverged"


@dataclass(frozen=True)
class StepDone:
    """One optimizer step, as the hooks see it after it was taken.

    Attributes:
        step: optimizer steps taken so far (1-based number of this one).
        loss: the batch's summed cross-entropy (nats).
        examples: the batch's number of examples.
        epoch_loss: summed cross-entropy of the epoch so far (nats).
        epoch_examples: examples of the epoch so far.
    """

    step: int
    loss: float
    examples: int
    epoch_loss: float
    epoch_examples: int


class LoopHook:
    """One concern of the epoch loop; every method does nothing unless overridden."""

    def epoch_started(self, epoch: int, n_epochs: int, steps: int) -> None:
        """Epoch ``epoch`` (1-based, of ``n_epochs``) starts; it will take ``steps`` steps."""

    def step_extra(self, step: int) -> Mapping[str, np.ndarray] | None:
        """This hook's part of step ``step``'s extra vector (neutral layout), or None.
        Called exactly once per step, before it is taken."""
        return None

    def step_canaries(self, step: int) -> CanaryRecords | None:
        """The audit's canary records of step ``step``, or None (at most one hook gives
        them). Called exactly once per step, before it is taken."""
        return None

    def step_done(self, done: StepDone) -> Signal:
        """After each optimizer step."""
        return Signal.CONTINUE

    def evaluating(self) -> AbstractContextManager[None]:
        """Entered around each test evaluation (e.g. to swap in the evaluation weights)."""
        return nullcontext()

    def epoch_done(self, record: Mapping[str, Any], diverged: bool) -> Signal:
        """After each epoch, with its history record (read only) and whether the run has
        diverged (by an earlier hook, or in a step of this epoch)."""
        return Signal.CONTINUE

    def training_done(self) -> None:
        """After the last epoch, before the final weights are read."""


def step_extra(hooks: Sequence[LoopHook], step: int) -> Neutral | None:
    """The extra vector of step ``step``: the key-wise sum of the hooks' parts, in hook order
    (:func:`dpcore.stepengine.add_neutral`), or None when no hook gives one."""
    extra: Neutral | None = None
    for hook in hooks:
        part = hook.step_extra(step)
        if part is not None:
            extra = add_neutral(extra, part)
    return extra


def step_canaries(hooks: Sequence[LoopHook], step: int) -> CanaryRecords | None:
    """The canary records of step ``step``: the one hook's that gives them, or None."""
    out = None
    for hook in hooks:
        part = hook.step_canaries(step)
        if part is not None:
            if out is not None:
                raise ValueError("two loop hooks gave canary records for one step")
            out = part
    return out


def epoch_done(hooks: Sequence[LoopHook], record: Mapping[str, Any], diverged: bool
               ) -> tuple[bool, bool]:
    """Every hook's :meth:`LoopHook.epoch_done`, in order (a hook sees a divergence an earlier
    one signalled); returns (diverged, stop requested)."""
    stop = False
    for hook in hooks:
        signal = hook.epoch_done(record, diverged)
        diverged = diverged or signal is Signal.DIVERGED
        stop = stop or signal is Signal.STOP
    return diverged, stop


class DivergenceGuard(LoopHook):
    """Stops the run as ``diverged`` at the first non-finite step loss or test loss (and,
    with ``epoch_loss``, a non-finite mean training loss of an epoch: a library loop reports
    its loss per epoch only)."""

    def __init__(self, *, epoch_loss: bool = False) -> None:
        self.epoch_loss = epoch_loss

    def step_done(self, done: StepDone) -> Signal:
        return Signal.CONTINUE if math.isfinite(done.loss) else Signal.DIVERGED

    def epoch_done(self, record: Mapping[str, Any], diverged: bool) -> Signal:
        finite = math.isfinite(record["test_loss"])
        if self.epoch_loss:
            finite = finite and math.isfinite(record["loss"])
        return Signal.CONTINUE if diverged or finite else Signal.DIVERGED


class WeightAveraging(LoopHook):
    """The EMA of the engine's weights (:class:`dpcore.ema.WeightEma`, from the weights the
    engine holds when the hook is made): updated after every step, held by the model while it
    is evaluated, and loaded into it when training ends (the evaluation weights)."""

    def __init__(self, engine: StepEngine, decay: float) -> None:
        self.engine = engine
        self.ema = WeightEma(engine.get_weights(), decay)

    def step_done(self, done: StepDone) -> Signal:
        self.ema.update(self.engine.get_weights(), done.step)
        return Signal.CONTINUE

    @contextmanager
    def _averaged(self) -> Iterator[None]:
        raw = self.engine.get_weights()
        self.engine.set_weights(self.ema.weights())
        try:
            yield
        finally:
            self.engine.set_weights(raw)

    def evaluating(self) -> AbstractContextManager[None]:
        """The model holds the EMA within the block; the training weights come back after."""
        return self._averaged()

    def training_done(self) -> None:
        self.engine.set_weights(self.ema.weights())  # the model keeps its evaluation weights


class CanarySource(Protocol):
    """What the loop asks once per step for the audit's canaries
    (:class:`dpcore.audit.canaries.GradientCanaries`), and where the engine's report goes."""

    def step_records(self) -> CanaryRecords | None:
        """This step's sampled canaries as per-example records, None if none is sampled."""

    def coordinates(self) -> dict[str, np.ndarray]:
        """The coordinates the engine is to report after each step (neutral key -> flat
        indices)."""

    def observed(self, values: Mapping[str, np.ndarray]) -> None:
        """The engine's report of a step's noised sum at :meth:`coordinates`."""


class NoiseSource(Protocol):
    """What the loop asks once per step for the shared noise (``privacy.noise_source:
    shared``, :class:`dpcore.shared_noise.SharedNoise`)."""

    def step_noise(self, step: int) -> dict[str, np.ndarray]:
        """The noise vector of optimizer step ``step`` (1-based), neutral layout."""


class CanaryGradients(LoopHook):
    """The audit's gradient canaries sampled in each step, handed to the engine as
    per-example records it clips with its examples (drawn once per step), and the engine's
    report of the noised sum at the canaries' coordinates after each step (the engine
    watches them from the hook's creation)."""

    def __init__(self, canaries: CanarySource, engine: StepEngine) -> None:
        self.canaries = canaries
        self.engine = engine
        engine.watch(canaries.coordinates())

    def step_canaries(self, step: int) -> CanaryRecords | None:
        return self.canaries.step_records()

    def step_done(self, done: StepDone) -> Signal:
        values = self.engine.watched()
        if values is not None:
            self.canaries.observed(values)
        return Signal.CONTINUE


class SharedNoise(LoopHook):
    """The shared noise of each step (``privacy.noise_source: shared``); the engine's own
    noise is off (:func:`dpcore.shared_noise.framework_mechanism`)."""

    def __init__(self, noise: NoiseSource) -> None:
        self.noise = noise

    def step_extra(self, step: int) -> Mapping[str, np.ndarray] | None:
        return self.noise.step_noise(step)


class ProgressBar(LoopHook):
    """A tqdm bar per epoch (steps, running loss; at the end loss, accuracy and epsilon),
    shown only when ``show`` and stderr is a terminal."""

    def __init__(self, show: bool) -> None:
        self.show = bool(show) and sys.stderr.isatty()
        self.bar: Any = None

    def epoch_started(self, epoch: int, n_epochs: int, steps: int) -> None:
        self.bar = tqdm(total=steps, desc=f"epoch {epoch}/{n_epochs}", unit="step",
                        disable=not self.show, leave=True, file=sys.stderr, dynamic_ncols=True)

    def step_done(self, done: StepDone) -> Signal:
        self.bar.update(1)
        if done.epoch_examples:
            self.bar.set_postfix(loss=f"{done.epoch_loss / done.epoch_examples:.4f}",
                                 refresh=False)
        return Signal.CONTINUE

    def epoch_done(self, record: Mapping[str, Any], diverged: bool) -> Signal:
        eps = record["epsilon_spent"]
        self.bar.set_postfix({  # a dict keeps this order (keyword arguments are sorted by tqdm)
            "loss": f"{record['loss']:.4f}", "acc": f"{record['test_accuracy']:.4f}",
            "eps": "n/a" if eps is None else f"{eps:.3g}"}, refresh=False)
        self.bar.close()
        return Signal.CONTINUE


class EpochCallbacks(LoopHook):
    """The caller's per-epoch callbacks, each called with a copy of the record (all of them,
    even when one asks to stop); not called once the run has diverged."""

    def __init__(self, callbacks: Sequence[EpochCallback]) -> None:
        self.callbacks = tuple(callbacks)

    def epoch_done(self, record: Mapping[str, Any], diverged: bool) -> Signal:
        if diverged:
            return Signal.CONTINUE
        stop_requested = [bool(cb(dict(record))) for cb in self.callbacks]
        return Signal.STOP if any(stop_requested) else Signal.CONTINUE
