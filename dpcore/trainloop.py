"""The framework-neutral training loop of the harmonised recipe, shared by both backends.

A backend supplies a :class:`~dpcore.stepengine.StepEngine` (one logical DP-SGD step; the
algorithm it must run is in :mod:`dpcore.stepengine`). Everything else is written once:

* :func:`run_training`: a run's loop as its config asks (the hooks below, cached front-end
  features, augmentation);
* :func:`run_epochs`: the epoch loop itself: per epoch, one :meth:`LogicalSteps.take
  <dpcore.trainstep.LogicalSteps.take>` per step (seeded batches, chunks, divisor, extra),
  then one test evaluation and one history record (:mod:`dpcore.epochlog`);
* the hooks (:mod:`dpcore.trainhooks`): divergence, weight averaging, canaries, shared noise,
  progress and the caller's callbacks.

This module also re-exports the public names of those modules, where callers import them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

import numpy as np

from dpcore.accounting import PrivacyPlan
from dpcore.augment import check_augment_data
from dpcore.config import PerfSpec, RunConfig
from dpcore.data.dataset import Dataset
from dpcore.ema import WeightEma, ema_decay_at
from dpcore.epochlog import (
    EpochCallback,
    EpochLog,
    TestSet,
    TrainingOutcome,
    epsilon_spent,
    evaluate,
)
from dpcore.errors import ConfigError
from dpcore.libraryloop import (
    LibraryRecipe,
    LibraryRunner,
    dataclass_replace_rate,
    library_epochs,
    run_library_training,
)
from dpcore.predicting import (
    PREDICT_BATCH_SIZE,
    model_inputs,
    predict_in_batches,
    test_loss_and_accuracy,
)
from dpcore.stepengine import (
    Chunk,
    StepEngine,
    StepMechanism,
    add_neutral,
    step_mechanism,
)
from dpcore.trainhooks import (
    CanaryGradients,
    CanarySource,
    DivergenceGuard,
    EpochCallbacks,
    LoopHook,
    NoiseSource,
    ProgressBar,
    SharedNoise,
    Signal,
    StepDone,
    WeightAveraging,
    epoch_done,
    step_canaries,
    step_extra,
)
from dpcore.trainstep import LogicalSteps, training_chunks

if TYPE_CHECKING:
    from dpcore.frontcache import CachedInputs

__all__ = [
    "PREDICT_BATCH_SIZE", "CanarySource", "Chunk", "EpochCallback", "LibraryRecipe",
    "LibraryRunner", "LoopHook", "NoiseSource", "StepEngine", "StepMechanism",
    "TrainingOutcome", "WeightEma", "add_neutral", "dataclass_replace_rate", "ema_decay_at",
    "epsilon_spent", "library_epochs", "loop_hooks", "model_inputs",
    "predict_in_batches", "run_epochs", "run_library_training", "run_training",
    "step_mechanism", "test_loss_and_accuracy", "training_chunks",
]


def loop_hooks(
    config: RunConfig, engine: StepEngine, *, progress: bool = True,
    callbacks: Sequence[EpochCallback] = (), canaries: CanarySource | None = None,
    noise: NoiseSource | None = None,
) -> list[LoopHook]:
    """The hooks of a harmonised run, in the order the loop calls them: divergence first (so
    the later hooks see it), the EMA (``train.ema_decay``), the canaries, the shared noise,
    the progress bar, the caller's callbacks last."""
    hooks: list[LoopHook] = [DivergenceGuard()]
    if config.train.ema_decay is not None:
        hooks.append(WeightAveraging(engine, config.train.ema_decay))
    if canaries is not None:
        hooks.append(CanaryGradients(canaries, engine))
    if noise is not None:
        hooks.append(SharedNoise(noise))
    hooks += [ProgressBar(progress), EpochCallbacks(callbacks)]
    return hooks


def run_training(
    config: RunConfig, dataset: Dataset, perf: PerfSpec, plan: PrivacyPlan, engine: StepEngine,
    *, progress: bool = True, callbacks: Sequence[EpochCallback] = (),
    inputs: CachedInputs | None = None, canaries: CanarySource | None = None,
    noise: NoiseSource | None = None,
) -> TrainingOutcome:
    """Train ``engine``'s model for ``plan.batches.steps`` logical steps (:func:`run_epochs`
    with the hooks of :func:`loop_hooks`).

    Batches are ``batches_for(plan.batches, config.privacy.sampling, config.seed)``; each is
    split into chunks of at most ``perf.physical_batch_size`` examples (whole microbatches).
    With ``config.augment``, each training batch is augmented per example before it is
    chunked (:func:`dpcore.trainstep.training_chunks`); the test evaluation always uses the
    clean images.

    Args:
        config: the run's configuration (sampling, seed, factors, augment, EMA decay).
        dataset: training and test arrays.
        perf: physical chunk size.
        plan: the resolved privacy plan (steps, q, noise multiplier, delta).
        engine: the backend's step engine.
        progress: show a tqdm bar per epoch (only when stderr is a terminal).
        callbacks: called with each epoch's record; a True return stops training.
        inputs: the model's fixed front end already applied to both splits
            (:mod:`dpcore.frontcache`): the engine's model is then the head, trained and
            evaluated on these features in place of the data set's images (same order).
            Not with ``config.augment`` (the features of augmented images change each step).
        canaries: the audit's gradient canaries: asked once per step for the sampled canaries'
            per-example records, which the engine clips with the batch's examples
            (``canaries``), and handed the engine's report of the noised sum at their
            coordinates after each step (the engine watches them).
        noise: the shared noise (``privacy.noise_source: shared``): the vector of each step
            is added to the clipped sum before the noise (``extra``); the engine was built
            with its own noise off (:func:`dpcore.shared_noise.framework_mechanism`).

    Raises:
        ConfigError: augmentation of a text data set or with too much padding
            (:func:`dpcore.augment.check_augment_data`), or together with cached ``inputs``.
    """
    check_augment_data(config.augment, dataset)
    if config.augment.active and inputs is not None:
        raise ConfigError(
            "augment is set but the run was handed cached front-end features: augmented "
            "images change in every step, so their features cannot be computed once; valid: "
            "no cached inputs (dpcore.frontcache.front_to_cache gives () for such a run)"
        )
    x_train, x_test = dataset.x_train, dataset.x_test
    if inputs is not None:
        x_train, x_test = inputs.x_train, inputs.x_test
    hooks = loop_hooks(config, engine, progress=progress, callbacks=callbacks,
                       canaries=canaries, noise=noise)
    steps = LogicalSteps.of_run(config, perf, plan, x_train, dataset.y_train, dataset.task)
    return run_epochs(engine, steps, plan, TestSet(x_test, dataset.y_test, dataset.task),
                      hooks)


def run_epochs(engine: StepEngine, steps: LogicalSteps, plan: PrivacyPlan, test: TestSet,
               hooks: Sequence[LoopHook]) -> TrainingOutcome:
    """The epoch loop: ``plan.batches.steps`` steps, ``steps_per_epoch`` per epoch (the last
    epoch may be shorter), each followed by a test evaluation and a history record
    (:mod:`dpcore.epochlog`).

    A hook's :attr:`~dpcore.trainhooks.Signal.DIVERGED` after a step ends the epoch at once
    and the run as ``diverged`` (that epoch's test metrics are NaN, not evaluated; no
    exception); after an epoch's evaluation it ends the run likewise. A
    :attr:`~dpcore.trainhooks.Signal.STOP` after an epoch ends the run there (``finished``;
    ``stopped_early`` when steps were left).
    """
    log = EpochLog()
    batches = plan.batches
    n_epochs = math.ceil(batches.steps / batches.steps_per_epoch)
    step, diverged_at, stopped = 0, None, False
    last_proba: np.ndarray | None = None
    last_logits: np.ndarray | None = None
    for epoch in range(1, n_epochs + 1):
        epoch_steps = min(batches.steps_per_epoch, batches.steps - step)
        for hook in hooks:
            hook.epoch_started(epoch, n_epochs, epoch_steps)
        loss_sum, examples = 0.0, 0
        start = time.perf_counter()
        for _ in range(epoch_steps):
            loss, n = steps.take(engine, step + 1, lambda s: step_extra(hooks, s),
                                 lambda s: step_canaries(hooks, s))
            step += 1
            loss_sum += loss
            examples += n
            done = StepDone(step, loss, n, loss_sum, examples)
            if Signal.DIVERGED in [hook.step_done(done) for hook in hooks]:
                diverged_at = step
                break
        record: dict[str, Any] = {
            "epoch": epoch, "step": step,
            "loss": loss_sum / examples if examples else math.nan,
            "examples": examples, "seconds": time.perf_counter() - start,
            "epsilon_spent": epsilon_spent(plan, step),
        }
        if diverged_at is not None:
            record.update(test_loss=math.nan, test_accuracy=math.nan, eval_seconds=0.0)
        else:
            with ExitStack() as stack:
                for hook in hooks:
                    stack.enter_context(hook.evaluating())
                evaluation = evaluate(engine.predict_outputs, test)
            last_proba, last_logits = evaluation.proba, evaluation.logits
            record.update(evaluation.record)
        log.append(record)
        diverged, stop = epoch_done(hooks, record, diverged_at is not None)
        if diverged:
            diverged_at = step  # the step that diverged, or the last one before the evaluation
            break
        if stop:
            stopped = step < batches.steps
            break
    for hook in hooks:
        hook.training_done()
    return log.outcome(status="finished" if diverged_at is None else "diverged", steps=step,
                       weights=engine.get_weights(), test_proba=last_proba,
                       test_logits=last_logits, stopped_early=stopped,
                       diverged_at_step=diverged_at)
