"""privatize_dataset: both splits, cache reuse, byte-identical files, corrupt-file rebuild."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dpcore.data import Dataset, as_float01
from dpcore.errors import ConfigError, DataError, PrivacyError
from dpcore.ldp import DpPixMechanism, GaussianMechanism, LaplaceMechanism
from dpcore.ldp.privatize import cache_path_for, privatize_dataset, privatize_images


def _dataset(channels: int = 1, n_train: int = 30, n_test: int = 10, seed: int = 0) -> Dataset:
    rng = np.random.default_rng(seed)
    return Dataset(
        name="toy",
        task="image",
        x_train=rng.integers(0, 256, (n_train, 8, 8, channels), dtype=np.uint8),
        y_train=rng.integers(0, 2, n_train).astype(np.int64),
        x_test=rng.integers(0, 256, (n_test, 8, 8, channels), dtype=np.uint8),
        y_test=rng.integers(0, 2, n_test).astype(np.int64),
        class_names=("a", "b"),
        extra={"note": "generated"},
    )


def test_both_splits_noised_and_recorded(tmp_path: Path) -> None:
    ds = _dataset()
    mech = LaplaceMechanism(0.5)
    out = privatize_dataset(ds, mech, seed=3, cache_dir=tmp_path)
    assert out.x_train.dtype == np.float32 and out.x_test.dtype == np.float32
    assert not np.allclose(out.x_train, as_float01(ds.x_train))
    assert not np.allclose(out.x_test, as_float01(ds.x_test))
    assert np.array_equal(out.y_train, ds.y_train) and np.array_equal(out.y_test, ds.y_test)
    record = out.ldp
    assert record is not None and record.mechanism == "laplace"
    assert dict(record.params) == {"scale": 0.5, "clip": False}
    assert record.seed == 3 and record.splits == ("train", "test")
    assert record.source_fingerprint == ds.fingerprint
    assert record.privatised_fingerprint == out.fingerprint != ds.fingerprint
    assert record.dp_event == mech.dp_event(ds.input_shape, "image")
    assert out.extra == {"note": "generated"}  # facts of the data only: no LDP text in it
    as_json = record.to_dict()
    assert json.loads(as_json["ldp_params"]) == {"scale": 0.5, "clip": False}
    assert as_json["ldp_seed"] == "3" and as_json["ldp_splits"] == "train,test"
    assert as_json["dp_event"]["class_name"] == "LaplaceDpEvent"
    path = Path(record.cache_file)
    assert path == cache_path_for(ds, mech, 3, tmp_path) and path.is_file()
    with np.load(path, allow_pickle=False) as npz:  # plain numpy, no pickle
        assert np.array_equal(npz["x_train"], out.x_train)


def test_train_only_keeps_test_clean_and_same_train_noise(tmp_path: Path) -> None:
    ds = _dataset()
    mech = GaussianMechanism(0.2)
    both = privatize_dataset(ds, mech, 0, tmp_path / "a")
    train_only = privatize_dataset(ds, mech, 0, tmp_path / "b", splits=("train",))
    assert np.array_equal(train_only.x_test, as_float01(ds.x_test))
    assert train_only.x_test.dtype == np.float32
    assert np.array_equal(train_only.x_train, both.x_train)
    assert train_only.ldp is not None and train_only.ldp.splits == ("train",)


def test_cache_is_reused_not_recomputed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ds = _dataset()
    mech = LaplaceMechanism(1.0)
    first = privatize_dataset(ds, mech, 0, tmp_path)

    def boom(self: LaplaceMechanism, x01: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        raise AssertionError("the mechanism ran although the cache holds the result")

    monkeypatch.setattr(LaplaceMechanism, "apply", boom)
    second = privatize_dataset(ds, mech, 0, tmp_path)
    assert np.array_equal(first.x_train, second.x_train)
    assert np.array_equal(first.x_test, second.x_test)
    assert second.extra == first.extra and second.ldp == first.ldp
    # a different seed is a different cache entry: it must compute (and here, fail)
    with pytest.raises(AssertionError, match="mechanism ran"):
        privatize_dataset(ds, mech, 1, tmp_path)


def test_same_seed_byte_identical_other_seed_differs(tmp_path: Path) -> None:
    ds = _dataset(channels=3)
    mech = DpPixMechanism(k=3, m=2, epsilon=1.0)
    a = privatize_dataset(ds, mech, 7, tmp_path / "a")
    b = privatize_dataset(ds, mech, 7, tmp_path / "b")
    c = privatize_dataset(ds, mech, 8, tmp_path / "c")
    assert a.ldp is not None and b.ldp is not None and c.ldp is not None
    bytes_a = Path(a.ldp.cache_file).read_bytes()
    assert bytes_a == Path(b.ldp.cache_file).read_bytes()
    assert a.x_train.tobytes() == b.x_train.tobytes()
    assert not np.array_equal(a.x_train, c.x_train)
    assert bytes_a != Path(c.ldp.cache_file).read_bytes()
    # without a cache folder: same arrays, nothing written
    d = privatize_dataset(ds, mech, 7, None)
    assert np.array_equal(d.x_train, a.x_train) and d.ldp is not None and d.ldp.cache_file == ""


def test_noise_independent_of_chunking(tmp_path: Path) -> None:
    ds = _dataset(n_train=25)
    mech = GaussianMechanism(0.3)
    full = privatize_dataset(ds, mech, 5, None)
    x01 = as_float01(ds.x_train)
    picked = np.array([24, 3, 11])
    part = privatize_images(x01[picked], mech, 5, "train", picked)
    assert np.array_equal(part, full.x_train[picked])
    halves = np.concatenate([privatize_images(x01[:9], mech, 5, "train", np.arange(9)),
                             privatize_images(x01[9:], mech, 5, "train", np.arange(9, 25))])
    assert np.array_equal(halves, full.x_train)


@pytest.mark.parametrize("damage", ["garbage", "truncate", "flip"])
def test_corrupt_cache_file_is_rebuilt(tmp_path: Path, damage: str) -> None:
    ds = _dataset()
    mech = LaplaceMechanism(0.5)
    good = privatize_dataset(ds, mech, 0, tmp_path)
    assert good.ldp is not None
    path = Path(good.ldp.cache_file)
    original = path.read_bytes()
    if damage == "garbage":
        path.write_bytes(b"not an npz")
    elif damage == "truncate":
        path.write_bytes(original[: len(original) // 2])
    else:  # one flipped byte in the middle of the stored array data (caught by the zip CRC)
        data = bytearray(original)
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
    rebuilt = privatize_dataset(ds, mech, 0, tmp_path)
    assert np.array_equal(rebuilt.x_train, good.x_train)
    assert np.array_equal(rebuilt.x_test, good.x_test)
    assert path.read_bytes() == original


def test_clip_keeps_unit_range(tmp_path: Path) -> None:
    out = privatize_dataset(_dataset(), LaplaceMechanism(2.0, clip=True), 0, tmp_path)
    for x in (out.x_train, out.x_test):
        assert x.min() >= 0.0 and x.max() <= 1.0


def test_bad_arguments_rejected(tmp_path: Path) -> None:
    ds = _dataset()
    mech = LaplaceMechanism(1.0)
    with pytest.raises(ConfigError, match="seed=-1"):
        privatize_dataset(ds, mech, -1, tmp_path)
    with pytest.raises(ConfigError, match="splits"):
        privatize_dataset(ds, mech, 0, tmp_path, splits=("val",))
    with pytest.raises(ConfigError, match="splits"):
        privatize_dataset(ds, mech, 0, tmp_path, splits=())
    with pytest.raises(ConfigError, match="LdpMechanism"):
        privatize_dataset(ds, "laplace", 0, tmp_path)  # type: ignore[arg-type]
    text = Dataset(name="t", task="text", x_train=np.ones((3, 5), np.int32),
                   y_train=np.zeros(3, np.int64), x_test=np.ones((2, 5), np.int32),
                   y_test=np.zeros(2, np.int64), class_names=("a",))
    with pytest.raises(DataError, match="images only"):
        privatize_dataset(text, mech, 0, tmp_path)


def test_float_images_outside_unit_range_rejected(tmp_path: Path) -> None:
    ds = _dataset()
    bad = Dataset(name="f", task="image", x_train=ds.x_train.astype(np.float32),
                  y_train=ds.y_train, x_test=as_float01(ds.x_test), y_test=ds.y_test,
                  class_names=ds.class_names)
    with pytest.raises(PrivacyError, match=r"\[0, 1\]"):
        privatize_dataset(bad, LaplaceMechanism(1.0), 0, tmp_path)
