"""``train.class_weights``: the non-private step weights each example's loss by its class.

On every engine of both backends (and with compiled, padded chunks), one non-private step
with class weights ``w`` must move the weights by exactly ``-lr * sum_i w[y_i] g_i / B``,
``g_i`` the plain gradient of example i's loss computed here with the framework's autograd;
``balanced`` weights of a training split with every class equally frequent are all 1 and
change nothing; the weights reach a real run through ``dpcore.pipeline.fit`` and are recorded.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from dpcore.config import PerfSpec, RunConfig, TrainSpec
from dpcore.errors import ConfigError, DataError
from dpcore.stepengine import StepMechanism
from tests.backends.train_helpers import (
    ENGINE_FRAMEWORKS,
    batch,
    chunks_of,
    config,
    diff,
)

B = 16
LR = 0.5
#: Weights far from 1 and from each other, so that a missing or misplaced one shows.
WEIGHTS = tuple(float(w) for w in np.linspace(0.25, 4.0, 10))


def _plain(class_weights: tuple[float, ...] | None) -> StepMechanism:
    return StepMechanism(None, np.inf, None, 0.0, 0.0, B, 1, class_weights)


def _step(fw: Any, class_weights: tuple[float, ...] | None, perf: PerfSpec | None = None,
          indices: np.ndarray | None = None) -> tuple[dict[str, np.ndarray], dict]:
    from dpcore.backend import load_backend

    cfg = config(mechanism="none", lr=LR, batch_size=B)
    model = fw.build(seed=0)
    start = {k: np.array(v) for k, v in fw.engine(model, cfg, _plain(None)).get_weights().items()}
    engine = load_backend(fw.name).ENGINES[fw.engine_name](
        model, cfg, _plain(class_weights), perf or fw.perf())
    try:
        engine.train_step(chunks_of(np.arange(12) if indices is None else indices, 5))
        return start, engine.get_weights()
    finally:
        engine.close()


def _expected_update(fw: Any, indices: np.ndarray, weights: tuple[float, ...]
                     ) -> dict[str, np.ndarray]:
    model = fw.build(seed=0)
    total: dict[str, np.ndarray] = {}
    for i in indices:
        x, y = batch(np.array([i]))
        grad = fw.grad_of_sum(model, x, y)
        for k, g in grad.items():
            total[k] = total.get(k, 0.0) + weights[int(y[0])] * np.asarray(g, np.float64)
    return {k: -LR * v / B for k, v in total.items()}


@pytest.mark.parametrize("fw", ENGINE_FRAMEWORKS.values(), ids=list(ENGINE_FRAMEWORKS))
def test_a_class_weighted_step_is_the_weighted_sum_of_plain_gradients(fw: Any) -> None:
    indices = np.arange(12)
    start, after = _step(fw, WEIGHTS)
    expected = _expected_update(fw, indices, WEIGHTS)
    moved = diff(after, start)
    for k in expected:
        np.testing.assert_allclose(moved[k], expected[k], atol=3e-6, rtol=1e-4, err_msg=k)
    # and the weights matter: the unweighted step is another update
    _, unweighted = _step(fw, None)
    assert max(float(np.abs(unweighted[k] - after[k]).max()) for k in after) > 1e-4


@pytest.mark.parametrize("name", ["tf", "torch"])
def test_compiled_padded_chunks_keep_the_class_weights(name: str) -> None:
    """Compiled steps pad chunks with zero-weight rows: a class weight multiplies the row's
    weight, so padding still adds nothing and the real rows keep their class weights."""
    from dpcore.backend import load_backend

    fw = ENGINE_FRAMEWORKS[f"{name}-reference"]
    perf = PerfSpec(engine="reference", compile=True, deterministic=False)
    backend = load_backend(name)
    # the framework state a compiled run sets (XLA has no deterministic MaxPool gradient),
    # whatever ran before in this process; then the default run's state again
    backend.configure(0, perf)
    try:
        start, after = _step(fw, WEIGHTS, perf)
    finally:
        backend.configure(0, PerfSpec())
    expected = _expected_update(fw, np.arange(12), WEIGHTS)
    moved = diff(after, start)
    for k in expected:
        np.testing.assert_allclose(moved[k], expected[k], atol=3e-6, rtol=1e-4, err_msg=k)


def test_balanced_weights_of_equal_classes_are_all_one() -> None:
    from dpcore.class_weights import loss_class_weights

    labels = np.repeat(np.arange(4), 5)
    assert loss_class_weights("balanced", labels, 4) == (1.0, 1.0, 1.0, 1.0)
    assert loss_class_weights("none", labels, 4) is None
    # 3 of class 0, 1 of class 1: n / (K n_c)
    assert loss_class_weights("balanced", np.array([0, 0, 0, 1]), 2) == pytest.approx(
        (4 / 6, 2.0))


def test_a_class_without_training_examples_is_named() -> None:
    from dpcore.class_weights import loss_class_weights

    with pytest.raises(DataError, match=r"none of class\(es\) \[2\]"):
        loss_class_weights("balanced", np.array([0, 1, 1]), 3)


@pytest.mark.parametrize("mechanism", ["dpsgd-gaussian", "ldp"])
def test_private_runs_refuse_class_weights(mechanism: str) -> None:
    data: dict[str, Any] = {"name": "digits"}
    privacy: dict[str, Any] = {"mechanism": mechanism}
    if mechanism == "ldp":
        data.update(ldp_mechanism="laplace", ldp_params={"scale": 1.0})
    else:
        privacy["target_epsilon"] = 1.0
    with pytest.raises(ConfigError, match="train.class_weights='balanced'.*valid"):
        RunConfig.from_dict({"data": data, "privacy": privacy,
                             "train": {"class_weights": "balanced"}})


def test_unknown_rule_and_library_recipe_are_refused() -> None:
    with pytest.raises(ConfigError, match="train.class_weights='equal' is not known; "
                                          "valid: none, balanced"):
        TrainSpec(class_weights="equal")
    with pytest.raises(ConfigError, match="under recipe=library: none"):
        RunConfig.from_dict({"privacy": {"mechanism": "none"}, "recipe": "library",
                             "train": {"class_weights": "balanced"}})


def test_the_default_leaves_the_hash_alone() -> None:
    plain = RunConfig.from_dict({"privacy": {"mechanism": "none"}})
    explicit = RunConfig.from_dict({"privacy": {"mechanism": "none"},
                                    "train": {"class_weights": "none"}})
    balanced = RunConfig.from_dict({"privacy": {"mechanism": "none"},
                                    "train": {"class_weights": "balanced"}})
    assert plain.config_hash == explicit.config_hash != balanced.config_hash
    assert "class_weights" not in plain.to_dict()["train"]


@pytest.mark.parametrize("name", ["tf", "torch"])
def test_a_run_records_and_applies_its_class_weights(name: str) -> None:
    """Through the whole pipeline: the run's perf records the weights of its training
    labels, and the trained weights differ from the unweighted run's."""
    from dpcore.backend import load_backend
    from tests.backends.train_helpers import digits16

    backend = load_backend(name)
    data = digits16(n_train=120, n_test=40)
    base = config(mechanism="none", lr=0.5, batch_size=32, steps=2)
    weighted = base.replace(train=TrainSpec(steps=2, epochs=None, batch_size=32, lr=0.5,
                                            class_weights="balanced"))
    runs = [backend.train(c, data, PerfSpec(), progress=False) for c in (base, weighted)]
    counts = np.bincount(data.y_train, minlength=10)
    expected = len(data.y_train) / (10 * counts)
    assert "class_weights" not in runs[0].result.perf
    np.testing.assert_allclose(runs[1].result.perf["class_weights"], expected, rtol=1e-12)
    plain, balanced = (backend.get_weights(r.model) for r in runs)
    assert max(float(np.abs(plain[k] - balanced[k]).max()) for k in plain) > 1e-5


def test_the_run_line_names_the_class_weights() -> None:
    from dpcore.defaults import describe_settings

    config = RunConfig.from_dict({"privacy": {"mechanism": "none"},
                                  "train": {"class_weights": "balanced", "ema_decay": 0.99}})
    line = describe_settings(config, {})
    assert "weight EMA 0.99, balanced class weights" in line
    assert "class weights" not in describe_settings(RunConfig(), {})
