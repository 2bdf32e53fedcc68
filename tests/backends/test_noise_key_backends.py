"""The noise key through the real engines of both backends (reference and fast): two configs
with one seed and ``noise_key: seed`` draw different noise, one config draws the same noise
twice, a ``secret`` key draws new noise at every run with the std of the mechanism.

A step on an empty batch adds only the noise: with SGD (no momentum), learning rate 1 and
divisor 1 the weights move by minus the noise vector itself."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("torch")
pytest.importorskip("opacus")

from dpcore.config import RunConfig  # noqa: E402
from tests.backends.train_helpers import (  # noqa: E402
    ENGINE_FRAMEWORKS,
    config,
    flat,
    mechanism,
)

STD = 0.5  # sigma C of the step


def _noise(name: str, cfg: RunConfig) -> np.ndarray:
    """The noise one engine of ``cfg`` adds in a step on an empty batch (flat, float64)."""
    fw = ENGINE_FRAMEWORKS[name]
    models = fw.modules()[0]
    model = fw.build(seed=0)
    start = flat(models.get_weights(model))
    engine = fw.engine(model, cfg, mechanism("l2", 1.0, STD, 32))
    secret = cfg.privacy.noise_key == "secret"  # the hardened sampler is the one that runs
    if fw.name == "tf":
        assert engine.query.hardened == secret
    else:
        assert engine.optimizer.secure_mode == secret
    engine.train_step([], divisor=1.0)
    moved = flat(engine.get_weights())
    engine.close()
    return start - moved


def _base(seed: int = 3, **privacy: object) -> RunConfig:
    cfg = config(noise=STD, clip=1.0, lr=1.0, seed=seed)
    return dataclasses.replace(cfg, privacy=dataclasses.replace(cfg.privacy, **privacy))


@pytest.mark.parametrize("name", sorted(ENGINE_FRAMEWORKS))
def test_two_configs_with_one_seed_draw_different_noise(name: str) -> None:
    a = _base()
    other = dataclasses.replace(a, train=dataclasses.replace(a.train, steps=7))  # one seed
    first, again, second = _noise(name, a), _noise(name, a), _noise(name, other)
    np.testing.assert_array_equal(first, again)  # the same config: the same draw
    assert np.std(first) == pytest.approx(STD, rel=0.05)
    assert abs(np.corrcoef(first, second)[0, 1]) < 0.05  # ~26k coordinates: |r| ~ 0.006


@pytest.mark.parametrize("name", sorted(ENGINE_FRAMEWORKS))
def test_a_secret_key_draws_new_noise_with_the_mechanism_s_std(name: str) -> None:
    """Four draws halved (the hardened sampler): still N(0, (sigma C)^2) per coordinate."""
    cfg = _base(noise_key="secret")
    first, second = _noise(name, cfg), _noise(name, cfg)
    assert abs(np.corrcoef(first, second)[0, 1]) < 0.05
    for draw in (first, second):
        assert np.std(draw) == pytest.approx(STD, rel=0.03)  # ~26k draws: se ~0.4 %
        assert abs(np.mean(draw)) < 0.05 * STD
    seeded = _noise(name, _base())
    assert abs(np.corrcoef(first, seeded)[0, 1]) < 0.05
