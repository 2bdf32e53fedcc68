"""The steps ``dpcompare verify`` drives: a backend's :class:`~dpcore.trainloop.StepEngine`
called exactly as the training loop calls it, or a library recipe's own step, behind one
small protocol (:class:`Stepper`), and the measurement of one step through its weight update.

A stepper is built from the configuration with a *verification optimizer*: plain SGD with
learning rate 1 and momentum 0, so that the weights after a step from ``w0`` are
``w0 - g`` with ``g`` the privatised gradient (the noised clipped sum divided by the step's
divisor): :func:`measure` reads ``g`` as ``w0 - w1`` and the noised sum as ``g`` times the
divisor. Everything between the batch and the optimizer is the step's own code; the optimizer
the configuration names (momentum, Adam) is replaced, so a bug there is not seen.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from dpcore.config import RunConfig
from dpcore.recipes import step_divisor
from dpcore.trainloop import Chunk, NoiseSource, StepEngine

#: The verification optimizer's settings (``train.*`` of the configuration checked).
VERIFICATION_TRAIN = {"optimizer": "sgd", "lr": 1.0, "momentum": 0.0, "ema_decay": None}

Weights = dict[str, np.ndarray]


class Stepper(Protocol):
    """One configured DP step that ``verify`` can run from weights it sets."""

    def step(self, chunks: Sequence[Chunk], n_examples: int, divisor: float | None = None
             ) -> None:
        """One logical step on ``chunks`` (``n_examples`` examples in all). ``divisor``: an
        explicit divisor of the noised sum (None: the step's own rule)."""

    def divisor_of(self, n_examples: int) -> float:
        """What the configured step divides the noised sum of a batch of ``n_examples`` by."""

    def get_weights(self) -> Weights:
        """The current weights, neutral layout."""

    def set_weights(self, weights: Mapping[str, np.ndarray]) -> None:
        """Load neutral-layout weights (the optimizer is stateless: SGD without momentum)."""

    def close(self) -> None:
        """Release what the step attached to its model."""


def verification_config(config: RunConfig, seed: int | None = None) -> RunConfig:
    """``config`` with the verification optimizer (:data:`VERIFICATION_TRAIN`) and, when
    given, another seed (the noise key of the independence check)."""
    train = dataclasses.replace(config.train, **VERIFICATION_TRAIN)
    changes: dict[str, Any] = {"train": train}
    if seed is not None:
        changes["seed"] = seed
    return dataclasses.replace(config, **changes)


class EngineStepper:
    """A :class:`~dpcore.trainloop.StepEngine` called as :func:`dpcore.trainloop.run_training`
    calls it: the divisor of ``factors.normalisation`` (:func:`dpcore.recipes.step_divisor`)
    passed only when it is not ``expected``, and the shared noise of step t
    (``privacy.noise_source: shared``) passed as ``extra``.

    Args:
        engine: the engine under test.
        config: the configuration (normalisation, microbatch size).
        expected_batch_size: B of the plan.
        noise: the shared noise, or None when the engine draws its own.
    """

    def __init__(self, engine: StepEngine, config: RunConfig, expected_batch_size: int,
                 noise: NoiseSource | None = None) -> None:
        self.engine = engine
        self.normalisation = config.factors.normalisation
        self.microbatch_size = config.factors.microbatch_size
        self.expected_batch_size = expected_batch_size
        self.noise = noise
        self.steps_taken = 0

    def step(self, chunks: Sequence[Chunk], n_examples: int, divisor: float | None = None
             ) -> None:
        args: dict[str, Any] = {}
        if divisor is not None:
            args["divisor"] = float(divisor)
        elif self.normalisation != "expected":
            args["divisor"] = self.divisor_of(n_examples)
        self.steps_taken += 1
        if self.noise is not None:
            args["extra"] = self.noise.step_noise(self.steps_taken)
        self.engine.train_step(list(chunks), **args)

    def divisor_of(self, n_examples: int) -> float:
        return step_divisor(self.normalisation, self.expected_batch_size, n_examples,
                            self.microbatch_size)

    def get_weights(self) -> Weights:
        return self.engine.get_weights()

    def set_weights(self, weights: Mapping[str, np.ndarray]) -> None:
        self.engine.set_weights(weights)

    def close(self) -> None:
        self.engine.close()


@dataclass(frozen=True)
class Measurement:
    """One measured step.

    Attributes:
        update: ``w0 - w1`` per weight (float64): the privatised gradient.
        divisor: the divisor the step was asked to use (or its configured one).
        rounding: per weight, a bound on the float32 rounding of the weights
            (``ulp(|w0| + |update|)`` per coordinate), already multiplied by ``divisor``.
    """

    update: dict[str, np.ndarray]
    divisor: float
    rounding: dict[str, np.ndarray]

    def noised_sum(self) -> dict[str, np.ndarray]:
        """The step's noised clipped sum: ``update * divisor``."""
        return {k: v * self.divisor for k, v in self.update.items()}


def measure(stepper: Stepper, w0: Mapping[str, np.ndarray], chunks: Sequence[Chunk],
            n_examples: int, divisor: float | None = None, *, rounding: bool = True
            ) -> Measurement:
    """One step from ``w0`` on ``chunks``, read through the weight update (``rounding``:
    also bound the float32 rounding of each coordinate; the noise tests do not need it)."""
    stepper.set_weights(w0)
    stepper.step(chunks, n_examples, divisor)
    w1 = stepper.get_weights()
    used = stepper.divisor_of(n_examples) if divisor is None else float(divisor)
    update, bounds = {}, {}
    for key, start in w0.items():
        a = np.asarray(start, dtype=np.float32)
        b = np.asarray(w1[key], dtype=np.float32)
        update[key] = a.astype(np.float64) - b  # exact: the difference of two float32s
        if rounding:
            bounds[key] = np.spacing(np.maximum(np.abs(a), np.abs(b))).astype(np.float64) * used
    return Measurement(update, used, bounds)


def norm(vector: Mapping[str, np.ndarray], kind: str) -> float:
    """The flat ``l2`` or ``l1`` norm of a neutral-layout vector."""
    if kind == "l1":
        return float(sum(np.abs(v).sum() for v in vector.values()))
    return float(np.sqrt(sum(np.square(v).sum() for v in vector.values())))


def difference(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``a - b`` key by key."""
    return {k: np.asarray(a[k], np.float64) - np.asarray(b[k], np.float64) for k in a}


#: Builds a stepper: ``(kind, config) -> Stepper``; ``kind`` is ``noisy`` (as configured),
#: ``free`` (noise scale 0), ``raw`` (noise 0 and no clipping) or ``other-key`` (as
#: configured, with another noise key).
StepperFactory = Callable[[str, RunConfig], Stepper]


class LibraryStep(Stepper, Protocol):
    """A library recipe's own step (``recipe: library``), as a backend builds it for
    ``verify`` (``library_step`` of the backend contract): the library's optimizer and
    per-example machinery on a batch given to it, and the sampler the library's loader runs.

    Attributes:
        sampling: ``poisson`` or ``shuffle``: how the library's loader draws batches.
        sampling_rate: the q the run's accountant is given for it (``privacy.as_run``).
        steps_per_epoch: batches of one pass of the library's loader.
        fixed_batch_size: the only batch size the step takes (TF Privacy's fixed number of
            microbatches), or None for any.
    """

    sampling: str
    sampling_rate: float
    steps_per_epoch: int
    fixed_batch_size: int | None

    def index_batches(self, epochs: int) -> Iterator[np.ndarray]:
        """The example indices of each batch the library's loader draws in ``epochs``
        passes, in order."""
