"""``imagefolder:PATH``: class folders (flat with a seeded split, or a given train/test split),
sorted class names, gray/RGB, PNG/JPEG/BMP/TIFF, the files' fingerprint and one-line errors;
``chest_xray`` as its preset keeps its config hash."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from dpcore.config import DataSpec, RunConfig
from dpcore.data import load_dataset
from dpcore.errors import ConfigError, DataError
from tests.dpcore.data_writers import flat_image, isolate, write_image


@pytest.fixture(autouse=True)
def _cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate(monkeypatch, tmp_path)


def _flat(root: Path, *, rgb_every: int = 0, n: int = 5) -> Path:
    """3 classes (zebra, ant, moth: sorted ant=0, moth=1, zebra=2) of n 6x7 PNGs each; the
    pixel value encodes (class, index) as 50 * label + i; every ``rgb_every``-th file is RGB."""
    base = root / "scans"
    for label, cls in enumerate(("ant", "moth", "zebra")):
        for i in range(n):
            rgb = bool(rgb_every) and i % rgb_every == 0
            write_image(base / cls / f"img{i}.png", flat_image(50 * label + i, (7, 6), rgb))
    return base


def test_flat_layout_sorted_classes_stratified_seeded_split(tmp_path: Path) -> None:
    base = _flat(tmp_path, n=10)
    spec = DataSpec(name=f"imagefolder:{base}", split_seed=3)
    ds = load_dataset(spec)
    assert ds.class_names == ("ant", "moth", "zebra")
    assert ds.x_train.shape == (24, 6, 7, 1) and ds.x_test.shape == (6, 6, 7, 1)  # all gray
    np.testing.assert_array_equal(np.bincount(ds.y_test), [2, 2, 2])  # stratified
    for x, y in ((ds.x_train, ds.y_train), (ds.x_test, ds.y_test)):
        np.testing.assert_array_equal(x[:, 0, 0, 0] // 50, y)  # labels travel with images
    assert load_dataset(spec).fingerprint == ds.fingerprint  # deterministic
    other = load_dataset(DataSpec(name=f"imagefolder:{base}", split_seed=4))
    assert other.fingerprint != ds.fingerprint
    half = load_dataset(DataSpec(name=f"imagefolder:{base}", options={"test_fraction": 0.5}))
    assert len(half.y_test) == 15 and "test_fraction=0.5" in half.extra["split"]


def test_rgb_files_make_an_rgb_set_unless_channels_says_gray(tmp_path: Path) -> None:
    base = _flat(tmp_path, rgb_every=2)
    ds = load_dataset(DataSpec(name=f"imagefolder:{base}"))
    assert ds.x_train.shape[-1] == 3
    gray = load_dataset(DataSpec(name=f"imagefolder:{base}", channels=1))
    assert gray.x_train.shape[-1] == 1
    np.testing.assert_array_equal(gray.x_train[:, 0, 0, 0], ds.x_train[:, 0, 0, 0])


def test_files_fingerprint_does_not_depend_on_the_location(tmp_path: Path) -> None:
    base = _flat(tmp_path)
    copy = shutil.copytree(base, tmp_path / "elsewhere" / "scans")
    a = load_dataset(DataSpec(name=f"imagefolder:{base}"), cache=False)
    b = load_dataset(DataSpec(name=f"imagefolder:{copy}"), cache=False)
    assert a.extra["files_sha256"] == b.extra["files_sha256"]
    write_image(copy / "ant" / "img0.png", flat_image(9, (7, 6), False))
    c = load_dataset(DataSpec(name=f"imagefolder:{copy}"), cache=False)
    assert c.extra["files_sha256"] != a.extra["files_sha256"]


def test_bmp_tiff_jpeg_are_read(tmp_path: Path) -> None:
    base = tmp_path / "mixed"
    for i, suffix in enumerate((".bmp", ".tif", ".TIFF", ".jpg", ".png")):
        write_image(base / "a" / f"x{i}{suffix}", flat_image(10 + i, (5, 5), False))
        write_image(base / "b" / f"x{i}{suffix}", flat_image(100 + i, (5, 5), True))
    (base / "a" / "notes.txt").write_text("not an image: ignored")
    ds = load_dataset(DataSpec(name=f"imagefolder:{base}"))
    assert len(ds.y_train) + len(ds.y_test) == 10 and ds.x_train.shape[-1] == 3


def test_given_split_with_val_merged_or_ignored(tmp_path: Path) -> None:
    base = tmp_path / "given"
    for split, n in (("train", 3), ("val", 1), ("test", 2)):
        for label, cls in enumerate(("cat", "dog")):
            for i in range(n):
                write_image(base / split / cls / f"{i}.png",
                            flat_image(100 * label + 10 * ("train", "val", "test").index(split)
                                       + i, (4, 4), False))
    ds = load_dataset(DataSpec(name=f"imagefolder:{base}"))
    assert ds.class_names == ("cat", "dog")
    np.testing.assert_array_equal(ds.x_train[:, 0, 0, 0], [0, 1, 2, 100, 101, 102, 10, 110])
    np.testing.assert_array_equal(ds.y_train, [0, 0, 0, 1, 1, 1, 0, 1])
    np.testing.assert_array_equal(ds.x_test[:, 0, 0, 0], [20, 21, 120, 121])
    assert "merged into train" in ds.extra["val"] and ds.extra["split"].startswith("given")
    kept = load_dataset(DataSpec(name=f"imagefolder:{base}", options={"val": "ignore"}))
    assert len(kept.y_train) == 6 and "not used" in kept.extra["val"]


def test_corrupt_image_is_named_unless_skipped(tmp_path: Path) -> None:
    base = _flat(tmp_path)
    victim = base / "moth" / "img3.png"
    victim.write_bytes(victim.read_bytes()[:30])
    with pytest.raises(DataError, match=r"moth/img3\.png: not a readable image") as info:
        load_dataset(DataSpec(name=f"imagefolder:{base}"))
    assert "\n" not in str(info.value)
    ds = load_dataset(DataSpec(name=f"imagefolder:{base}",
                               options={"skip_unreadable": True}))
    assert len(ds.y_train) + len(ds.y_test) == 14
    assert "img3.png" in ds.extra["skipped"] and "1 unreadable" in ds.extra["skipped"]


@pytest.mark.parametrize(("make", "pattern"), [
    (lambda b: shutil.rmtree(b / "zebra") or (b / "zebra").mkdir(),
     r"zebra: class folder holds no image"),
    (lambda b: [shutil.rmtree(b / c) for c in ("moth", "zebra")],
     r"scans: found one class folder \(ant\); valid: at least 2"),
    (lambda b: write_image(b / "ant" / "big.png", flat_image(1, (9, 9), False)),
     r"mixed image sizes: .*big\.png is 9x9 .*set data.image_size"),
    (lambda b: [shutil.rmtree(b / c) for c in ("ant", "moth", "zebra")],
     r"scans: holds no class folders"),
])
def test_one_line_errors(tmp_path: Path, make: object, pattern: str) -> None:
    base = _flat(tmp_path)
    make(base)  # type: ignore[operator]
    with pytest.raises(DataError, match=pattern) as info:
        load_dataset(DataSpec(name=f"imagefolder:{base}"))
    assert "\n" not in str(info.value)


def test_mixed_sizes_load_with_image_size(tmp_path: Path) -> None:
    base = _flat(tmp_path)
    write_image(base / "ant" / "big.png", flat_image(1, (9, 9), False))
    ds = load_dataset(DataSpec(name=f"imagefolder:{base}", image_size=8))
    assert ds.x_train.shape[1:] == (8, 8, 1)


def test_unknown_option_and_missing_folder(tmp_path: Path) -> None:
    base = _flat(tmp_path)
    with pytest.raises(ConfigError, match=r"unknown loader option\(s\) nope .*skip_unreadable"):
        load_dataset(DataSpec(name=f"imagefolder:{base}", options={"nope": 1}))
    with pytest.raises(DataError, match=r"imagefolder:.*absent not found"):
        load_dataset(DataSpec(name=f"imagefolder:{tmp_path / 'absent'}"))
    with pytest.raises(DataError, match=r"'imagefolder:' needs a path"):
        load_dataset(DataSpec(name="imagefolder:"))


def test_options_and_presets_keep_their_config_hashes() -> None:
    """Hashes computed with the code before ``data.options`` and imagefolder existed."""
    assert RunConfig().config_hash == "5044f4443cf0821c"
    chest = RunConfig.from_dict({"data": {"name": "chest_xray", "image_size": 64}})
    assert chest.config_hash == "b0c4a284f74ea45b"
    with_options = RunConfig.from_dict({"data": {"name": "chest_xray", "image_size": 64,
                                                 "options": {"resample": "lanczos"}}})
    assert with_options.config_hash != chest.config_hash
    assert RunConfig.from_dict(with_options.to_dict()) == with_options
