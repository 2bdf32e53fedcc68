"""Folder/CSV image loaders: chest_xray (Kaggle layout), aptos (CSV + PNG), cats_vs_dogs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dpcore.config import DataSpec
from dpcore.data import load_dataset
from dpcore.errors import DataError
from tests.dpcore.data_writers import (
    SHARED_DATA,
    flat_image,
    isolate,
    needs_shared_data,
    write_csv,
    write_image,
)


@pytest.fixture(autouse=True)
def _cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate(monkeypatch, tmp_path)


# -- chest_xray -------------------------------------------------------------------------------

def _chest(root: Path, size: tuple[int, int] = (12, 10), sizes: dict[str, tuple[int, int]] | None
           = None) -> Path:
    """train: 2 NORMAL (values 10, 11) + 3 PNEUMONIA (20..22); val: 1 + 1; test: 1 + 2."""
    base = root / "chest_xray"
    layout = {"train": {"NORMAL": [10, 11], "PNEUMONIA": [20, 21, 22]},
              "val": {"NORMAL": [12], "PNEUMONIA": [23]},
              "test": {"NORMAL": [30], "PNEUMONIA": [40, 41]}}
    for split, classes in layout.items():
        for cls, values in classes.items():
            for v in values:
                name = f"IM-{v:04d}.jpeg"
                wh = (sizes or {}).get(name, size)
                write_image(base / split / cls / name, flat_image(v, wh, rgb=False))
    return base


def test_chest_xray_kaggle_layout_with_val_merged(tmp_path: Path) -> None:
    _chest(tmp_path)
    ds = load_dataset(DataSpec(name="chest_xray"), tmp_path)
    assert ds.x_train.shape == (7, 10, 12, 1) and ds.x_test.shape == (3, 10, 12, 1)
    # sorted by split folder (train then val), class, file name; JPEG keeps flat values exactly
    np.testing.assert_array_equal(ds.x_train[:, 0, 0, 0], [10, 11, 20, 21, 22, 12, 23])
    np.testing.assert_array_equal(ds.y_train, [0, 0, 1, 1, 1, 0, 1])
    np.testing.assert_array_equal(ds.x_test[:, 5, 5, 0], [30, 40, 41])
    np.testing.assert_array_equal(ds.y_test, [0, 1, 1])
    assert ds.class_names == ("normal", "pneumonia")
    assert "merged into train" in ds.extra["val"]


def test_chest_xray_mixed_sizes_need_image_size(tmp_path: Path) -> None:
    _chest(tmp_path, sizes={"IM-0021.jpeg": (20, 16)})
    with pytest.raises(DataError, match=r"mixed image sizes: .*IM-0021\.jpeg is 20x16 .*"
                                        r"set data.image_size"):
        load_dataset(DataSpec(name="chest_xray"), tmp_path)
    ds = load_dataset(DataSpec(name="chest_xray", image_size=8, channels=3), tmp_path)
    assert ds.x_train.shape == (7, 8, 8, 3)
    np.testing.assert_array_equal(ds.x_train[3, ..., 1], np.full((8, 8), 21))


def test_chest_xray_corrupt_image_is_named(tmp_path: Path) -> None:
    base = _chest(tmp_path)
    victim = base / "test" / "PNEUMONIA" / "IM-0040.jpeg"
    victim.write_bytes(victim.read_bytes()[:40])
    with pytest.raises(DataError, match=r"IM-0040\.jpeg: not a readable image"):
        load_dataset(DataSpec(name="chest_xray"), tmp_path)


def test_chest_xray_missing_class_folder(tmp_path: Path) -> None:
    base = _chest(tmp_path)
    for f in (base / "test" / "NORMAL").iterdir():
        f.unlink()
    (base / "test" / "NORMAL").rmdir()
    with pytest.raises(DataError, match=r"test/NORMAL: class folder missing"):
        load_dataset(DataSpec(name="chest_xray"), tmp_path)


def test_chest_xray_groups_csv(tmp_path: Path) -> None:
    base = _chest(tmp_path)
    files = sorted(p.relative_to(base).as_posix() for p in base.rglob("*.jpeg"))
    rows = [(f, "site-b" if "PNEUMONIA" in f else "site-a") for f in files]
    write_csv(base / "groups.csv", ("file", "group"), rows)
    ds = load_dataset(DataSpec(name="chest_xray"), tmp_path, groups_csv="groups.csv")
    assert ds.group_names == ("site-a", "site-b")
    np.testing.assert_array_equal(ds.groups_train, ds.y_train)
    np.testing.assert_array_equal(ds.groups_test, ds.y_test)
    write_csv(base / "groups.csv", ("file", "group"), rows[1:])
    with pytest.raises(DataError, match=r"groups\.csv: gives no group for "):
        load_dataset(DataSpec(name="chest_xray"), tmp_path, groups_csv="groups.csv")


# -- aptos ------------------------------------------------------------------------------------

def _aptos(root: Path, n_per_class: int = 5, group: bool = True) -> Path:
    base = root / "aptos"
    rows = []
    for grade in range(5):
        for i in range(n_per_class):
            code = f"img{grade}{i}"
            value = grade * 40 + i
            write_image(base / "train_images" / f"{code}.png",
                        np.full((6, 9, 3), value, dtype=np.uint8))
            rows.append((code, grade, "f" if i % 2 else "m") if group else (code, grade))
    write_csv(base / "train.csv", ("id_code", "diagnosis", "group")[: 3 if group else 2], rows)
    return base


def test_aptos_csv_and_png_with_stratified_split_and_groups(tmp_path: Path) -> None:
    _aptos(tmp_path)
    ds = load_dataset(DataSpec(name="aptos", split_seed=1), tmp_path)
    assert ds.x_train.shape == (20, 6, 9, 3) and ds.x_test.shape == (5, 6, 9, 3)
    np.testing.assert_array_equal(np.bincount(ds.y_test), [1, 1, 1, 1, 1])
    # each pixel value encodes (grade, index): labels and groups travel with their images
    for x, y, g in ((ds.x_train, ds.y_train, ds.groups_train),
                    (ds.x_test, ds.y_test, ds.groups_test)):
        values = x[:, 0, 0, 0].astype(int)
        np.testing.assert_array_equal(values // 40, y)
        np.testing.assert_array_equal(g, 1 - values % 2)  # names sorted: f=0, m=1
    assert ds.group_names == ("f", "m")
    other = load_dataset(DataSpec(name="aptos", split_seed=2), tmp_path)
    assert other.fingerprint != ds.fingerprint


def test_aptos_missing_image_named(tmp_path: Path) -> None:
    base = _aptos(tmp_path, group=False)
    (base / "train_images" / "img31.png").unlink()
    with pytest.raises(DataError, match=r"train\.csv line 18 names .*img31\.png, which does "
                                        r"not exist"):
        load_dataset(DataSpec(name="aptos"), tmp_path)


def test_aptos_bad_diagnosis_and_group_column(tmp_path: Path) -> None:
    base = _aptos(tmp_path, group=False)
    with pytest.raises(DataError, match=r"has no group column 'site'; its columns: id_code, "
                                        r"diagnosis"):
        load_dataset(DataSpec(name="aptos"), tmp_path, group_column="site")
    write_csv(base / "train.csv", ("id_code", "diagnosis"), [("img00", 0), ("img01", 7)])
    with pytest.raises(DataError, match=r"train\.csv line 3: diagnosis='7'; valid: 0\.\.4"):
        load_dataset(DataSpec(name="aptos"), tmp_path)


# -- cats_vs_dogs -----------------------------------------------------------------------------

def test_cats_vs_dogs_kaggle_folder(tmp_path: Path) -> None:
    folder = tmp_path / "cats_vs_dogs" / "train"
    for i in range(5):
        write_image(folder / f"cat.{i}.jpg", flat_image(10 + i, (7, 5), rgb=True))
        write_image(folder / f"dog.{i}.jpg", flat_image(100 + i, (7, 5), rgb=True))
    (folder / "readme.txt").write_text("ignored")
    ds = load_dataset(DataSpec(name="cats_vs_dogs"), tmp_path)
    assert ds.x_train.shape == (8, 5, 7, 3) and ds.x_test.shape == (2, 5, 7, 3)
    np.testing.assert_array_equal(np.bincount(ds.y_test), [1, 1])
    for x, y in ((ds.x_train, ds.y_train), (ds.x_test, ds.y_test)):
        np.testing.assert_array_equal(x[:, 2, 3, 0] >= 100, y == 1)


def test_cats_vs_dogs_npz(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    arrays = {"x_train": rng.integers(0, 256, (6, 8, 8, 3), dtype=np.uint8),
              "y_train": np.array([0, 1, 0, 1, 0, 1], np.uint8),
              "x_test": rng.integers(0, 256, (2, 8, 8, 3), dtype=np.uint8),
              "y_test": np.array([1, 0], np.uint8),
              "names_train": np.array([f"cat.{i}.jpg" for i in range(6)])}
    (tmp_path / "cats_vs_dogs").mkdir()
    np.savez(tmp_path / "cats_vs_dogs" / "cats_vs_dogs_filtered_64.npz", **arrays)
    ds = load_dataset(DataSpec(name="cats_vs_dogs", image_size=4, channels=1), tmp_path)
    assert ds.x_train.shape == (6, 4, 4, 1)
    np.testing.assert_array_equal(ds.y_test, [1, 0])
    ds = load_dataset(DataSpec(name="cats_vs_dogs"), tmp_path)
    np.testing.assert_array_equal(ds.x_train, arrays["x_train"])


@needs_shared_data
def test_shared_cats_vs_dogs_npz() -> None:
    assert SHARED_DATA is not None
    ds = load_dataset(DataSpec(name="cats_vs_dogs", train_limit=100, test_limit=50), SHARED_DATA)
    assert ds.x_train.shape == (100, 64, 64, 3) and ds.x_test.shape == (50, 64, 64, 3)
    np.testing.assert_array_equal(np.bincount(ds.y_train), [50, 50])
