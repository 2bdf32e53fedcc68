"""Each recipe's step against a hand-written reference on a tiny model.

Noise 0 and an active clip norm: the library recipes (TF Privacy's optimizer through
``model.fit``; Opacus's ``make_private``) and the harmonised factor switches (microbatch
clipping, the step divisor) must give the update of a naive loop: per example (or per
microbatch of k examples: the gradient of their mean loss), clip to C in flat L2, sum, divide,
one SGD step.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("torch")
pytest.importorskip("opacus")

from dpcore.config import RunConfig  # noqa: E402
from dpcore.data.dataset import Dataset  # noqa: E402
from tests.backends.train_helpers import (  # noqa: E402
    FRAMEWORKS,
    batch,
    chunks_of,
    clip_flat,
    config,
    diff,
    digits16,
    rel_error,
)
from tests.backends.train_helpers import mechanism as make_mechanism  # noqa: E402

TOL = 1e-5
CLIP = 1.0
LR = 1.0
INDICES = np.arange(40, 72)  # 32 examples


def naive_update(framework: Any, model: Any, indices: np.ndarray, k: int, divisor: float
                 ) -> dict[str, np.ndarray]:
    """-lr * sum over microbatches of clip(grad of the microbatch's mean loss) / divisor."""
    x, y = batch(indices)
    total: dict[str, np.ndarray] | None = None
    for start in range(0, len(indices), k):
        g = framework.grad_of_sum(model, x[start:start + k], y[start:start + k])
        c = clip_flat({key: v / k for key, v in g.items()}, CLIP, "l2")
        total = c if total is None else {key: total[key] + c[key] for key in total}
    assert total is not None
    return {key: -LR * v / divisor for key, v in total.items()}


def _mechanism(k: int, expected: int) -> Any:
    from dataclasses import replace

    return replace(make_mechanism("l2", CLIP, 0.0, expected, noise_multiplier=0.0),
                   microbatch_size=k)


@pytest.mark.parametrize("name", ["tf", "torch"])
@pytest.mark.parametrize(("k", "normalisation"), [(2, "microbatches"), (4, "expected"),
                                                  (1, "actual")])
def test_harmonised_factors_match_the_naive_loop(name: str, k: int, normalisation: str) -> None:
    """factors.microbatch_size and factors.normalisation in the harmonised engines."""
    from dpcore.recipes import step_divisor

    framework = FRAMEWORKS[name]
    models = framework.modules()[0]
    model = framework.build(0)
    start = models.get_weights(model)
    expected_b = 40  # differs from the 32 actual examples: the divisor matters
    divisor = step_divisor(normalisation, expected_b, len(INDICES), k)
    cfg = config(noise=0.0, clip=CLIP, lr=LR)
    reference = naive_update(framework, model, INDICES, k, divisor)
    engine = framework.engine(model, cfg, _mechanism(k, expected_b))
    chunks = chunks_of(INDICES, 16)  # 16 is a multiple of k: chunks hold whole microbatches
    if normalisation == "expected":
        engine.train_step(chunks)
    else:
        engine.train_step(chunks, divisor=divisor)
    update = diff(models.get_weights(model), start)
    assert rel_error(update, reference) < TOL
    # clipping is active and k matters: per-example clipping gives another update
    if k > 1:
        other = naive_update(framework, model, INDICES, 1, divisor)
        assert rel_error(other, reference) > 0.05


def _library_config(backend: str, k: int = 1) -> RunConfig:
    return RunConfig.from_dict({
        "recipe": "library", "data": {"name": "digits"}, "model": {"name": "cnn4"},
        "privacy": {"mechanism": "dpsgd-gaussian", "noise_multiplier": 0.0,
                    "max_grad_norm": CLIP, "delta": 1e-5,
                    "sampling": "shuffle"},
        "factors": {"microbatch_size": k},
        "train": {"epochs": 1, "batch_size": len(INDICES), "lr": LR},
    })


def _tiny_dataset() -> Dataset:
    ds = digits16()
    return Dataset("tiny", "image", ds.x_train[INDICES], ds.y_train[INDICES],
                   ds.x_test[:10], ds.y_test[:10], ds.class_names)


@pytest.mark.parametrize(("name", "jacobian"), [("tf", None), ("tf", 16), ("tf", 8),
                                               ("torch", None)])
def test_library_step_matches_the_naive_loop(name: str, jacobian: int | None) -> None:
    """One epoch = one batch of all 32 examples (order irrelevant per example): TF Privacy's
    VectorizedDPKerasSGDOptimizer through model.fit (or DPKerasSGDOptimizer accumulating 2 or
    4 Jacobians of 16 or 8 examples) and Opacus's make_private give the naive per-example
    update divided by the batch size."""
    from dpcore.pipeline import privacy_plan

    framework = FRAMEWORKS[name]
    models = framework.modules()[0]
    model = framework.build(0)
    start = models.get_weights(model)
    cfg = _library_config(name)
    data = _tiny_dataset()
    plan = privacy_plan(cfg, len(data.x_train))
    if name == "tf":
        from tfpipe.library import KerasFitRunner
        runner: Any = KerasFitRunner(model, cfg, data, plan, jacobian)
        assert runner.accumulation == len(INDICES) // (jacobian or len(INDICES))
    else:
        from torchpipe.library import OpacusRunner
        runner = OpacusRunner(model, cfg, data, plan)
    assert runner.steps_per_epoch == 1 and runner.sampling_rate == 1.0
    reference = naive_update(framework, model, np.arange(40, 72), 1, len(INDICES))
    loss_sum, examples = runner.train_epoch(1)
    assert examples == len(INDICES) and np.isfinite(loss_sum)
    update = diff(models.get_weights(model), start)
    assert rel_error(update, reference) < TOL
    if name == "torch":
        runner.close()


def test_tf_privacy_microbatches_equal_the_harmonised_microbatch_factor() -> None:
    """TF Privacy's optimizer with num_microbatches = 32 / 4 on a fixed batch, and the
    harmonised TF engine with factors.microbatch_size = 4 and normalisation = microbatches,
    give the same update (noise 0)."""
    import tensorflow as tf

    from tfpipe.library import make_loss, make_optimizer

    framework = FRAMEWORKS["tf"]
    models = framework.modules()[0]
    lib_model, harm_model = framework.build(0), framework.build(0)
    start = models.get_weights(lib_model)
    cfg = _library_config("tf", k=4)
    optimizer = make_optimizer(cfg, 0.0)
    from tensorflow_privacy import VectorizedDPKerasSGDOptimizer
    assert isinstance(optimizer, VectorizedDPKerasSGDOptimizer)
    assert optimizer._num_microbatches == 8
    x, y = batch(INDICES)
    loss_fn = make_loss(cfg)
    optimizer.minimize(lambda: loss_fn(tf.constant(y), lib_model(tf.constant(x),
                                                                 training=True)),
                       lib_model.trainable_variables, tape=tf.GradientTape())
    engine = framework.engine(harm_model, config(noise=0.0, clip=CLIP, lr=LR),
                              _mechanism(4, 40))
    engine.train_step(chunks_of(INDICES, 16), divisor=8.0)
    lib_update = diff(models.get_weights(lib_model), start)
    harm_update = diff(models.get_weights(harm_model), start)
    assert rel_error(harm_update, lib_update) < TOL


@pytest.mark.parametrize("jacobian", [None, 8])
def test_tf_privacy_accumulation_keeps_the_noise_of_one_batch(jacobian: int | None) -> None:
    """Noise 1.0 against noise 0 from the same weights on the same batch: the difference of
    the updates is the noise alone, lr * N(0, (C * sigma)^2) / B per weight, whether the
    batch of 32 is one Jacobian or 4 accumulated ones (each noised at sigma / 2)."""
    from dpcore.pipeline import privacy_plan
    from tfpipe.library import KerasFitRunner

    framework = FRAMEWORKS["tf"]
    models = framework.modules()[0]
    data = _tiny_dataset()
    updates = []
    for noise in (0.0, 1.0):
        cfg = RunConfig.from_dict({**_library_config("tf").to_dict(), "seed": 3,
                                   "privacy": {**_library_config("tf").to_dict()["privacy"],
                                               "noise_multiplier": noise}})
        model = framework.build(0)
        start = models.get_weights(model)
        runner = KerasFitRunner(model, cfg, data, privacy_plan(cfg, len(data.x_train)), jacobian)
        runner.train_epoch(1)
        updates.append(diff(models.get_weights(model), start))
    noise_part = np.concatenate([(updates[1][k] - updates[0][k]).ravel() for k in updates[0]])
    expected_std = LR * CLIP * 1.0 / len(INDICES)
    assert noise_part.size > 5000  # enough weights for a 5% estimate of the std
    assert abs(noise_part.std() / expected_std - 1) < 0.05
    assert abs(noise_part.mean()) < 0.05 * expected_std


@pytest.mark.parametrize(("batch", "jacobian", "micro", "steps"), [
    (1024, 16, 1, 64), (1024, None, 1, 1), (64, 64, 1, 1), (64, 16, 1, 4),
    (1024, 300, 1, 4), (96, 40, 32, 3), (100, 16, 1, 10),
    # a Jacobian smaller than one microbatch: one microbatch per physical step (this search
    # once looped forever on the gap preset's TF Privacy 32-microbatch run)
    (1024, 16, 32, 32), (96, 8, 32, 3), (1024, 1, 1024, 1)])
def test_tf_privacy_accumulation_steps(batch: int, jacobian: int | None, micro: int,
                                       steps: int) -> None:
    """The fewest equal physical batches of whole microbatches within the Jacobian size."""
    from tfpipe.library import accumulation_steps

    config = RunConfig.from_dict({"recipe": "library", "train": {"batch_size": batch},
                                  "privacy": {"mechanism": "dpsgd-gaussian",
                                              "noise_multiplier": 1.0, "sampling": "shuffle"},
                                  "factors": {"microbatch_size": micro}})
    assert accumulation_steps(config, jacobian) == steps


@pytest.mark.parametrize(("backend", "sampling"), [("tf", "shuffle"), ("torch", "poisson")])
def test_a_library_run_may_standardise_its_inputs(backend: str, sampling: str,
                                                  tmp_path: Any) -> None:
    """``factors.input_scaling=standardised`` under ``recipe: library`` (as Opacus's MNIST
    example normalises): the library trains on the standardised images, and the claim says the
    statistics are not covered."""
    import json

    from compare import api
    from dpcore.recipes import CLAIMED_NOT_PROVED, STANDARDISED_REASON

    result = api.train({
        "recipe": "library", "data": {"name": "digits"}, "model": {"name": "cnn4"},
        "privacy": {"mechanism": "dpsgd-gaussian", "noise_multiplier": 1.0,
                    "max_grad_norm": 1.0, "sampling": sampling},
        "factors": {"input_scaling": "standardised"},
        "train": {"epochs": 1, "batch_size": 64, "lr": 0.1}}, backend=backend, out=tmp_path)
    assert result.status == "finished"
    assert result.recipe["effective_factors"]["input_scaling"] == "standardised"
    assert result.recipe["privacy_claim"]["status"] == CLAIMED_NOT_PROVED
    assert STANDARDISED_REASON in result.recipe["privacy_claim"]["reasons"]
    stats = json.loads(result.dataset["extra"]["input_scaling"])
    assert stats["computed_on"] == "training set" and 0.2 < stats["mean"][0] < 0.4
