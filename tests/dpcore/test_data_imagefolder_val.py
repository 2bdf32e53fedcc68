"""``imagefolder:`` with ``val: validation``: ``PATH/val/CLASS/*`` kept as the data set's
validation split (sizes, classes, colour and size rules, cache, fingerprint, one-line errors),
and the calibrated faithfulness fitting its temperature on that split when there is one."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from dpcore.config import DataSpec
from dpcore.data import as_float01, load_dataset
from dpcore.errors import DataError
from dpcore.evaluation.calibrated import calibrated_faithfulness_of
from dpcore.metrics.calibration import fit_temperature
from tests.dpcore.data_writers import flat_image, isolate, write_image

SPLITS = {"train": 3, "val": 2, "test": 4}


@pytest.fixture(autouse=True)
def _cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate(monkeypatch, tmp_path)


def _given(root: Path, splits: dict[str, int] = SPLITS) -> Path:
    """PATH/{train,val,test}/{cat,dog}/i.png, 4x4 gray; pixel = 100*label + 10*split + i
    (split: train 0, val 1, test 2)."""
    base = root / "given"
    for split, n in splits.items():
        for label, cls in enumerate(("cat", "dog")):
            for i in range(n):
                value = 100 * label + 10 * ("train", "val", "test").index(split) + i
                write_image(base / split / cls / f"{i}.png", flat_image(value, (4, 4), False))
    return base


def _spec(base: Path, val: str = "validation", **kw: object) -> DataSpec:
    return DataSpec(name=f"imagefolder:{base}", options={"val": val}, **kw)  # type: ignore[arg-type]


def test_val_folder_kept_as_the_validation_split(tmp_path: Path) -> None:
    base = _given(tmp_path)
    ds = load_dataset(_spec(base))
    assert ds.class_names == ("cat", "dog")
    assert ds.x_val is not None and ds.y_val is not None
    assert ds.x_val.shape == (4, 4, 4, 1) and ds.x_val.dtype == np.uint8
    np.testing.assert_array_equal(ds.x_val[:, 0, 0, 0], [10, 11, 110, 111])
    np.testing.assert_array_equal(ds.y_val, [0, 0, 1, 1])
    np.testing.assert_array_equal(ds.x_train[:, 0, 0, 0], [0, 1, 2, 100, 101, 102])
    np.testing.assert_array_equal(ds.x_test[:, 0, 0, 0], [20, 21, 22, 23, 120, 121, 122, 123])
    assert "kept as the validation split" in ds.extra["val"]
    cached = load_dataset(_spec(base))  # read back from the cache, split included
    np.testing.assert_array_equal(cached.x_val, ds.x_val)
    np.testing.assert_array_equal(cached.y_val, ds.y_val)
    assert cached.fingerprint == ds.fingerprint
    # same train and test arrays as "ignore": the fingerprint still tells the two apart,
    # and a data set without a validation split keeps the digest it always had
    ignored = load_dataset(_spec(base, "ignore"))
    assert ignored.x_val is None and ignored.y_val is None
    np.testing.assert_array_equal(ignored.x_train, ds.x_train)
    assert ignored.fingerprint != ds.fingerprint
    assert ds.extra["files_sha256"] != ignored.extra["files_sha256"]
    normalized = load_dataset(_spec(base), normalize=True)
    assert normalized.x_val is not None and normalized.x_val.dtype == np.float32
    np.testing.assert_allclose(normalized.x_val[:, 0, 0, 0] * 255, [10, 11, 110, 111], atol=1e-4)


def test_validation_split_follows_the_colour_and_size_rules(tmp_path: Path) -> None:
    base = _given(tmp_path)
    write_image(base / "val" / "dog" / "rgb.png", flat_image(150, (4, 4), True))
    ds = load_dataset(_spec(base))  # one RGB file anywhere: every split RGB
    assert ds.x_train.shape[-1] == 3 and ds.x_val is not None and ds.x_val.shape == (5, 4, 4, 3)
    gray = load_dataset(_spec(base, channels=1))
    assert gray.x_val is not None and gray.x_val.shape[-1] == 1
    write_image(base / "val" / "cat" / "big.png", flat_image(7, (6, 6), False))
    with pytest.raises(DataError) as info:
        load_dataset(_spec(base))
    assert "big.png" in str(info.value) and "\n" not in str(info.value)
    resized = load_dataset(_spec(base, image_size=5))
    assert resized.x_val is not None and resized.x_val.shape == (6, 5, 5, 3)
    assert resized.x_train.shape[1:] == (5, 5, 3)


def _no_val(root: Path) -> Path:
    return _given(root, {"train": 3, "test": 2})


def _val_class_unknown(root: Path) -> Path:
    base = _given(root)
    write_image(base / "val" / "owl" / "0.png", flat_image(3, (4, 4), False))
    return base


def _flat_layout(root: Path) -> Path:
    base = root / "flat"
    for cls in ("a", "b"):
        write_image(base / cls / "0.png", flat_image(1, (4, 4), False))
    return base


def _val_empty(root: Path) -> Path:
    base = _given(root, {"train": 3, "test": 2})
    (base / "val").mkdir()
    return base


@pytest.mark.parametrize(("make", "pattern"), [
    (_no_val, r"given/val: val='validation' needs this folder .*valid: add it, or val: train"),
    (_val_class_unknown, r"given/val: class folder\(s\) owl not in the train split; valid: "
                         r"validation classes among the train classes \(cat, dog\)"),
    (_flat_layout, r"flat/val: val='validation' needs this folder"),
    (_val_empty, r"given/val: the validation split is empty"),
])
def test_validation_errors_are_one_line(tmp_path: Path, make: object, pattern: str) -> None:
    base = make(tmp_path)  # type: ignore[operator]
    with pytest.raises(DataError, match=pattern) as info:
        load_dataset(_spec(base))
    assert "\n" not in str(info.value)


def test_bad_val_value_lists_validation(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"val='keep' is not valid; valid: train, ignore, "
                                        r"validation"):
        load_dataset(_spec(_given(tmp_path), "keep"))


def _fake_backend() -> SimpleNamespace:
    """A deterministic two-class "model": P(dog) = sigmoid(60 * (mean pixel - 0.45)). It is
    right on every test image but confidently wrong on the validation dogs (pixel 110, 111),
    so the validation split's T (about 6.5) is far from any test-image fit (the lower bound)."""
    def predict_proba(model: object, x: np.ndarray) -> np.ndarray:
        z = 60.0 * (x.reshape(len(x), -1).mean(axis=1) - 0.45)
        p = 1.0 / (1.0 + np.exp(-z))
        return np.stack([1.0 - p, p], axis=1)
    return SimpleNamespace(predict_proba=predict_proba)


def test_temperature_is_fitted_on_the_validation_split(tmp_path: Path) -> None:
    fake = _fake_backend()
    base = _given(tmp_path)
    trained = SimpleNamespace(model=None)
    for val, split, n_fit in (("validation", "validation", 4),
                              ("ignore", "faithfulness subset", 4)):
        ds = load_dataset(_spec(base, val))
        idx = np.arange(len(ds.y_test))
        x = as_float01(ds.x_test[idx])
        target = fake.predict_proba(None, x).argmax(axis=1)
        maps = np.full(x.shape[:3], 0.5, dtype=np.float32)
        out = calibrated_faithfulness_of(fake, trained, ds, idx, x, maps, target, seed=0)
        assert out["fit_split"] == split and out["n_fit"] == n_fit
        if split == "validation":
            assert ds.x_val is not None and ds.y_val is not None
            direct = fit_temperature(fake.predict_proba(None, as_float01(ds.x_val)), ds.y_val)
            assert out["temperature"] == direct and direct > 2.0
            assert out["fit_on"] == "the validation split" and out["n"] == len(idx)
        else:  # no validation split: the small test set's subset is halved, as before
            assert out["fit_on"].startswith("half of the faithfulness subset")
            assert out["n"] == len(idx) - n_fit and out["temperature"] < 1.0


def test_standardised_inputs_scale_the_validation_split_too(tmp_path: Path) -> None:
    """T is fitted on the inputs the model sees: ``factors.input_scaling: standardised``
    scales the validation images with the training set's mean and std."""
    from dpcore.config import RunConfig
    from dpcore.pipeline import apply_data_factors

    ds = load_dataset(_spec(_given(tmp_path)))
    config = RunConfig.from_dict({"factors": {"input_scaling": "standardised"}})
    scaled = apply_data_factors(config, ds)
    assert scaled.x_val is not None and scaled.x_val.dtype == np.float32
    train = as_float01(ds.x_train)
    expected = (as_float01(ds.x_val) - train.mean()) / train.std()
    np.testing.assert_allclose(scaled.x_val, expected, rtol=1e-5, atol=1e-5)
