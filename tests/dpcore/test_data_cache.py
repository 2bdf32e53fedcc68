"""The decoded-array cache: reuse, invalidation, corruption, atomic writes; fingerprints."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

import dpcore.data.loaders.mnist as mnist_loader
from dpcore.config import DataSpec
from dpcore.data import load_dataset
from dpcore.data.cache import CACHE_ENV, cache_dir
from dpcore.errors import DataError
from dpcore.io import META_KEY
from tests.dpcore.data_writers import isolate, tiny_mnist, write_mnist_idx


@pytest.fixture()
def cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    return isolate(monkeypatch, tmp_path)


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    write_mnist_idx(tmp_path / "root" / "mnist", tiny_mnist())
    return tmp_path / "root"


def _forbid_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: object, **kwargs: object) -> None:
        raise AssertionError("decoded again although a valid cache entry exists")

    monkeypatch.setattr(mnist_loader, "decode", fail)


def _entries(cache: Path) -> list[Path]:
    return sorted(cache.glob("*.npz"))


def test_second_load_reads_the_cache(monkeypatch, cache: Path, root: Path) -> None:
    first = load_dataset(DataSpec(name="mnist"), root)
    assert len(_entries(cache)) == 1
    assert not list(cache.glob("*.tmp"))  # the temp file was renamed into place
    _forbid_decoding(monkeypatch)
    second = load_dataset(DataSpec(name="mnist"), root)
    assert second.fingerprint == first.fingerprint
    np.testing.assert_array_equal(second.x_train, first.x_train)
    assert second.extra == first.extra and second.class_names == first.class_names
    with pytest.raises(AssertionError, match="decoded again"):
        load_dataset(DataSpec(name="mnist"), root, cache=False)


def test_options_and_sources_change_the_key(monkeypatch, cache: Path, root: Path) -> None:
    load_dataset(DataSpec(name="mnist"), root)
    load_dataset(DataSpec(name="mnist", image_size=14), root)
    load_dataset(DataSpec(name="mnist"), root, resample="lanczos")
    assert len(_entries(cache)) == 3
    # a source file replaced by different data (one more image) is decoded again
    arrays = tiny_mnist(n_train=21, seed=5)
    write_mnist_idx(root / "mnist", arrays)
    ds = load_dataset(DataSpec(name="mnist"), root)
    np.testing.assert_array_equal(ds.x_train[..., 0], arrays["x_train"])
    assert len(_entries(cache)) == 4


def test_corrupt_cache_is_rebuilt(monkeypatch, cache: Path, root: Path) -> None:
    good = load_dataset(DataSpec(name="mnist"), root)
    (entry,) = _entries(cache)
    entry.write_bytes(entry.read_bytes()[:200])  # truncated
    again = load_dataset(DataSpec(name="mnist"), root)
    assert again.fingerprint == good.fingerprint
    assert entry.stat().st_size > 200  # rewritten
    entry.write_bytes(b"not a zip at all")
    assert load_dataset(DataSpec(name="mnist"), root).fingerprint == good.fingerprint


def test_tampered_cache_is_not_trusted(monkeypatch, cache: Path, root: Path) -> None:
    good = load_dataset(DataSpec(name="mnist"), root)
    (entry,) = _entries(cache)
    with np.load(entry) as stored:
        arrays = {k: stored[k] for k in stored.files}
    arrays["x_train"] = arrays["x_train"].copy()
    arrays["x_train"][0, 0, 0, 0] ^= 0xFF  # a valid npz whose pixels no longer match
    np.savez(entry, **arrays)
    again = load_dataset(DataSpec(name="mnist"), root)
    np.testing.assert_array_equal(again.x_train, good.x_train)
    meta = json.loads(str(arrays[META_KEY][()]))
    assert meta["fingerprint"] == good.fingerprint


def test_unwritable_cache_still_loads(monkeypatch, tmp_path: Path, root: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv(CACHE_ENV, str(blocker / "cache"))  # cannot mkdir under a file
    ds = load_dataset(DataSpec(name="mnist"), root)
    assert len(ds.y_train) == 20


def test_cache_location(monkeypatch, tmp_path: Path, root: Path) -> None:
    monkeypatch.delenv(CACHE_ENV, raising=False)
    assert cache_dir(root) == root / ".cache"
    load_dataset(DataSpec(name="mnist"), root)
    assert len(list((root / ".cache").glob("mnist-*.npz"))) == 1
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir(None) == tmp_path / "home" / ".dpcompare" / "cache"
    assert cache_dir(tmp_path / "missing") == tmp_path / "home" / ".dpcompare" / "cache"


def test_fingerprint_stable_and_content_sensitive(cache: Path, root: Path) -> None:
    a = load_dataset(DataSpec(name="mnist"), root, cache=False)
    b = load_dataset(DataSpec(name="mnist"), root)
    assert a.fingerprint == b.fingerprint and len(a.fingerprint) == 16
    x = a.x_train.copy()
    x[3, 10, 10, 0] ^= 1
    assert dataclasses.replace(a, x_train=x).fingerprint != a.fingerprint
    y = a.y_test.copy()
    y[0] = (y[0] + 1) % 10
    assert dataclasses.replace(a, y_test=y).fingerprint != a.fingerprint
    limited = load_dataset(DataSpec(name="mnist", train_limit=10), root)
    assert limited.fingerprint != a.fingerprint


def test_missing_source_after_locating_is_a_data_error(cache: Path, root: Path) -> None:
    (root / "mnist" / "train-images-idx3-ubyte.gz").unlink()
    with pytest.raises(DataError, match="MNIST files missing"):
        load_dataset(DataSpec(name="mnist"), root)
