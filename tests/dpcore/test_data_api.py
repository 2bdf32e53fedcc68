"""Public data API: data root, registry look-ups, errors, table, pixel helpers, splits."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dpcore.config import DataSpec
from dpcore.data import DATASETS, as_float01, dataset_table, load_dataset, resolve_data_root
from dpcore.data.images import conform_images, to_pixel_dtype
from dpcore.data.splits import split_counts, stratified_split, subset_indices
from dpcore.errors import ConfigError, DataError
from tests.dpcore.data_writers import isolate, tiny_mnist, write_medmnist, write_mnist_idx


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate(monkeypatch, tmp_path)
    monkeypatch.delenv("DPCOMPARE_DATA_DIR", raising=False)


def test_data_root_precedence(monkeypatch, tmp_path: Path) -> None:
    cli, env = tmp_path / "cli", tmp_path / "env"
    cli.mkdir()
    env.mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert resolve_data_root(None) == tmp_path / "home" / ".dpcompare" / "data"  # need not exist
    monkeypatch.setenv("DPCOMPARE_DATA_DIR", str(env))
    assert resolve_data_root(None) == env
    assert resolve_data_root(str(cli)) == cli


def test_data_root_that_does_not_exist(monkeypatch, tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"data directory .*nope \(from --data-dir\) does not "
                                        r"exist"):
        resolve_data_root(str(tmp_path / "nope"))
    monkeypatch.setenv("DPCOMPARE_DATA_DIR", str(tmp_path / "gone"))
    with pytest.raises(DataError, match=r"gone \(from \$DPCOMPARE_DATA_DIR\) does not exist"):
        resolve_data_root(None)
    (tmp_path / "f").write_text("")
    with pytest.raises(DataError, match="is not a folder"):
        resolve_data_root(str(tmp_path / "f"))


def test_unknown_name_lists_valid_ones() -> None:
    with pytest.raises(DataError) as info:
        load_dataset(DataSpec(name="cifar10"))
    message = str(info.value)
    assert message.startswith("unknown data set 'cifar10'; valid: ")
    for name in DATASETS:
        assert name in message
    assert "medmnist:PATH" in message


def test_unknown_loader_option() -> None:
    with pytest.raises(ConfigError, match=r"unknown loader option\(s\) vocab_size for data set "
                                          r"'digits'; valid: resample, test_fraction"):
        load_dataset(DataSpec(name="digits"), vocab_size=3)


def test_missing_data_set_names_path_and_how_to_get(tmp_path: Path) -> None:
    with pytest.raises(DataError) as info:
        load_dataset(DataSpec(name="retinamnist"), tmp_path)
    message = str(info.value)
    assert f"looked for {tmp_path / 'retinamnist' / 'retinamnist.npz'}" in message
    assert "zenodo" in message and "\n" not in message


def test_explicit_path_missing(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"data.path='.*nothing' does not exist"):
        load_dataset(DataSpec(name="mnist", path=str(tmp_path / "nothing")))


def test_explicit_path_overrides_root(tmp_path: Path) -> None:
    arrays = tiny_mnist()
    write_mnist_idx(tmp_path / "elsewhere", arrays)
    ds = load_dataset(DataSpec(name="mnist", path=str(tmp_path / "elsewhere")))
    np.testing.assert_array_equal(ds.y_train, arrays["y_train"])


def test_dataset_table(tmp_path: Path) -> None:
    write_mnist_idx(tmp_path / "mnist", tiny_mnist(n_train=30, n_test=7))
    write_medmnist(tmp_path / "retinamnist" / "retinamnist.npz", n=(9, 2, 5), rgb=True,
                   n_classes=5)
    (tmp_path / "pneumoniamnist").mkdir()
    (tmp_path / "pneumoniamnist" / "pneumoniamnist.npz").write_bytes(b"broken")
    rows = {row["name"]: row for row in dataset_table(tmp_path)}
    assert list(rows) == list(DATASETS)
    assert (rows["mnist"]["status"], rows["mnist"]["train"], rows["mnist"]["test"],
            rows["mnist"]["sizes"]) == ("found", 30, 7, "found")
    assert rows["mnist"]["found_at"] == str(tmp_path / "mnist")
    assert (rows["retinamnist"]["train"], rows["retinamnist"]["val"]) == (9, 2)
    assert rows["pneumoniamnist"]["status"] == "unreadable"
    assert "pneumoniamnist.npz" in rows["pneumoniamnist"]["error"]
    aptos = rows["aptos"]
    assert aptos["status"] == "missing" and aptos["sizes"] == "documented"
    assert (aptos["train"], aptos["test"]) == DATASETS["aptos"].documented_sizes
    assert str(tmp_path / "aptos") in aptos["how_to_get"]
    assert rows["mnist5k"]["status"] == "built in"
    assert (rows["mnist5k"]["train"], rows["mnist5k"]["test"]) == (4000, 1000)
    assert rows["imdb"]["task"] == "text" and rows["retinamnist"]["classes"] == 5


def test_as_float01() -> None:
    x = np.arange(256, dtype=np.uint8).reshape(1, 16, 16, 1)
    out = as_float01(x)
    assert out.dtype == np.float32 and out.min() == 0.0 and out.max() == 1.0
    np.testing.assert_array_equal(out.ravel(), np.arange(256, dtype=np.float32) / 255)
    f = np.full((2, 2), 0.5, np.float32)
    assert as_float01(f) is f
    with pytest.raises(DataError, match="as_float01: images are int32"):
        as_float01(np.zeros(3, np.int32))


def test_pixel_dtype_rules() -> None:
    assert to_pixel_dtype(np.array([0.0, 255.0]), "w").dtype == np.uint8
    assert to_pixel_dtype(np.array([0.0, 0.5]), "w").dtype == np.float32
    with pytest.raises(DataError, match="w: float pixels range over 0..2.5"):
        to_pixel_dtype(np.array([0.0, 2.5]), "w")
    with pytest.raises(DataError, match="w: integer pixels range over -1..3"):
        to_pixel_dtype(np.array([-1, 3]), "w")


def test_conform_float_images() -> None:
    x = np.zeros((2, 4, 4, 3), np.float32)
    x[..., 0] = 1.0  # pure red
    out = conform_images(x, image_size=2, channels=1)
    assert out.shape == (2, 2, 2, 1) and out.dtype == np.float32
    np.testing.assert_allclose(out, 0.299, atol=1e-6)
    assert conform_images(x, None, None) is x


def test_splits() -> None:
    assert split_counts(1797) == (1437, 360)
    assert split_counts(5000) == (4000, 1000)
    y = np.repeat(np.arange(4), 10)
    train, test = stratified_split(y, 0.25, seed=7)
    assert np.all(np.diff(train) > 0) and np.all(np.diff(test) > 0)
    assert set(train) | set(test) == set(range(40)) and not set(train) & set(test)
    assert sorted(np.bincount(y[test])) == [2, 2, 3, 3]
    again, _ = stratified_split(y, 0.25, seed=7)
    np.testing.assert_array_equal(train, again)
    keep = subset_indices(y, 8, seed=1)
    np.testing.assert_array_equal(np.bincount(y[keep]), [2, 2, 2, 2])
    np.testing.assert_array_equal(subset_indices(y, 100, seed=1), np.arange(40))
    # a class with one member cannot be stratified: falls back to a seeded random subset
    odd = np.array([0] * 9 + [1])
    assert len(subset_indices(odd, 5, seed=0)) == 5
