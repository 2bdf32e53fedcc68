"""The shared noise of ``privacy.noise_source: shared`` (dpcore.shared_noise): a function of
(run seed, step) only, with the mechanism's scale; the config switch and its refusals."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import pytest

from dpcore.config import PrivacySpec, RunConfig, TrainSpec
from dpcore.errors import ConfigError
from dpcore.shared_noise import SharedNoise, framework_mechanism, shared_noise_for
from dpcore.trainloop import StepMechanism, add_neutral

SHAPES = {"dense/kernel": (32, 10), "conv/kernel": (3, 3, 1, 8), "dense/bias": (10,)}
GAUSS = StepMechanism("l2", 1.5, "gaussian", 1.5 * 1.2, 1.2, 64)


def _config(source: str = "shared", mechanism: str = "dpsgd-gaussian", seed: int = 0,
            recipe: str = "harmonised") -> RunConfig:
    noise = None if mechanism == "none" else 1.2
    return RunConfig(privacy=PrivacySpec(mechanism=mechanism, noise_multiplier=noise,
                                         max_grad_norm=1.5, noise_source=source),
                     train=TrainSpec(epochs=1, batch_size=64), seed=seed, recipe=recipe)


def _flat(vector: dict[str, np.ndarray]) -> np.ndarray:
    return np.concatenate([vector[k].ravel() for k in sorted(vector)])


def test_same_seed_and_step_same_vector_other_step_or_seed_another() -> None:
    noise = shared_noise_for(_config(seed=3), GAUSS, SHAPES)
    assert noise is not None
    first, again = noise.step_noise(5), noise.step_noise(5)
    assert set(first) == set(SHAPES) and all(first[k].shape == SHAPES[k] for k in SHAPES)
    assert all(first[k].dtype == np.float32 for k in first)
    np.testing.assert_array_equal(_flat(first), _flat(again))
    # drawing other steps in between changes nothing (counter-based: no hidden state)
    noise.step_noise(1)
    np.testing.assert_array_equal(_flat(noise.step_noise(5)), _flat(first))
    other_step = _flat(noise.step_noise(6))
    other_seed = _flat(shared_noise_for(_config(seed=4), GAUSS, SHAPES).step_noise(5))
    for other in (other_step, other_seed):
        assert abs(np.corrcoef(_flat(first), other)[0, 1]) < 0.1


def test_the_vector_does_not_depend_on_the_order_a_backend_lists_its_weights() -> None:
    """TF and torch list their weights in different orders; the draw is over sorted keys."""
    a = SharedNoise(1, SHAPES, "gaussian", 2.0)
    b = SharedNoise(1, dict(reversed(list(SHAPES.items()))), "gaussian", 2.0)
    for key in SHAPES:
        np.testing.assert_array_equal(a.step_noise(2)[key], b.step_noise(2)[key])


@pytest.mark.parametrize(("kind", "scale", "std"), [("gaussian", 1.8, 1.8),
                                                    ("laplace", 0.7, 0.7 * np.sqrt(2))])
def test_empirical_std_is_the_mechanism_s(kind: str, scale: float, std: float) -> None:
    """Gaussian: std sigma C; Laplace: scale b = sigma C, std b sqrt(2). 200k draws: the
    sample std is within 1 % (its standard error is ~0.2 % Gaussian, ~0.4 % Laplace)."""
    draws = _flat(SharedNoise(0, {"w": (200, 1000)}, kind, scale).step_noise(1))
    assert abs(draws.mean()) < 0.01 * std
    assert draws.std() == pytest.approx(std, rel=0.01)
    if kind == "laplace":  # Laplace, not Gaussian: mean |x| = b (Gaussian: std sqrt(2/pi))
        assert np.abs(draws).mean() == pytest.approx(scale, rel=0.01)


def test_scale_follows_the_mechanism_and_the_framework_noise_is_switched_off() -> None:
    cfg = _config()
    noise = shared_noise_for(cfg, GAUSS, SHAPES)
    assert noise is not None and noise.kind == "gaussian" and noise.scale == pytest.approx(1.8)
    engine_mech = framework_mechanism(cfg, GAUSS)
    assert engine_mech.noise_scale == 0.0 and engine_mech.noise_multiplier == 0.0
    assert engine_mech.clip_norm == GAUSS.clip_norm and engine_mech.clip_kind == "l2"
    default = _config(source="framework")
    assert shared_noise_for(default, GAUSS, SHAPES) is None
    assert framework_mechanism(default, GAUSS) is GAUSS


def test_the_generator_needs_no_framework() -> None:
    """Drawing the noise imports neither TensorFlow nor torch."""
    code = ("import sys; from dpcore.shared_noise import SharedNoise; "
            "SharedNoise(0, {'w': (3,)}, 'gaussian', 1.0).step_noise(1); "
            "print(sorted({'tensorflow', 'torch'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


def test_add_neutral_sums_key_wise_with_missing_keys_as_zeros() -> None:
    a = {"x": np.ones(2, np.float32)}
    b = {"x": np.full(2, 2.0), "y": np.zeros(1)}
    total = add_neutral(a, b)
    assert total is not None
    np.testing.assert_array_equal(total["x"], [3.0, 3.0])
    assert set(total) == {"x", "y"} and add_neutral(None, None) is None


def test_default_leaves_the_config_hash_unchanged_and_shared_changes_it() -> None:
    default = _config(source="framework")
    assert "noise_source" not in default.to_dict()["privacy"]
    shared = _config()
    assert shared.to_dict()["privacy"]["noise_source"] == "shared"
    assert shared.config_hash != default.config_hash
    assert RunConfig.from_dict(shared.to_dict()) == shared


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"recipe": "library"}, "recipe=harmonised only"),
    ({"mechanism": "none"}, "needs DP-SGD"),
    ({"source": "tf"}, "privacy.noise_source"),
])
def test_refused_with_one_line(kwargs: dict, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        _config(**kwargs)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_fault_no_noise_makes_the_shared_noise_zero() -> None:
    silent = dataclasses.replace(GAUSS, noise_scale=0.0, noise_multiplier=0.0)
    noise = shared_noise_for(_config(), silent, SHAPES)
    assert noise is not None and not _flat(noise.step_noise(1)).any()
