"""The noise key in the library recipes: TF Privacy's noise ops take TF's global seed, set
from the run's noise key; Opacus's ``make_private`` takes a generator keyed by it. Two configs
of one seed then draw different noise, one config the same; a ``secret`` key draws new noise
at every run (and, on torch, Opacus's secure_mode sampler)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("torch")
pytest.importorskip("opacus")

from dpcore.config import RunConfig  # noqa: E402
from dpcore.data.dataset import Dataset  # noqa: E402
from tests.backends.train_helpers import FRAMEWORKS, digits16, flat  # noqa: E402

INDICES = np.arange(40, 72)  # one batch of 32: one library step per epoch
NOISE = 1.0


def _config(epochs: int = 1, key: str | None = None) -> RunConfig:
    privacy: dict[str, Any] = {"mechanism": "dpsgd-gaussian", "noise_multiplier": NOISE,
                               "max_grad_norm": 1.0, "delta": 1e-5, "sampling": "shuffle"}
    if key is not None:
        privacy["noise_key"] = key
    return RunConfig.from_dict({
        "recipe": "library", "data": {"name": "digits"}, "model": {"name": "cnn4"},
        "privacy": privacy, "seed": 4,
        "train": {"epochs": epochs, "batch_size": len(INDICES), "lr": 1.0}})


def _update(name: str, cfg: RunConfig) -> np.ndarray:
    """The weights' move in one library epoch (one step of all 32 examples)."""
    from dpcore.pipeline import privacy_plan

    ds = digits16()
    data = Dataset("tiny", "image", ds.x_train[INDICES], ds.y_train[INDICES],
                   ds.x_test[:10], ds.y_test[:10], ds.class_names)
    framework = FRAMEWORKS[name]
    models = framework.modules()[0]
    model = framework.build(0)
    start = flat(models.get_weights(model))
    plan = privacy_plan(cfg, len(data.x_train))
    if name == "tf":
        from tfpipe.library import KerasFitRunner
        runner: Any = KerasFitRunner(model, cfg, data, plan)
    else:
        from torchpipe.library import OpacusRunner
        runner = OpacusRunner(model, cfg, data, plan)
        assert runner.optimizer.secure_mode == (cfg.privacy.noise_key == "secret")
    runner.train_epoch(1)
    if name == "torch":
        runner.close()
    return flat(models.get_weights(model)) - start


@pytest.mark.parametrize("name", ["tf", "torch"])
def test_library_noise_follows_the_noise_key(name: str) -> None:
    """Configs ``epochs: 1`` and ``epochs: 2`` of seed 4 run the same first epoch; only their
    noise keys differ. The noise std of one update is lr C sigma / B."""
    one, again, two = (_update(name, _config(1)), _update(name, _config(1)),
                       _update(name, _config(2)))
    np.testing.assert_allclose(one, again, rtol=0, atol=1e-7)
    spread = np.std(one - two) / np.sqrt(2)  # the difference of two independent draws
    assert spread == pytest.approx(NOISE / len(INDICES), rel=0.05)
    secret = [_update(name, _config(1, key="secret")) for _ in range(2)]
    assert np.std(secret[0] - secret[1]) / np.sqrt(2) == pytest.approx(
        NOISE / len(INDICES), rel=0.05)
