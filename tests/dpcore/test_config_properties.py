"""Property-based tests (hypothesis) of config parsing and of the loaders on generated files.

* Every valid RunConfig survives ``to_dict`` -> YAML file -> ``from_file`` unchanged, with the
  same config hash; overriding a key with its own value changes nothing.
* Any mapping at all (random keys, random JSON-like values) either parses or raises a
  DpCompareError: config parsing never ends in another exception (a traceback in the CLI).
* Random small MNIST IDX files (plain or gzipped) and MedMNIST npz files (gray or RGB,
  labels (N,) or (N, 1)) load back exactly, through the decoder and through the cache.
* Any truncation of a valid IDX.gz or npz file gives a DataError, never another exception.
"""

from __future__ import annotations

import gzip
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from dpcore.config import (
    ACTIVATIONS,
    OPTIMIZERS,
    AugmentSpec,
    DataSpec,
    ModelSpec,
    PrivacySpec,
    RunConfig,
    TrainSpec,
)
from dpcore.data import load_dataset
from dpcore.errors import DataError, DpCompareError
from tests.dpcore.data_writers import idx_bytes, write_mnist_idx

SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

positive = st.floats(1e-6, 1e3, allow_nan=False, allow_infinity=False)
fraction = st.floats(0.0, 0.999, allow_nan=False)


@st.composite
def run_configs(draw: st.DrawFn) -> RunConfig:
    mechanism = draw(st.sampled_from(["none", "dpsgd-gaussian", "dpsgd-laplace", "ldp"]))
    noise = target = None
    if mechanism.startswith("dpsgd"):
        if draw(st.booleans()):
            noise = draw(st.floats(0.0, 50.0))
        else:
            target = draw(positive)
    ldp = draw(st.sampled_from(["laplace", "gaussian", "dp_pix"])) if mechanism == "ldp" else None
    by_steps = draw(st.booleans())
    optimizer = draw(st.sampled_from(OPTIMIZERS))
    return RunConfig(
        data=DataSpec(
            name=draw(st.sampled_from(["digits", "mnist5k", "mnist", "medmnist:/x/y.npz"])),
            image_size=draw(st.none() | st.integers(1, 512)),
            channels=draw(st.sampled_from([None, 1, 3])),
            split_seed=draw(st.integers(0, 2**31)),
            ldp_mechanism=ldp,
            ldp_params={"scale": draw(positive)} if ldp else {},
            train_limit=draw(st.none() | st.integers(1, 10**6)),
            test_limit=draw(st.none() | st.integers(1, 10**6)),
        ),
        model=ModelSpec(name=draw(st.sampled_from(["cnn4", "resnet18", "textcnn"])),
                        activation=draw(st.sampled_from(ACTIVATIONS)), width=draw(positive)),
        privacy=PrivacySpec(mechanism=mechanism, noise_multiplier=noise, target_epsilon=target,
                            max_grad_norm=draw(positive),
                            delta=draw(st.none() | st.floats(1e-12, 0.999)),
                            sampling=draw(st.sampled_from(["poisson", "shuffle"]))),
        train=TrainSpec(epochs=None if by_steps else draw(positive),
                        steps=draw(st.integers(1, 10**6)) if by_steps else None,
                        batch_size=draw(st.integers(1, 10**5)), lr=draw(positive),
                        optimizer=optimizer,
                        # momentum is SGD's only (refused with another optimizer)
                        momentum=draw(fraction) if optimizer == "sgd" else 0.0,
                        ema_decay=draw(st.none() | fraction)),
        augment=AugmentSpec(hflip=draw(st.booleans()), crop_padding=draw(st.integers(0, 8))),
        seed=draw(st.integers(0, 2**31)),
    )


@given(config=run_configs())
@SETTINGS
def test_config_round_trips_through_a_yaml_file(config: RunConfig) -> None:
    assert RunConfig.from_dict(config.to_dict()) == config
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "run.yaml"
        path.write_text(yaml.safe_dump(config.to_dict()))
        loaded = RunConfig.from_file(path)
    assert loaded == config and loaded.config_hash == config.config_hash


@given(config=run_configs(), data=st.data())
@SETTINGS
def test_overriding_a_key_with_its_own_value_changes_nothing(config: RunConfig,
                                                             data: st.DataObject) -> None:
    raw = config.to_dict()
    section = data.draw(st.sampled_from(["data", "model", "privacy", "train"]))
    key = data.draw(st.sampled_from(sorted(raw[section])))
    value = raw[section][key]
    assume(not isinstance(value, dict))  # ldp_params: a mapping, not a scalar override
    text = "null" if value is None else yaml.safe_dump(value, default_flow_style=True)
    text = text.strip().removesuffix("...").strip()
    assert config.with_overrides([f"{section}.{key}={text}"]) == config


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                  max_size=3),
    max_leaves=6,
)
known_keys = {name: [f for f in cls.__dataclass_fields__]
              for name, cls in (("data", DataSpec), ("model", ModelSpec),
                                ("privacy", PrivacySpec), ("train", TrainSpec))}


@st.composite
def arbitrary_mappings(draw: st.DrawFn) -> dict[str, Any]:
    raw: dict[str, Any] = {}
    for section, keys in known_keys.items():
        if draw(st.booleans()):
            chosen = draw(st.lists(st.sampled_from(keys) | st.text(max_size=6)
                                   | st.integers(0, 3), max_size=4))
            raw[section] = {k: draw(json_values) for k in chosen}
        elif draw(st.integers(0, 9)) == 0:
            raw[section] = draw(json_values)
    if draw(st.booleans()):
        raw["seed"] = draw(json_values)
    if draw(st.integers(0, 9)) == 0:
        raw[draw(st.text(max_size=6) | st.integers(0, 3))] = draw(json_values)
    return raw


#: Fields that must hold an integer (or None) once parsed.
INTEGER_FIELDS = {"data": ("image_size", "split_seed", "train_limit", "test_limit"),
                  "train": ("steps", "batch_size")}


@given(raw=arbitrary_mappings())
@settings(max_examples=300, deadline=None)
def test_any_mapping_parses_or_raises_a_user_error(raw: dict[str, Any]) -> None:
    try:
        config = RunConfig.from_dict(raw)
    except DpCompareError:
        return
    assert RunConfig.from_dict(config.to_dict()) == config
    for section, names in INTEGER_FIELDS.items():
        for name in names:
            value = getattr(getattr(config, section), name)
            assert value is None or (isinstance(value, int) and not isinstance(value, bool))


# ---------------------------------------------------------------------------- loaders
def _images(n: int, h: int, w: int, channels: int | None) -> Any:
    shape = (n, h, w) if channels is None else (n, h, w, channels)
    return hnp.arrays(np.uint8, shape)


@st.composite
def mnist_arrays(draw: st.DrawFn) -> dict[str, np.ndarray]:
    h, w = draw(st.integers(1, 9)), draw(st.integers(1, 9))
    n_train, n_test = draw(st.integers(1, 12)), draw(st.integers(1, 6))
    labels = lambda n: hnp.arrays(np.uint8, (n,), elements=st.integers(0, 9))  # noqa: E731
    return {"x_train": draw(_images(n_train, h, w, None)), "y_train": draw(labels(n_train)),
            "x_test": draw(_images(n_test, h, w, None)), "y_test": draw(labels(n_test))}


@given(arrays=mnist_arrays(), gz=st.booleans())
@SETTINGS
def test_random_idx_files_load_back_exactly(arrays: dict[str, np.ndarray], gz: bool) -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        write_mnist_idx(root / "mnist", arrays, gz=gz)
        for cache in (False, True, True):  # decode; decode + write cache; read the cache
            with _cache_dir(root):
                ds = load_dataset(DataSpec(name="mnist"), root, cache=cache)
            assert ds.x_train.dtype == np.uint8 and ds.y_train.dtype == np.int64
            assert np.array_equal(ds.x_train[..., 0], arrays["x_train"])
            assert np.array_equal(ds.x_test[..., 0], arrays["x_test"])
            assert np.array_equal(ds.y_train, arrays["y_train"])
            assert np.array_equal(ds.y_test, arrays["y_test"])


@st.composite
def medmnist_arrays(draw: st.DrawFn) -> tuple[dict[str, np.ndarray], int]:
    side = draw(st.integers(1, 8))
    channels = draw(st.sampled_from([None, 3]))
    k = draw(st.integers(1, 6))
    column = draw(st.booleans())
    arrays: dict[str, np.ndarray] = {}
    for split in ("train", "test", "val"):
        n = draw(st.integers(1, 8))
        arrays[f"{split}_images"] = draw(_images(n, side, side, channels))
        labels = draw(hnp.arrays(np.int64, (n,), elements=st.integers(0, k - 1)))
        arrays[f"{split}_labels"] = labels[:, None] if column else labels
    return arrays, k


@given(drawn=medmnist_arrays(), merge_val=st.booleans(), compressed=st.booleans())
@SETTINGS
def test_random_medmnist_npz_loads_back_exactly(drawn: tuple[dict[str, np.ndarray], int],
                                                merge_val: bool, compressed: bool) -> None:
    arrays, _ = drawn
    with tempfile.TemporaryDirectory() as folder, _cache_dir(Path(folder)):
        path = Path(folder) / "set.npz"
        (np.savez_compressed if compressed else np.savez)(path, **arrays)
        ds = load_dataset(DataSpec(name=f"medmnist:{path}"), folder,
                          val="train" if merge_val else "ignore")
    nhwc = lambda x: x if x.ndim == 4 else x[..., np.newaxis]  # noqa: E731
    flat = lambda y: y.reshape(-1)  # noqa: E731
    x_train, y_train = nhwc(arrays["train_images"]), flat(arrays["train_labels"])
    if merge_val:
        x_train = np.concatenate([x_train, nhwc(arrays["val_images"])])
        y_train = np.concatenate([y_train, flat(arrays["val_labels"])])
    assert np.array_equal(ds.x_train, x_train) and np.array_equal(ds.y_train, y_train)
    assert np.array_equal(ds.x_test, nhwc(arrays["test_images"]))
    assert np.array_equal(ds.y_test, flat(arrays["test_labels"]))
    largest = max(int(flat(arrays[f"{s}_labels"]).max()) for s in ("train", "test", "val"))
    assert ds.n_classes == largest + 1


@given(arrays=mnist_arrays(), data=st.data())
@SETTINGS
def test_any_truncated_gzip_idx_file_is_a_data_error(arrays: dict[str, np.ndarray],
                                                     data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        write_mnist_idx(root / "mnist", arrays, gz=True)
        victim = root / "mnist" / data.draw(st.sampled_from(sorted(
            p.name for p in (root / "mnist").iterdir())))
        raw = victim.read_bytes()
        cut = data.draw(st.integers(0, len(raw) - 1))
        victim.write_bytes(raw[:cut])
        try:
            load_dataset(DataSpec(name="mnist"), root, cache=False)
        except DataError as exc:
            assert victim.name in str(exc)
        else:  # only a cut that leaves every byte of the IDX payload could load
            raise AssertionError(f"a gzip file cut at {cut} of {len(raw)} bytes loaded")


@given(drawn=medmnist_arrays(), data=st.data())
@SETTINGS
def test_any_truncated_npz_file_is_a_data_error(drawn: tuple[dict[str, np.ndarray], int],
                                                data: st.DataObject) -> None:
    arrays, _ = drawn
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "set.npz"
        np.savez_compressed(path, **arrays)
        raw = path.read_bytes()
        cut = data.draw(st.integers(0, len(raw) - 1))
        path.write_bytes(raw[:cut])
        try:
            load_dataset(DataSpec(name=f"medmnist:{path}"), folder, cache=False)
        except DataError as exc:
            assert "set.npz" in str(exc)
        else:
            raise AssertionError(f"an npz cut at {cut} of {len(raw)} bytes loaded")


def test_idx_writer_matches_the_format() -> None:
    """The writer the properties rely on: big-endian magic, dims, then the bytes."""
    data = idx_bytes(np.arange(6, dtype=np.uint8).reshape(1, 2, 3), 2051)
    assert data[:4] == b"\x00\x00\x08\x03" and data[4:16] == bytes([0, 0, 0, 1, 0, 0, 0, 2,
                                                                    0, 0, 0, 3])
    assert gzip.decompress(gzip.compress(data)) == data


class _cache_dir:  # noqa: N801 - used as a context manager
    """Point ``$DPCOMPARE_CACHE_DIR`` at ``root/cache`` inside the block (hypothesis runs many
    examples per test function, so the function-scoped monkeypatch cannot be used)."""

    def __init__(self, root: Path) -> None:
        self.path = str(root / "cache")

    def __enter__(self) -> None:
        import os

        self.saved = os.environ.get("DPCOMPARE_CACHE_DIR")
        os.environ["DPCOMPARE_CACHE_DIR"] = self.path

    def __exit__(self, *exc: object) -> None:
        import os

        if self.saved is None:
            os.environ.pop("DPCOMPARE_CACHE_DIR", None)
        else:
            os.environ["DPCOMPARE_CACHE_DIR"] = self.saved


# ------------------------------------------------------------------------------- grids
@st.composite
def arbitrary_grids(draw: st.DrawFn) -> dict[str, Any]:
    from compare.grid import GRID_KEYS

    raw: dict[str, Any] = {}
    for key in sorted(GRID_KEYS - {"seeds"}):
        if draw(st.integers(0, 2)) == 0:
            raw[key] = draw(json_values)
    if draw(st.booleans()):  # small counts only: seeds=10**6 is valid, just a million cells
        raw["seeds"] = draw(st.integers(-2, 3) | st.lists(st.integers(-1, 5), max_size=3)
                            | st.text(max_size=3) | st.none())
    if draw(st.booleans()):
        raw["base"] = {"train": {"steps": 2, "batch_size": 4}}
    if draw(st.booleans()):
        raw["axes"] = {draw(st.text(max_size=4)): draw(st.lists(
            st.dictionaries(st.sampled_from(["label", "train", "privacy", "seed"]), json_values,
                            max_size=2) | json_values, max_size=3))}
    if draw(st.integers(0, 9)) == 0:
        raw[draw(st.text(max_size=4) | st.integers(0, 3))] = draw(json_values)
    return raw


@given(raw=arbitrary_grids(), seeds=st.none() | st.integers(-1, 3))
@settings(max_examples=300, deadline=None)
def test_any_grid_mapping_expands_or_raises_a_user_error(raw: dict[str, Any],
                                                         seeds: int | None) -> None:
    from compare.grid import expand_grid

    try:
        grid = expand_grid(raw, seeds=seeds)
    except DpCompareError:
        return
    assert grid.runs()
    subset = grid.evaluation["faithfulness_subset"]
    assert isinstance(subset, int) and subset >= 1
    images = grid.evaluation["montage_images"]
    assert isinstance(images, int) and images >= 0
    assert all(isinstance(grid.evaluation[k], bool) for k in ("faithfulness", "audit"))
