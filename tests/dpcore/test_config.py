"""RunConfig: validation names the key and the valid range; hashing; YAML and overrides."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dpcore.config import (
    PerfSpec,
    PrivacySpec,
    RunConfig,
    TrainSpec,
    apply_overrides,
    default_delta,
)
from dpcore.errors import ConfigError


def test_default_config_is_valid_and_non_private() -> None:
    config = RunConfig()
    assert config.privacy.mechanism == "none"
    assert len(config.config_hash) == 16


def test_hash_is_stable_and_sensitive() -> None:
    a = RunConfig(privacy=PrivacySpec(mechanism="dpsgd-gaussian", noise_multiplier=1.0))
    b = RunConfig(privacy=PrivacySpec(mechanism="dpsgd-gaussian", noise_multiplier=1.0))
    c = RunConfig(privacy=PrivacySpec(mechanism="dpsgd-gaussian", noise_multiplier=1.1))
    assert a.config_hash == b.config_hash
    assert a.config_hash != c.config_hash
    assert a.replace(seed=1).config_hash != a.config_hash


def test_round_trip_through_dict() -> None:
    config = RunConfig(
        privacy=PrivacySpec(mechanism="dpsgd-laplace", target_epsilon=2.0, delta=1e-6),
        train=TrainSpec(epochs=None, steps=10, optimizer="adam", lr=1e-3, ema_decay=0.99),
        seed=3,
    )
    assert RunConfig.from_dict(config.to_dict()) == config


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        (["privacy.mechanism=dpsgd-gaussian", "privacy.noise_multiplier=1",
          "privacy.delta=1.5"], "privacy.delta=1.5"),
        (["privacy.mechanism=dpsgd-gaussian", "privacy.noise_multiplier=1",
          "privacy.delta=0"], "(0, 1)"),
        (["privacy.mechanism=dpsgd-gaussian", "privacy.target_epsilon=0"],
         "privacy.target_epsilon=0"),
        (["privacy.mechanism=dpsgd-gaussian", "privacy.target_epsilon=-1"], "> 0"),
        (["privacy.mechanism=dpsgd-gaussian", "privacy.noise_multiplier=-0.5"], ">= 0"),
        (["privacy.mechanism=dpsgd-gaussian"], "exactly one of"),
        (["privacy.mechanism=dpsgd-gaussian", "privacy.noise_multiplier=1",
          "privacy.target_epsilon=1"], "exactly one of"),
        (["privacy.noise_multiplier=1"], "adds no gradient noise"),
        (["privacy.mechanism=magic"], "valid: none, dpsgd-gaussian"),
        (["privacy.sampling=weighted"], "valid: poisson, shuffle"),
        (["privacy.max_grad_norm=0"], "privacy.max_grad_norm=0"),
        (["train.batch_size=0"], "train.batch_size=0"),
        (["train.lr=nan"], "train.lr"),
        (["train.momentum=1"], "[0, 1)"),
        (["train.optimizer=adam", "train.momentum=0.9"], "applies to SGD only"),
        (["train.steps=5"], "exactly one of train.epochs and train.steps"),
        (["model.activation=gelu"], "valid: relu, tanh, tempered_sigmoid"),
        (["data.channels=2"], "data.channels=2"),
        (["data.ldp_mechanism=laplace"], "privacy.mechanism='ldp'"),
        (["privacy.mechanism=ldp"], "needs data.ldp_mechanism"),
        (["seed=-1"], "seed=-1"),
        (["train.learning_rate=0.1"], "unknown key(s) train.learning_rate"),
        (["optimizer=sgd"], "unknown config key(s) optimizer"),
    ],
)
def test_invalid_values_are_rejected_with_key_and_range(
    overrides: list[str], fragment: str
) -> None:
    with pytest.raises(ConfigError) as excinfo:
        RunConfig().with_overrides(overrides)
    assert fragment in str(excinfo.value)


def test_target_epsilon_inf_is_refused_for_dpsgd() -> None:
    with pytest.raises(ConfigError, match="mechanism='none'"):
        PrivacySpec(mechanism="dpsgd-gaussian", target_epsilon=math.inf)


def test_yaml_file_with_scientific_notation(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(
        "data: {name: digits}\n"
        "privacy: {mechanism: dpsgd-gaussian, noise_multiplier: 1.1, delta: 1e-5}\n"
        "train: {epochs: 2, batch_size: 64, lr: 0.5}\n"
        "seed: 4\n"
    )
    config = RunConfig.from_file(path)
    assert config.privacy.delta == pytest.approx(1e-5)
    assert config.train.batch_size == 64 and config.seed == 4


def test_unreadable_config_file_names_it(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("data: [unclosed\n")
    with pytest.raises(ConfigError, match="bad.yaml"):
        RunConfig.from_file(path)
    with pytest.raises(ConfigError, match="does not exist"):
        RunConfig.from_file(tmp_path / "missing.yaml")


def test_unknown_version_rejected() -> None:
    raw = RunConfig().to_dict()
    raw["version"] = 99
    with pytest.raises(ConfigError, match="version=99"):
        RunConfig.from_dict(raw)


def test_default_delta_is_the_power_of_ten_below_one_over_ten_n() -> None:
    assert default_delta(60000) == pytest.approx(1e-6)
    assert default_delta(4708) == pytest.approx(1e-5)
    assert default_delta(1000) == pytest.approx(1e-5)
    assert default_delta(999) == pytest.approx(1e-4)
    # a folder of 159 images: 1e-4, so publishing any one image outright stays under 2 %
    assert default_delta(159) == pytest.approx(1e-4)
    assert 1 - (1 - default_delta(159)) ** 159 < 0.02
    with pytest.raises(ConfigError):
        default_delta(0)


@given(st.integers(min_value=1, max_value=10**9))
def test_default_delta_property(n: int) -> None:
    """Strictly below 1/(10 N) (N delta < 0.1), and the largest power of ten that is."""
    delta = default_delta(n)
    assert delta < 1.0 / (10 * n)
    assert delta * 10 >= 1.0 / (10 * n) or math.isclose(delta * 10, 1.0 / (10 * n))
    assert math.isclose(math.log10(delta), round(math.log10(delta)))


def test_perf_spec_is_not_part_of_the_hash() -> None:
    # PerfSpec is a separate object by design: RunConfig has no field for it.
    assert "perf" not in RunConfig().to_dict()
    with pytest.raises(ConfigError, match="perf.engine"):
        PerfSpec(engine="turbo")
    with pytest.raises(ConfigError, match=r"perf.library_jacobian_batch_size.*valid"):
        PerfSpec(library_jacobian_batch_size=0)
    assert PerfSpec(library_jacobian_batch_size=None).library_jacobian_batch_size is None


@given(
    noise=st.floats(min_value=0, max_value=100, allow_nan=False),
    delta=st.floats(min_value=1e-12, max_value=0.5),
    batch=st.integers(min_value=1, max_value=4096),
    seed=st.integers(min_value=0, max_value=2**31),
)
def test_overrides_round_trip_property(noise: float, delta: float, batch: int, seed: int) -> None:
    raw = apply_overrides(
        RunConfig().to_dict(),
        [
            "privacy.mechanism=dpsgd-gaussian",
            f"privacy.noise_multiplier={noise!r}",
            f"privacy.delta={delta!r}",
            f"train.batch_size={batch}",
            f"seed={seed}",
        ],
    )
    config = RunConfig.from_dict(raw)
    assert config.privacy.noise_multiplier == pytest.approx(noise)
    assert config.privacy.delta == pytest.approx(delta)
    assert RunConfig.from_dict(config.to_dict()).config_hash == config.config_hash
