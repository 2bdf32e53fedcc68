"""``privacy.noise_key`` (dpcore.noise_key): which key a run's noise gets, its default by data
set, its refusals, what the config hash and the record see, and the shared noise it keys."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from dpcore.config import DataSpec, PrivacySpec, RunConfig, TrainSpec
from dpcore.errors import ConfigError
from dpcore.noise_key import (
    LEGACY_NOISE_KEY,
    NOISE_KEY_VERSION,
    bit_reproducible,
    default_noise_key,
    noise_key,
    noise_key_label,
    noise_key_record,
    resolved_noise_key,
)
from dpcore.shared_noise import shared_noise_for
from dpcore.trainloop import StepMechanism
from tests.committed_hashes import hash_before_noise_key

SHAPES = {"dense/kernel": (64, 10), "dense/bias": (10,)}
GAUSS = StepMechanism("l2", 1.0, "gaussian", 1.0, 1.0, 32)


def _config(*, data: str = "digits", key: str | None = None, source: str = "framework",
            mechanism: str = "dpsgd-gaussian", seed: int = 0, lr: float = 0.1,
            path: str | None = None, delta: float | None = None) -> RunConfig:
    return RunConfig(
        data=DataSpec(name=data, path=path),
        privacy=PrivacySpec(mechanism=mechanism,
                            noise_multiplier=None if mechanism in ("none", "ldp") else 1.0,
                            noise_source=source, noise_key=key, delta=delta),
        train=TrainSpec(epochs=1, batch_size=32, lr=lr), seed=seed)


# -- the default by data set -----------------------------------------------------------------
@pytest.mark.parametrize("name", ["mnist", "digits", "mnist5k", "pneumoniamnist", "retinamnist",
                                  "cats_vs_dogs", "imdb", "chest_xray"])
def test_registered_public_sets_default_to_seed(name: str) -> None:
    assert default_noise_key(DataSpec(name=name)) == "seed"


@pytest.mark.parametrize(("name", "path"), [("imagefolder:/scans", None),
                                            ("medmnist:/data/x.npz", None),
                                            ("mnist", "/my/own/files")])
def test_data_the_user_gives_defaults_to_secret(name: str, path: str | None) -> None:
    assert default_noise_key(DataSpec(name=name, path=path)) == "secret"
    assert resolved_noise_key(_config(data=name, path=path)) == "secret"


def test_only_dpsgd_runs_have_a_key() -> None:
    assert resolved_noise_key(_config(mechanism="none")) is None
    assert resolved_noise_key(_config()) == "seed"
    with pytest.raises(ConfigError, match="draws no gradient noise"):
        noise_key(_config(mechanism="none"), "engine")


# -- seed: mixed with the config hash --------------------------------------------------------
def test_two_configs_with_one_seed_get_different_keys_the_same_config_the_same() -> None:
    a, b = _config(seed=5), _config(seed=5, lr=0.2)
    assert a.config_hash != b.config_hash
    for stream in ("engine", "shared", "library"):
        assert noise_key(a, stream).value != noise_key(b, stream).value
        assert noise_key(a, stream).value == noise_key(_config(seed=5), stream).value
    # streams are independent, and the key fills the bits asked for
    assert len({noise_key(a, s).value for s in ("engine", "shared", "library")}) == 3
    assert noise_key(a, "engine", bits=192).value >= 2 ** 128


def test_two_configs_with_one_seed_draw_different_shared_noise() -> None:
    """The shared noise of step t was a function of (seed, t): every config of a seed added
    the same vector, scaled. Now two configs of one seed draw independent vectors, and one
    config draws the same vector every time."""
    def draw(cfg: RunConfig) -> np.ndarray:
        noise = shared_noise_for(cfg, GAUSS, SHAPES)
        assert noise is not None
        step = noise.step_noise(1)
        return np.concatenate([step[k].ravel() for k in sorted(step)])

    a = draw(_config(source="shared", seed=1))
    b = draw(_config(source="shared", seed=1, lr=0.3))
    np.testing.assert_array_equal(a, draw(_config(source="shared", seed=1)))
    assert not np.array_equal(a, b)
    assert abs(np.corrcoef(a, b)[0, 1]) < 0.15  # 650 coordinates: |r| ~ 0.04 by chance


def test_the_key_is_never_printed() -> None:
    key = noise_key(_config(), "engine")
    assert str(key.value) not in repr(key) and str(key.value) not in str(key)


# -- secret ----------------------------------------------------------------------------------
def test_secret_keys_come_from_os_entropy_and_differ_at_every_call(
        monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _config(key="secret")
    keys = {noise_key(cfg, "engine").value for _ in range(4)}
    assert len(keys) == 4
    drawn: list[int] = []
    monkeypatch.setattr("dpcore.noise_key.secrets.randbits",
                        lambda bits: drawn.append(bits) or 12345)
    key = noise_key(cfg, "engine", bits=128)
    assert drawn == [128] and key.value == 12345 and key.hardened and key.mode == "secret"


def test_secret_refuses_shared_noise_in_one_line() -> None:
    for kwargs in ({"key": "secret"}, {"data": "imagefolder:/scans"}):
        with pytest.raises(ConfigError) as err:
            _config(source="shared", **kwargs)
        text = str(err.value)
        assert "\n" not in text
        assert "noise_key='secret'" in text and "noise_source='shared'" in text
        assert "valid:" in text
    # the user's own data may share noise when the key is said to be the seed
    assert _config(source="shared", data="imagefolder:/scans", key="seed")


def test_secret_needs_dpsgd_and_unknown_keys_are_refused() -> None:
    with pytest.raises(ConfigError, match="keys DP-SGD noise"):
        _config(mechanism="none", key="secret")
    with pytest.raises(ConfigError, match="valid: seed, secret"):
        _config(key="public")


# -- the config hash -------------------------------------------------------------------------
def test_the_hash_sees_the_resolved_key_and_its_version() -> None:
    seeded = _config()
    assert _config(key="seed").config_hash == seeded.config_hash  # explicit = the default
    assert _config(key="secret").config_hash != seeded.config_hash
    assert "noise_key" not in seeded.to_dict()["privacy"]
    assert _config(key="secret").to_dict()["privacy"]["noise_key"] == "secret"
    assert RunConfig.from_dict(_config(key="secret").to_dict()) == _config(key="secret")
    # the user's files: the default (secret) hashes as the explicit secret
    folder = _config(data="imagefolder:/scans")
    assert folder.config_hash == _config(data="imagefolder:/scans", key="secret").config_hash
    # every DP-SGD run's hash moved (old records are not taken for new runs) ...
    assert seeded.config_hash != hash_before_noise_key(seeded)
    assert NOISE_KEY_VERSION == 2
    # ... a non-private run's did not
    plain = _config(mechanism="none")
    assert plain.config_hash == hash_before_noise_key(plain)


def test_a_set_delta_keeps_the_default_delta_rule_out_of_the_hash() -> None:
    """A private run with an explicit delta hashes with its noise key only; one that leaves
    delta unset also carries the default-delta rule (the default changed what it computes)."""
    import hashlib

    given = _config(delta=1e-5)
    raw = given.to_dict()
    raw["privacy"].update(noise_key="seed", noise_key_version=NOISE_KEY_VERSION)
    canonical = json.dumps(raw, sort_keys=True, separators=(",", ":"))
    assert given.config_hash == hashlib.sha256(canonical.encode()).hexdigest()[:16]
    unset = _config()
    raw = unset.to_dict()
    raw["privacy"].update(noise_key="seed", noise_key_version=NOISE_KEY_VERSION,
                          default_delta_rule=2)
    canonical = json.dumps(raw, sort_keys=True, separators=(",", ":"))
    assert unset.config_hash == hashlib.sha256(canonical.encode()).hexdigest()[:16]


# -- the record ------------------------------------------------------------------------------
def test_the_record_says_which_key_and_never_the_key() -> None:
    seeded = noise_key_record(_config(), "torch")
    assert seeded["noise_key"] == "seed" and seeded["bit_reproducible"] is True
    secret = noise_key_record(_config(key="secret"), "tf")
    assert secret["noise_key"] == "secret" and secret["bit_reproducible"] is False
    assert "Holohan" in secret["noise_sampler"]
    assert "Mironov" in noise_key_record(
        dataclasses.replace(_config(), privacy=PrivacySpec(
            mechanism="dpsgd-laplace", noise_multiplier=1.0)), "tf")["noise_sampler"]
    assert noise_key_record(_config(mechanism="none"), "tf") == {}
    assert not bit_reproducible(secret) and bit_reproducible(seeded)
    assert bit_reproducible({})  # a record without a key: reproducible as before


def test_labels_name_the_key_and_old_records() -> None:
    assert noise_key_label(None) == LEGACY_NOISE_KEY
    assert "run seed only" in LEGACY_NOISE_KEY
    assert "not bit-reproducible" in noise_key_label("secret")
    assert "config hash" in noise_key_label("seed")
