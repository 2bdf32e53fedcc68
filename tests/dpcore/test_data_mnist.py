"""MNIST loader: IDX (gzipped and plain), Keras npz, and every malformed-input error."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest

from dpcore.config import DataSpec
from dpcore.data import load_dataset
from dpcore.data.loaders.mnist import read_idx
from dpcore.errors import DataError
from tests.dpcore.data_writers import (
    SHARED_DATA,
    idx_bytes,
    isolate,
    needs_shared_data,
    tiny_mnist,
    write_idx,
    write_mnist_idx,
)


@pytest.fixture(autouse=True)
def _cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate(monkeypatch, tmp_path)


def _check_exact(ds, arrays: dict[str, np.ndarray]) -> None:
    assert ds.task == "image"
    assert ds.x_train.dtype == np.uint8 and ds.y_train.dtype == np.int64
    np.testing.assert_array_equal(ds.x_train, arrays["x_train"][..., None])
    np.testing.assert_array_equal(ds.x_test, arrays["x_test"][..., None])
    np.testing.assert_array_equal(ds.y_train, arrays["y_train"])
    np.testing.assert_array_equal(ds.y_test, arrays["y_test"])
    assert ds.class_names == tuple("0123456789")


@pytest.mark.parametrize("gz", [True, False], ids=["gzipped", "plain"])
def test_idx_files_load_exactly(tmp_path: Path, gz: bool) -> None:
    arrays = tiny_mnist()
    write_mnist_idx(tmp_path / "root" / "mnist", arrays, gz=gz)
    ds = load_dataset(DataSpec(name="mnist"), tmp_path / "root")
    _check_exact(ds, arrays)
    assert ds.source == str(tmp_path / "root" / "mnist")


def test_keras_npz(tmp_path: Path) -> None:
    arrays = tiny_mnist()
    (tmp_path / "mnist").mkdir()
    np.savez(tmp_path / "mnist" / "mnist.npz", **arrays)
    _check_exact(load_dataset(DataSpec(name="mnist"), tmp_path), arrays)
    # data.path pointing straight at the npz file works too
    _check_exact(load_dataset(DataSpec(name="mnist", path=str(tmp_path / "mnist" / "mnist.npz"))),
                 arrays)


def test_dims_come_from_the_header(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    arr = rng.integers(0, 256, (3, 5, 7), dtype=np.uint8)
    path = write_idx(tmp_path / "x.gz", arr, 2051)
    np.testing.assert_array_equal(read_idx(path, 2051), arr)


def test_wrong_magic_number_is_named(tmp_path: Path) -> None:
    path = write_idx(tmp_path / "labels.gz", np.zeros(4, np.uint8), 2049)
    with pytest.raises(DataError, match=r"labels\.gz.*magic number 2049.*is not 2051"):
        read_idx(path, 2051)


def test_truncated_idx_payload(tmp_path: Path) -> None:
    data = idx_bytes(np.zeros((4, 28, 28), np.uint8), 2051)[:-10]
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(data)
    with pytest.raises(DataError, match=r"train-images-idx3-ubyte: IDX file is truncated"):
        read_idx(path, 2051)


def test_trailing_bytes(tmp_path: Path) -> None:
    path = tmp_path / "x"
    path.write_bytes(idx_bytes(np.zeros((2, 2, 2), np.uint8), 2051) + b"\0")
    with pytest.raises(DataError, match="longer than its header says"):
        read_idx(path, 2051)


def test_truncated_gzip_stream(tmp_path: Path) -> None:
    full = gzip.compress(idx_bytes(np.arange(2000, dtype=np.uint16).astype(np.uint8)
                                   .reshape(20, 10, 10), 2051))
    path = tmp_path / "x.gz"
    path.write_bytes(full[: len(full) // 2])
    with pytest.raises(DataError, match=r"x\.gz: corrupt or truncated"):
        read_idx(path, 2051)


def test_corrupt_gzip_bytes(tmp_path: Path) -> None:
    path = tmp_path / "x.gz"
    path.write_bytes(b"\x1f\x8b" + b"\x08\x00garbage-not-deflate" * 3)
    with pytest.raises(DataError, match=r"x\.gz: corrupt or truncated"):
        read_idx(path, 2051)


def test_short_header(tmp_path: Path) -> None:
    path = tmp_path / "x"
    path.write_bytes(struct.pack(">I", 2051) + b"\0\0")
    with pytest.raises(DataError, match="header truncated"):
        read_idx(path, 2051)


def test_missing_idx_file_lists_the_missing_ones(tmp_path: Path) -> None:
    write_mnist_idx(tmp_path / "mnist", tiny_mnist())
    (tmp_path / "mnist" / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DataError, match=r"MNIST files missing: t10k-labels-idx1-ubyte\[\.gz\]"):
        load_dataset(DataSpec(name="mnist"), tmp_path)


def test_label_out_of_range(tmp_path: Path) -> None:
    arrays = tiny_mnist()
    arrays["y_train"][3] = 10
    write_mnist_idx(tmp_path / "mnist", arrays)
    with pytest.raises(DataError, match=r"train-labels-idx1-ubyte\.gz: labels range over 0\.\.10; "
                                        r"valid: 0\.\.9"):
        load_dataset(DataSpec(name="mnist"), tmp_path)


def test_image_label_count_mismatch(tmp_path: Path) -> None:
    arrays = tiny_mnist()
    arrays["y_test"] = arrays["y_test"][:-1]
    write_mnist_idx(tmp_path / "mnist", arrays)
    with pytest.raises(DataError, match="test has 10 inputs but 9 labels"):
        load_dataset(DataSpec(name="mnist"), tmp_path)


def test_empty_split(tmp_path: Path) -> None:
    arrays = tiny_mnist()
    arrays["x_test"], arrays["y_test"] = arrays["x_test"][:0], arrays["y_test"][:0]
    write_mnist_idx(tmp_path / "mnist", arrays)
    with pytest.raises(DataError, match="the test split is empty"):
        load_dataset(DataSpec(name="mnist"), tmp_path)


def test_missing_data_says_where_and_how(tmp_path: Path) -> None:
    with pytest.raises(DataError) as info:
        load_dataset(DataSpec(name="mnist"), tmp_path)
    message = str(info.value)
    assert str(tmp_path / "mnist") in message and "train-images-idx3-ubyte.gz" in message
    assert "\n" not in message


@needs_shared_data
def test_shared_mnist_matches_its_readme() -> None:
    assert SHARED_DATA is not None
    ds = load_dataset(DataSpec(name="mnist"), SHARED_DATA)
    assert ds.x_train.shape == (60000, 28, 28, 1) and ds.x_test.shape == (10000, 28, 28, 1)
    np.testing.assert_array_equal(ds.y_train[:8], [5, 0, 4, 1, 9, 2, 1, 3])
    np.testing.assert_array_equal(
        np.bincount(ds.y_train), [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
    )
    np.testing.assert_array_equal(
        np.bincount(ds.y_test), [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
    )
    assert abs(float(ds.x_train.mean()) / 255 - 0.13066) < 5e-5
