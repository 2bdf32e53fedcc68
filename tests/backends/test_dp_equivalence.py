"""The two backends run the same algorithm: from the same weights on the same index batch, one
DP step (noise 0, clipping active) gives the same update in TF Privacy and in Opacus; a
non-private run gives the same history; a checkpoint of one loads into the other."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("torch")
pytest.importorskip("opacus")

from tests.backends.train_helpers import (  # noqa: E402
    FRAMEWORKS,
    chunks_of,
    config,
    diff,
    digits16,
    mechanism,
    rel_error,
)

TOL = 1e-5  # relative, flat L2 norm of the update difference over the update's norm
INDICES = np.arange(40, 75)  # 35 examples: chunks of 16, 16, 3


def _steps(framework: Any, cfg: Any, mech: Any, start: dict[str, np.ndarray],
           batches: list[np.ndarray]) -> dict[str, np.ndarray]:
    models = framework.modules()[0]
    model = framework.build(0)
    models.set_weights(model, start)
    engine = framework.engine(model, cfg, mech)
    for indices in batches:
        engine.train_step(chunks_of(indices, 16))
    return models.get_weights(model)


@pytest.fixture(scope="module")
def start() -> dict[str, np.ndarray]:
    """Initial weights: TF's own (Glorot) initialisation of seed 3, ported to torch too."""
    import tensorflow as tf

    from dpcore.config import ModelSpec
    from tfpipe.models import build_model, get_weights

    tf.keras.utils.set_random_seed(3)
    return get_weights(build_model(ModelSpec(name="cnn4"), (16, 16, 1), 10))


@pytest.mark.parametrize(("kind", "clip"), [("l2", 2.0), ("l1", 90.0)])
def test_one_dp_step_is_the_same_update_in_both(kind: str, clip: float,
                                                start: dict[str, np.ndarray]) -> None:
    cfg = config(mechanism="dpsgd-gaussian" if kind == "l2" else "dpsgd-laplace",
                 noise=0.0, clip=clip, lr=1.0)
    mech = mechanism(kind, clip, 0.0, 40)
    tf_w = _steps(FRAMEWORKS["tf"], cfg, mech, start, [INDICES])
    torch_w = _steps(FRAMEWORKS["torch"], cfg, mech, start, [INDICES])
    update_tf, update_torch = diff(tf_w, start), diff(torch_w, start)
    assert rel_error(update_torch, update_tf) < TOL
    # the update is not trivially zero, and clipping is active (an unclipped step differs)
    unclipped = _steps(FRAMEWORKS["torch"], cfg, mechanism(kind, 1e9, 0.0, 40), start,
                       [INDICES])
    assert rel_error(diff(unclipped, start), update_tf) > 0.05


@pytest.mark.parametrize(("optimizer", "momentum", "lr"), [("sgd", 0.9, 0.5), ("adam", 0.0, 1e-3)])
def test_three_steps_with_optimizer_state_agree(optimizer: str, momentum: float, lr: float,
                                                start: dict[str, np.ndarray]) -> None:
    """Momentum and Adam state carry over identically (noise 0, L2 clipping active); Adam on
    torch uses Keras's placement of epsilon (torchpipe.dp.KerasAdam)."""
    cfg = config(noise=0.0, clip=2.0, lr=lr, optimizer=optimizer, momentum=momentum)
    mech = mechanism("l2", 2.0, 0.0, 40)
    batches = [INDICES, np.arange(100, 130), np.arange(0, 40)]
    tf_w = _steps(FRAMEWORKS["tf"], cfg, mech, start, batches)
    torch_w = _steps(FRAMEWORKS["torch"], cfg, mech, start, batches)
    assert rel_error(diff(torch_w, start), diff(tf_w, start)) < TOL


def test_non_private_training_has_the_same_history_in_both() -> None:
    cfg = config(mechanism="none", epochs=2, batch_size=50, lr=0.5)
    results = {name: fw.modules()[1].train(cfg, digits16(), progress=False)
               for name, fw in FRAMEWORKS.items()}
    tf_hist = results["tf"].result.history
    torch_hist = results["torch"].result.history
    for a, b in zip(tf_hist, torch_hist, strict=True):
        assert a["examples"] == b["examples"]
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
        assert a["test_loss"] == pytest.approx(b["test_loss"], rel=1e-4)
        assert a["test_accuracy"] == b["test_accuracy"]
    assert rel_error(results["torch"].weights, results["tf"].weights) < 1e-4


def test_checkpoint_of_one_backend_loads_into_the_other(tmp_path: Any) -> None:
    tf_models, tf_train, tf_predict = FRAMEWORKS["tf"].modules()
    _, torch_train, torch_predict = FRAMEWORKS["torch"].modules()
    trained = tf_train.train(config(noise=1.0, steps=2), digits16(), progress=False)
    path = tf_train.save_checkpoint(trained, tmp_path / "checkpoint.npz")
    loaded = torch_train.load_checkpoint(path)
    assert loaded.backend == "torch" and loaded.extra["trained_by"] == "tf"
    x = digits16().x_test
    np.testing.assert_allclose(torch_predict.predict_proba(loaded, x),
                               tf_predict.predict_proba(trained, x), atol=1e-5)
