"""MedMNIST npz loader: pneumoniamnist, retinamnist, medmnist:PATH; val handling; errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dpcore.config import DataSpec
from dpcore.data import load_dataset
from dpcore.errors import ConfigError, DataError
from tests.dpcore.data_writers import SHARED_DATA, isolate, needs_shared_data, write_medmnist


@pytest.fixture(autouse=True)
def _cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate(monkeypatch, tmp_path)


def test_gray_npz_gains_channel_axis_and_keeps_official_split(tmp_path: Path) -> None:
    arrays = write_medmnist(tmp_path / "pneumoniamnist" / "pneumoniamnist.npz")
    ds = load_dataset(DataSpec(name="pneumoniamnist"), tmp_path)
    np.testing.assert_array_equal(ds.x_train, arrays["train_images"][..., None])
    np.testing.assert_array_equal(ds.x_test, arrays["test_images"][..., None])
    np.testing.assert_array_equal(ds.y_train, arrays["train_labels"][:, 0])
    assert ds.y_train.dtype == np.int64
    assert ds.class_names == ("normal", "pneumonia")
    assert ds.extra["val"] == "official val split (4) not used"


def test_val_can_be_merged_into_train(tmp_path: Path) -> None:
    arrays = write_medmnist(tmp_path / "pneumoniamnist" / "pneumoniamnist.npz")
    ds = load_dataset(DataSpec(name="pneumoniamnist"), tmp_path, val="train")
    np.testing.assert_array_equal(
        ds.x_train[..., 0], np.concatenate([arrays["train_images"], arrays["val_images"]])
    )
    assert len(ds.y_train) == 16 and "appended to train" in ds.extra["val"]


def test_official_file_preferred_then_reconstructed(tmp_path: Path) -> None:
    folder = tmp_path / "pneumoniamnist"
    write_medmnist(folder / "pneumoniamnist_balanced.npz", n=(4, 2, 2))
    write_medmnist(folder / "pneumoniamnist_reconstructed.npz", n=(6, 2, 2))
    ds = load_dataset(DataSpec(name="pneumoniamnist"), tmp_path)
    assert len(ds.y_train) == 6 and "sample order differs" in ds.extra["note"]
    write_medmnist(folder / "pneumoniamnist.npz", n=(8, 2, 2))
    ds = load_dataset(DataSpec(name="pneumoniamnist"), tmp_path)
    assert len(ds.y_train) == 8 and "note" not in ds.extra


def test_rgb_retina_with_flat_labels(tmp_path: Path) -> None:
    arrays = write_medmnist(tmp_path / "retinamnist" / "retinamnist.npz", rgb=True, n_classes=5,
                            label_shape="flat")
    ds = load_dataset(DataSpec(name="retinamnist", channels=1), tmp_path)
    assert ds.x_train.shape == (12, 28, 28, 1) and ds.n_classes == 5
    r, g, b = (arrays["train_images"][0, ..., c].astype(int) for c in range(3))
    # Pillow's ITU-R 601-2 luma, rounded
    expected = (r * 299 + g * 587 + b * 114 + 500) // 1000
    np.testing.assert_allclose(ds.x_train[0, ..., 0], expected, atol=1)


def test_medmnist_path_infers_classes(tmp_path: Path) -> None:
    path = tmp_path / "any.npz"
    write_medmnist(path, n_classes=3)
    ds = load_dataset(DataSpec(name=f"medmnist:{path}"))
    assert ds.class_names == ("0", "1", "2") and ds.name == f"medmnist:{path}"
    ds = load_dataset(DataSpec(name=f"medmnist:{path}"), n_classes=4)
    assert ds.n_classes == 4
    # relative paths are also looked for under the data root
    assert load_dataset(DataSpec(name="medmnist:any.npz"), tmp_path).n_classes == 3


def test_medmnist_path_missing(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"medmnist:.*nope\.npz not found"):
        load_dataset(DataSpec(name=f"medmnist:{tmp_path / 'nope.npz'}"))


def _npz(path: Path, **arrays: np.ndarray) -> Path:
    np.savez(path, **arrays)
    return path


def _good(n: int = 4, gray: bool = True) -> dict[str, np.ndarray]:
    shape = (n, 28, 28) if gray else (n, 28, 28, 3)
    return {
        "train_images": np.zeros(shape, np.uint8), "train_labels": np.arange(n)[:, None] % 2,
        "test_images": np.zeros(shape, np.uint8), "test_labels": np.arange(n)[:, None] % 2,
    }


def test_missing_key_lists_what_is_there(tmp_path: Path) -> None:
    arrays = _good()
    del arrays["test_labels"]
    path = _npz(tmp_path / "x.npz", **arrays)
    with pytest.raises(DataError, match=r"x\.npz: has no array test_labels; it holds: .*"
                                        r"train_images"):
        load_dataset(DataSpec(name=f"medmnist:{path}"))


def test_multilabel_shape_rejected(tmp_path: Path) -> None:
    arrays = _good()
    arrays["train_labels"] = np.zeros((4, 14), np.uint8)
    path = _npz(tmp_path / "x.npz", **arrays)
    with pytest.raises(DataError, match=r"\[train_labels\]: labels have shape \(4, 14\)"):
        load_dataset(DataSpec(name=f"medmnist:{path}"))


def test_labels_out_of_range_for_registry_set(tmp_path: Path) -> None:
    arrays = _good()
    arrays["test_labels"][0] = 2
    (tmp_path / "pneumoniamnist").mkdir()
    _npz(tmp_path / "pneumoniamnist" / "pneumoniamnist.npz", **arrays)
    with pytest.raises(DataError, match=r"test_labels\]: labels range over 0\.\.2; valid: 0\.\.1"):
        load_dataset(DataSpec(name="pneumoniamnist"), tmp_path)


def test_nan_pixels(tmp_path: Path) -> None:
    arrays = _good()
    arrays["train_images"] = np.full((4, 28, 28), 0.5, np.float32)
    arrays["train_images"][1, 2, 3] = np.nan
    path = _npz(tmp_path / "x.npz", **arrays)
    with pytest.raises(DataError, match=r"x\.npz \[train_images\]: images contain NaN"):
        load_dataset(DataSpec(name=f"medmnist:{path}"))


def test_float01_pixels_stay_float(tmp_path: Path) -> None:
    arrays = {**_good(), "train_images": np.full((4, 28, 28), 0.25, np.float32),
              "test_images": np.full((4, 28, 28), 0.75, np.float64)}
    path = _npz(tmp_path / "x.npz", **arrays)
    ds = load_dataset(DataSpec(name=f"medmnist:{path}"))
    assert ds.x_train.dtype == np.float32 and ds.x_test.dtype == np.float32
    assert float(ds.x_test.max()) == 0.75


def test_out_of_range_float_pixels(tmp_path: Path) -> None:
    arrays = {**_good(), "train_images": np.full((4, 28, 28), 300.0)}
    path = _npz(tmp_path / "x.npz", **arrays)
    with pytest.raises(DataError, match=r"float pixels range over 300\.\.300"):
        load_dataset(DataSpec(name=f"medmnist:{path}"))


def test_empty_split(tmp_path: Path) -> None:
    arrays = {**_good(), "test_images": np.zeros((0, 28, 28), np.uint8),
              "test_labels": np.zeros((0, 1), np.uint8)}
    path = _npz(tmp_path / "x.npz", **arrays)
    with pytest.raises(DataError, match="the test split is empty"):
        load_dataset(DataSpec(name=f"medmnist:{path}"))


def test_corrupt_and_truncated_npz(tmp_path: Path) -> None:
    good = _npz(tmp_path / "good.npz", **_good(50))
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"PK\x03\x04 this is not a zip")
    with pytest.raises(DataError, match=r"bad\.npz: not a readable npz"):
        load_dataset(DataSpec(name=f"medmnist:{bad}"))
    cut = tmp_path / "cut.npz"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(DataError, match=r"cut\.npz"):
        load_dataset(DataSpec(name=f"medmnist:{cut}"))


def test_bad_val_option(tmp_path: Path) -> None:
    path = _npz(tmp_path / "x.npz", **_good())
    with pytest.raises(DataError, match="val='merge' is not valid; valid: ignore, train"):
        load_dataset(DataSpec(name=f"medmnist:{path}"), val="merge")
    with pytest.raises(ConfigError, match="unknown loader option.*valid: n_classes, resample, val"):
        load_dataset(DataSpec(name=f"medmnist:{path}"), vall="train")


@needs_shared_data
def test_shared_retinamnist() -> None:
    assert SHARED_DATA is not None
    ds = load_dataset(DataSpec(name="retinamnist"), SHARED_DATA)
    assert ds.x_train.shape == (1080, 28, 28, 3) and ds.x_test.shape == (400, 28, 28, 3)
    np.testing.assert_array_equal(np.bincount(ds.y_train), [486, 128, 206, 194, 66])
    np.testing.assert_array_equal(np.bincount(ds.y_test), [174, 46, 92, 68, 20])


@needs_shared_data
def test_shared_pneumoniamnist_uses_the_reconstructed_official_split() -> None:
    assert SHARED_DATA is not None
    ds = load_dataset(DataSpec(name="pneumoniamnist"), SHARED_DATA)
    assert ds.source.endswith("pneumoniamnist_reconstructed.npz")
    np.testing.assert_array_equal(np.bincount(ds.y_train), [1214, 3494])
    np.testing.assert_array_equal(np.bincount(ds.y_test), [234, 390])
