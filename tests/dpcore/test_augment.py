"""Per-example training-data augmentation (``augment`` section, :mod:`dpcore.augment`): the
config section and its hash, the validation errors, the flip/crop geometry on known images,
the seeding, what the shared loop hands the engine (augmented training batches, clean
evaluation), and the fixed-front cache it switches off. No framework is imported."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import yaml

from dpcore.augment import apply_augment, augment_batch, augment_rng, draw_augment
from dpcore.config import AugmentSpec, ModelSpec, PerfSpec, RunConfig
from dpcore.data.dataset import Dataset
from dpcore.errors import ConfigError
from dpcore.frontcache import front_not_cached_reason, front_to_cache
from dpcore.pipeline import fit, privacy_plan
from dpcore.trainloop import model_inputs, run_training
from tests.committed_hashes import hash_before_noise_key

#: ``RunConfig().config_hash`` and the hash of :data:`DP_SCATTER` computed by the code before
#: this feature (main at c3de8b4, in the project folder, ``python -c "from dpcore.config import
#: RunConfig; print(RunConfig().config_hash)"``): stored runs keep their hashes.
DEFAULT_HASH_BEFORE_AUGMENT = "5044f4443cf0821c"
DP_SCATTER_HASH_BEFORE_AUGMENT = "92c9cef7a44f699b"
DP_SCATTER = {"model": {"name": "scatter-linear"},
              "privacy": {"mechanism": "dpsgd-gaussian", "noise_multiplier": 1.0}}


def dp_config(**sections: Any) -> RunConfig:
    """A small DP-SGD config (steps, batch 8) with ``sections`` laid over it."""
    raw: dict[str, Any] = {
        "privacy": {"mechanism": "dpsgd-gaussian", "noise_multiplier": 1.0},
        "train": {"epochs": None, "steps": 4, "batch_size": 8}, "seed": 3}
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value} if isinstance(value, dict) else value
    return RunConfig.from_dict(raw)


def images(n: int = 24, side: int = 8, channels: int = 1, test: int = 6) -> Dataset:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(n + test, side, side, channels), dtype=np.uint8)
    y = np.arange(n + test, dtype=np.int64) % 2
    return Dataset("tiny-images", "image", x[:n], y[:n], x[n:], y[n:], ("a", "b"))


def tokens(n: int = 12) -> Dataset:
    x = (np.arange(n * 5, dtype=np.int32).reshape(n, 5) % 7).astype(np.int32)
    y = np.arange(n, dtype=np.int64) % 2
    return Dataset("tiny-text", "text", x, y, x[:4], y[:4], ("neg", "pos"),
                   vocabulary_size=7)


# -- the config section and the hash ------------------------------------------------------------
def test_default_config_has_no_augment_section_and_keeps_its_hash() -> None:
    assert "augment" not in RunConfig().to_dict()
    assert RunConfig().config_hash == DEFAULT_HASH_BEFORE_AUGMENT
    # a DP-SGD config's hash now carries its noise key (tests/committed_hashes.py): compared
    # under the rule the stored runs were hashed by
    assert hash_before_noise_key(RunConfig.from_dict(DP_SCATTER)) == \
        DP_SCATTER_HASH_BEFORE_AUGMENT
    explicit = RunConfig.from_dict({**DP_SCATTER, "augment": {"hflip": False,
                                                               "crop_padding": 0}})
    assert hash_before_noise_key(explicit) == DP_SCATTER_HASH_BEFORE_AUGMENT
    assert explicit.config_hash == RunConfig.from_dict(DP_SCATTER).config_hash
    assert "augment" not in explicit.to_dict()


def test_augmentation_changes_the_hash_and_round_trips(tmp_path: Path) -> None:
    base = RunConfig.from_dict(DP_SCATTER)
    flipped = base.with_overrides(["augment.hflip=true"])
    assert flipped.augment == AugmentSpec(hflip=True)
    assert flipped.to_dict()["augment"] == {"hflip": True}
    cropped = base.with_overrides(["augment.crop_padding=4"])
    both = RunConfig.from_dict({**DP_SCATTER, "augment": {"hflip": True, "crop_padding": 4}})
    assert both.to_dict()["augment"] == {"hflip": True, "crop_padding": 4}
    hashes = {c.config_hash for c in (base, flipped, cropped, both)}
    assert len(hashes) == 4
    assert RunConfig.from_dict(both.to_dict()) == both
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(both.to_dict()), encoding="utf-8")
    assert RunConfig.from_file(path).config_hash == both.config_hash
    # a whole float (JSON, 4.0) is the same config as the int
    assert base.with_overrides(["augment.crop_padding=4.0"]).config_hash == cropped.config_hash
    assert both.with_overrides(["augment.hflip=false", "augment.crop_padding=0"]
                               ).config_hash == base.config_hash


@pytest.mark.parametrize(("override", "fragment"), [
    ("augment.hflip=yes_please", r"augment.hflip='yes_please' is not valid; valid: true or false"),
    ("augment.hflip=1", r"augment.hflip=1 is not valid; valid: true or false"),
    ("augment.crop_padding=-1", r"augment.crop_padding=-1 is out of range; valid: an integer >= 0"),
    ("augment.crop_padding=1.5", r"augment.crop_padding=1.5 is not a whole number; valid: an "
     r"integer >= 0"),
    ("augment.crop_padding=four", r"augment.crop_padding='four' is not a number; valid: an "
     r"integer >= 0"),
    ("augment.crop_padding=null", r"augment.crop_padding=None is not valid; valid: an integer "
     r">= 0"),
    ("augment.vflip=true", r"unknown key\(s\) augment.vflip \(did you mean 'hflip'\?\) "
     r"\(valid in augment: crop_padding, hflip\)"),
])
def test_bad_values_name_the_field_and_the_valid_ones(override: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        RunConfig().with_overrides([override])


def test_the_library_recipe_refuses_augmentation_and_says_why() -> None:
    raw = {"privacy": {"mechanism": "dpsgd-gaussian", "noise_multiplier": 1.0,
                       "sampling": "shuffle"}, "recipe": "library"}
    RunConfig.from_dict(raw)  # fine without augmentation
    with pytest.raises(ConfigError, match=r"augment.hflip=True applies to recipe=harmonised "
                       r"only: recipe=library runs each library's own tutorial loop"):
        RunConfig.from_dict({**raw, "augment": {"hflip": True}})
    with pytest.raises(ConfigError, match=r"augment.crop_padding=2 .*valid under "
                       r"recipe=library: no augment section"):
        RunConfig.from_dict({**raw, "augment": {"crop_padding": 2}})


def test_a_text_data_set_or_too_much_padding_is_refused_before_training() -> None:
    engine = RecordingEngine(n_classes=2)
    config = dp_config(augment={"hflip": True}, model={"name": "textcnn"})
    data = tokens()
    with pytest.raises(ConfigError, match=r"augment.hflip=True needs an image data set; "
                       r"'tiny-text' is text .*valid for it: no augment section"):
        run_training(config, data, PerfSpec(), privacy_plan(config, len(data.x_train)), engine,
                     progress=False)
    config = dp_config(augment={"crop_padding": 8})
    data = images(side=8)
    with pytest.raises(ConfigError, match=r"augment.crop_padding=8 is not smaller than the "
                       r"images \(8x8 pixels\).*valid: an integer in \[0, 7\]"):
        run_training(config, data, PerfSpec(), privacy_plan(config, len(data.x_train)), engine,
                     progress=False)
    assert engine.steps == []  # nothing trained


# -- geometry -----------------------------------------------------------------------------------
def test_hflip_mirrors_each_chosen_image_left_right() -> None:
    img = np.arange(2 * 3 * 4 * 2, dtype=np.uint8).reshape(2, 3, 4, 2)  # asymmetric
    spec = AugmentSpec(hflip=True)
    draw = dataclasses.replace(draw_augment(2, spec, augment_rng(0, 1)),
                               flip=np.array([True, False]))
    out = apply_augment(img, spec, draw)
    np.testing.assert_array_equal(out[0], img[0][:, ::-1])
    np.testing.assert_array_equal(out[1], img[1])
    assert not np.array_equal(out[0], img[0])


def test_hflip_flips_about_half_of_a_batch() -> None:
    flips = draw_augment(4000, AugmentSpec(hflip=True), augment_rng(0, 1)).flip
    assert 0.46 < flips.mean() < 0.54


def test_crop_of_ones_leaves_a_zero_band_as_wide_as_the_shift() -> None:
    """Padding p, offset o (in [0, 2p]): the image moves by p - o, so a band of |p - o| rows
    (columns) on the side it moved away from is the zero padding, the rest the image."""
    p, n, h, w = 3, 200, 9, 7
    ones = np.ones((n, h, w, 2), np.float32)
    spec = AugmentSpec(crop_padding=p)
    draw = draw_augment(n, spec, augment_rng(5, 2))
    out = apply_augment(ones, spec, draw)
    for i in range(n):
        dy, dx = p - int(draw.offset_y[i]), p - int(draw.offset_x[i])
        expected = np.zeros((h, w, 2), np.float32)
        expected[max(dy, 0):h + min(dy, 0), max(dx, 0):w + min(dx, 0)] = 1.0
        np.testing.assert_array_equal(out[i], expected)
    # every offset occurs, uniformly enough
    assert set(draw.offset_y.tolist()) == set(range(2 * p + 1))
    assert set(draw.offset_x.tolist()) == set(range(2 * p + 1))


def test_crop_moves_the_content_not_just_masks_it() -> None:
    img = np.arange(1 * 5 * 5 * 1, dtype=np.float32).reshape(1, 5, 5, 1) + 1
    spec = AugmentSpec(crop_padding=2)
    draw = dataclasses.replace(draw_augment(1, spec, augment_rng(0, 1)),
                               offset_y=np.array([0]), offset_x=np.array([4]))
    out = apply_augment(img, spec, draw)[0, :, :, 0]
    # offset_y 0: two zero rows on top, image rows 0..2 below; offset_x 4: columns 2..4 first
    np.testing.assert_array_equal(out[:2], 0)
    np.testing.assert_array_equal(out[2:, :3], img[0, :3, 2:, 0])
    np.testing.assert_array_equal(out[:, 3:], 0)


@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_shape_and_dtype_are_kept_and_the_input_is_not_modified(dtype: type) -> None:
    x = (np.random.default_rng(1).random((10, 6, 6, 3)) * 255).astype(dtype)
    before = x.copy()
    out = augment_batch(x, AugmentSpec(hflip=True, crop_padding=2), augment_rng(0, 1))
    assert out.shape == x.shape and out.dtype == x.dtype
    np.testing.assert_array_equal(x, before)
    assert not np.array_equal(out, x)
    empty = augment_batch(x[:0], AugmentSpec(hflip=True, crop_padding=2), augment_rng(0, 1))
    assert empty.shape == (0, 6, 6, 3) and empty.dtype == x.dtype


def test_no_augmentation_returns_the_batch_unchanged() -> None:
    x = images().x_train
    assert augment_batch(x, AugmentSpec(), augment_rng(0, 1)) is x


def test_a_batch_that_is_not_nhwc_is_refused() -> None:
    with pytest.raises(ValueError, match=r"NHWC.*\(4, 4\)"):
        augment_batch(np.zeros((4, 4)), AugmentSpec(hflip=True), augment_rng(0, 1))


def test_same_seed_and_step_same_images_other_step_or_seed_other_images() -> None:
    x = images(n=32).x_train
    spec = AugmentSpec(hflip=True, crop_padding=2)
    first = augment_batch(x, spec, augment_rng(7, 3))
    np.testing.assert_array_equal(first, augment_batch(x, spec, augment_rng(7, 3)))
    assert not np.array_equal(first, augment_batch(x, spec, augment_rng(7, 4)))
    assert not np.array_equal(first, augment_batch(x, spec, augment_rng(8, 3)))


# -- the shared loop ----------------------------------------------------------------------------
class RecordingEngine:
    """Records the chunks of every step and the inputs of every prediction."""

    def __init__(self, n_classes: int = 2) -> None:
        self.n_classes = n_classes
        self.steps: list[list[tuple[np.ndarray, np.ndarray]]] = []
        self.predicted: list[np.ndarray] = []
        self.closed = 0

    def train_step(self, chunks: Sequence[tuple[np.ndarray, np.ndarray]],
                   divisor: float | None = None) -> float:
        self.steps.append([(x.copy(), y.copy()) for x, y in chunks])
        return float(sum(len(y) for _, y in chunks))

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        self.predicted.append(x.copy())
        return np.full((len(x), self.n_classes), 1.0 / self.n_classes, np.float32)

    def predict_outputs(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        proba = self.predict_proba(x)  # logits whose softmax is proba
        return np.log(proba), proba

    def get_weights(self) -> dict[str, np.ndarray]:
        return {"w": np.zeros(1, np.float32)}

    def set_weights(self, weights: Mapping[str, np.ndarray]) -> None:
        pass

    def close(self) -> None:
        self.closed += 1


def _train(config: RunConfig, data: Dataset, physical: int | None = None) -> RecordingEngine:
    engine = RecordingEngine()
    run_training(config, data, PerfSpec(physical_batch_size=physical),
                 privacy_plan(config, len(data.x_train)), engine, progress=False)
    return engine


def _batch(step: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    return np.concatenate([x for x, _ in step]) if step else np.zeros((0,))


def test_training_batches_are_augmented_and_evaluation_is_clean() -> None:
    data = images()
    plain_cfg = dp_config()
    aug_cfg = dp_config(augment={"hflip": True, "crop_padding": 2})
    plain, aug = _train(plain_cfg, data), _train(aug_cfg, data)
    assert len(plain.steps) == len(aug.steps) == 4
    for p_step, a_step in zip(plain.steps, aug.steps, strict=True):
        # the same examples (one shared sampler), labels in the same order
        assert [len(y) for _, y in p_step] == [len(y) for _, y in a_step]
        for (_, py), (_, ay) in zip(p_step, a_step, strict=True):
            np.testing.assert_array_equal(py, ay)
    plain_x = [_batch(s) for s in plain.steps if s]
    aug_x = [_batch(s) for s in aug.steps if s]
    assert any(not np.array_equal(p, a) for p, a in zip(plain_x, aug_x, strict=True))
    assert all(a.dtype == np.float32 and a.shape[1:] == (8, 8, 1) for a in aug_x)
    # each step's images are exactly augment_batch of that step's clean batch
    for step, (p, a) in enumerate(zip(plain.steps, aug.steps, strict=True), start=1):
        if not p:
            continue
        clean = (_batch(p) * 255.0).round().astype(np.uint8)
        expected = augment_batch(clean, aug_cfg.augment, augment_rng(aug_cfg.seed, step))
        np.testing.assert_array_equal(_batch(a), model_inputs(expected, "image"))
    # evaluation (after every epoch) sees the clean test images, in both runs
    assert aug.predicted
    for seen in aug.predicted:
        np.testing.assert_array_equal(seen, model_inputs(data.x_test, "image"))


def test_the_logical_batch_is_augmented_once_whatever_the_chunk_size() -> None:
    data = images()
    config = dp_config(augment={"hflip": True, "crop_padding": 3})
    whole, chunked = _train(config, data), _train(config, data, physical=3)
    assert any(len(s) > 1 for s in chunked.steps)
    for a, b in zip(whole.steps, chunked.steps, strict=True):
        np.testing.assert_array_equal(_batch(a), _batch(b))


def test_the_same_run_twice_sees_the_same_augmented_images() -> None:
    data = images()
    config = dp_config(augment={"hflip": True, "crop_padding": 2})
    first, second = _train(config, data), _train(config, data)
    for a, b in zip(first.steps, second.steps, strict=True):
        np.testing.assert_array_equal(_batch(a), _batch(b))


def test_cached_inputs_with_augmentation_are_refused() -> None:
    config = dp_config(augment={"hflip": True})
    data = images()
    inputs = SimpleNamespace(x_train=data.x_train, x_test=data.x_test)
    with pytest.raises(ConfigError, match="augment is set but the run was handed cached"):
        run_training(config, data, PerfSpec(), privacy_plan(config, len(data.x_train)),
                     RecordingEngine(), progress=False, inputs=inputs)  # type: ignore[arg-type]


# -- the fixed-front cache ----------------------------------------------------------------------
def test_a_scatternet_run_with_augmentation_caches_no_front() -> None:
    data = images(side=16)
    plain = dp_config(model={"name": "scatter-linear", "activation": "tanh"})
    aug = dp_config(model={"name": "scatter-linear", "activation": "tanh"},
                    augment={"hflip": True, "crop_padding": 2})
    assert front_to_cache(plain, PerfSpec(), data) == ("scatter", "scatter_gn")
    assert front_to_cache(aug, PerfSpec(), data) == ()
    assert front_not_cached_reason(aug, PerfSpec(), data) == "augment"
    assert front_not_cached_reason(plain, PerfSpec(), data) is None
    assert front_not_cached_reason(aug, PerfSpec(cache_fixed_front=False), data) is None
    cnn = dataclasses.replace(aug, model=ModelSpec(name="cnn4"))
    assert front_not_cached_reason(cnn, PerfSpec(), data) is None  # no front to cache


def test_the_run_records_why_the_front_was_not_cached() -> None:
    data = images(side=16)
    config = dp_config(model={"name": "scatter-linear", "activation": "tanh"},
                       augment={"hflip": True})
    engine = RecordingEngine()
    trained = fit(config, data, PerfSpec(), backend="torch", model=SimpleNamespace(layers=[]),
                  make_engine=lambda plan, mech: engine, library_epsilon=lambda plan: {},
                  progress=False)
    perf = trained.result.to_dict()["perf"]
    assert perf["fixed_front_not_cached_because"] == "augment"
    assert "fixed_front_cached" not in perf
    assert trained.result.to_dict()["config"]["augment"] == {"hflip": True}
