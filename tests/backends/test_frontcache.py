"""The fixed front end's cache (:mod:`dpcore.frontcache`): a ScatterNet run that computes the
scattering once per data set trains to the same weights, history and test probabilities as
one that recomputes it in every step, on both backends; the split model's head over the
features gives the full model's probabilities; the run records what was cached.

Tiny inputs (16x16 sklearn digits), a few steps, so the file runs in well under a minute.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
torch = pytest.importorskip("torch")
pytest.importorskip("kymatio")

from dpcore.architectures import architecture  # noqa: E402
from dpcore.config import ModelSpec, PerfSpec, RunConfig  # noqa: E402
from dpcore.errors import ConfigError  # noqa: E402
from dpcore.frontcache import cache_inputs, fixed_front_names, front_to_cache  # noqa: E402
from dpcore.trainloop import model_inputs  # noqa: E402
from dpcore.weights import init_weights, weight_shapes  # noqa: E402
from tests.backends.train_helpers import config, digits16, flat  # noqa: E402

N_TRAIN, N_TEST = 96, 32  # a small slice of the digits: the scattering dominates the cost
#: The training comparison's slice and batch: half the examples of N_TRAIN/N_TEST and half the
#: batch, so the same 3 steps per epoch (4 steps: 2 epochs, 2 evaluations, momentum carried
#: over) at half the scattering cost (the uncached run scatters every batch it trains on).
TRAIN_N_TRAIN, TRAIN_N_TEST, TRAIN_BATCH = 48, 16, 16
#: The order test's slice: 8 training and 20 test examples, cached in batches of 7, so both
#: splits span several batches and the last one is partial (test example 13 ends batch 2).
ORDER_N_TRAIN, ORDER_N_TEST = 8, 20

BACKENDS = ("tf", "torch")
SCATTER_MODELS = ("scatter-linear", "scatter-cnn")
WEIGHT_TOL = 1e-5  # relative, flat L2 norm of the weight difference after training
PROBA_TOL = 1e-5  # absolute, on probabilities


def _scatter_config(model: str, mechanism: str = "dpsgd-gaussian",
                    batch_size: int = 32) -> RunConfig:
    base = config(mechanism=mechanism, steps=4, batch_size=batch_size, lr=0.2, momentum=0.9)
    return dataclasses.replace(base, model=ModelSpec(name=model, activation="tanh"))


def _train(backend: str, cfg: RunConfig, cache: bool):  # noqa: ANN202 - a TrainedModel
    from dpcore.backend import load_backend

    perf = PerfSpec(cache_fixed_front=cache, physical_batch_size=None)
    return load_backend(backend).train(cfg, digits16(TRAIN_N_TRAIN, TRAIN_N_TEST), perf,
                                       progress=False)


@pytest.mark.parametrize("model", SCATTER_MODELS)
def test_the_front_is_the_scattering_and_its_weight_free_groupnorm(model: str) -> None:
    arch = architecture(ModelSpec(name=model), (16, 16, 1), 10)
    assert fixed_front_names(arch) == ("scatter", "scatter_gn")


@pytest.mark.parametrize("model", ["cnn4", "resnet18"])
def test_a_model_without_a_scattering_has_no_front(model: str) -> None:
    arch = architecture(ModelSpec(name=model), (32, 32, 3), 10)
    assert fixed_front_names(arch) == ()


def test_the_cache_is_off_when_switched_off_or_for_the_library_recipe() -> None:
    cfg = _scatter_config("scatter-linear")
    data = digits16(N_TRAIN, N_TEST)
    assert front_to_cache(cfg, PerfSpec(), data) == ("scatter", "scatter_gn")
    assert front_to_cache(cfg, PerfSpec(cache_fixed_front=False), data) == ()
    assert front_to_cache(dataclasses.replace(cfg, recipe="library"), PerfSpec(), data) == ()
    assert front_to_cache(config(), PerfSpec(), data) == ()  # cnn4


def test_the_cache_is_off_with_augmentation() -> None:
    """Augmented training images have new scattering features in every step."""
    from dpcore.config import AugmentSpec

    cfg = dataclasses.replace(_scatter_config("scatter-linear"),
                              augment=AugmentSpec(hflip=True, crop_padding=2))
    assert front_to_cache(cfg, PerfSpec(), digits16(N_TRAIN, N_TEST)) == ()


def test_a_non_boolean_switch_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError, match="perf.cache_fixed_front='yes'.*true or false"):
        PerfSpec(cache_fixed_front="yes")  # type: ignore[arg-type]


def _split(backend: str, model_name: str):  # noqa: ANN202 - (full model, FixedFront)
    if backend == "tf":
        from tfpipe.frontsplit import split_fixed_front
        from tfpipe.models import build_model
    else:
        from torchpipe.frontsplit import split_fixed_front
        from torchpipe.models import build_model
    model = build_model(ModelSpec(name=model_name), (16, 16, 1), 10, seed=3)
    return model, split_fixed_front(model, ("scatter", "scatter_gn"))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("model_name", SCATTER_MODELS)
def test_the_head_over_the_features_is_the_full_model(backend: str, model_name: str) -> None:
    from dpcore.backend import load_backend

    model, front = _split(backend, model_name)
    x = model_inputs(digits16(N_TRAIN, N_TEST).x_test[:20], "image")
    features = front.features(x)
    assert features.shape == (20, 4, 4, 81) and features.dtype == np.float32
    full = load_backend(backend).predict_proba(model, x)
    head = load_backend(backend).predict_proba(front.head, features)
    assert np.abs(full - head).max() <= PROBA_TOL
    # the head shares the model's weights: one set of arrays, the same neutral keys
    if backend == "tf":
        from tfpipe.models import get_weights
    else:
        from torchpipe.models import get_weights
    whole, part = get_weights(model), get_weights(front.head)
    assert sorted(whole) == sorted(part)
    assert all(np.array_equal(whole[k], part[k]) for k in whole)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_split_that_is_not_the_model_prefix_is_refused(backend: str) -> None:
    if backend == "tf":
        from tfpipe.frontsplit import split_fixed_front
        from tfpipe.models import build_model
    else:
        from torchpipe.frontsplit import split_fixed_front
        from torchpipe.models import build_model
    model = build_model(ModelSpec(name="scatter-linear"), (16, 16, 1), 10, seed=0)
    with pytest.raises(ConfigError, match=r"cannot split.*\['scatter_gn'\].*leading"):
        split_fixed_front(model, ("scatter_gn",))


@pytest.mark.parametrize("backend", BACKENDS)
def test_cached_features_keep_the_example_order(backend: str) -> None:
    _, front = _split(backend, "scatter-linear")
    data = digits16(ORDER_N_TRAIN, ORDER_N_TEST)
    cached = cache_inputs(data, front, progress=False, batch_size=7)
    assert cached.x_train.shape == (len(data.x_train), 4, 4, 81)
    one_by_one = front.features(model_inputs(data.x_test[13:14], "image"))
    assert np.abs(cached.x_test[13:14] - one_by_one).max() <= 1e-6
    assert cached.record()["fixed_front_cached"] == "scatter, scatter_gn"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("model_name", "mechanism"), [
    ("scatter-linear", "dpsgd-gaussian"), ("scatter-cnn", "dpsgd-laplace"),
    ("scatter-cnn", "none")])
def test_a_cached_run_trains_what_an_uncached_run_trains(
    backend: str, model_name: str, mechanism: str
) -> None:
    """Same seed, same noise draws, same batches: the weights, the per-epoch history and the
    final test probabilities agree to float tolerance; only the cached run records a cache."""
    cfg = _scatter_config(model_name, mechanism, batch_size=TRAIN_BATCH)
    cached = _train(backend, cfg, cache=True)
    plain = _train(backend, cfg, cache=False)
    a, b = flat(cached.weights), flat(plain.weights)
    assert np.linalg.norm(a - b) <= WEIGHT_TOL * np.linalg.norm(b)
    init = flat(init_weights(weight_shapes(cfg.model, (16, 16, 1), 10), cfg.seed))
    assert np.linalg.norm(b - init) >= 1e-3 * np.linalg.norm(init)  # training moved them
    ra, rb = cached.result, plain.result
    assert ra.status == rb.status == "finished"
    for ha, hb in zip(ra.history, rb.history, strict=True):
        assert ha["loss"] == pytest.approx(hb["loss"], rel=1e-4)
        assert ha["test_accuracy"] == pytest.approx(hb["test_accuracy"], abs=1e-9)
    assert ra.metrics["accuracy"] == pytest.approx(rb.metrics["accuracy"], abs=1e-9)
    assert ra.perf["fixed_front_cached"] == "scatter, scatter_gn"
    assert ra.perf["fixed_front_feature_shape"] == [4, 4, 81]
    assert "fixed_front_cached" not in rb.perf
    # the returned model is the full one: it takes images, and holds the trained weights
    from dpcore.backend import load_backend

    x = digits16(TRAIN_N_TRAIN, TRAIN_N_TEST).x_test[:10]
    assert len(ra.history) == 2  # two epochs: the comparison spans an evaluation mid-run
    proba = load_backend(backend).predict_proba(cached.model, x)
    assert proba.shape == (10, 10)
    assert np.abs(proba - load_backend(backend).predict_proba(plain.model, x)).max() <= 1e-4


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_second_run_reuses_the_features_and_trains_the_same_bits(backend: str) -> None:
    """The process's memo: the second run of one front on one data set takes the features the
    first computed (recorded as reused) and trains to the same bits as the first."""
    from dpcore.frontcache import FEATURE_MEMO

    FEATURE_MEMO.clear()
    cfg = _scatter_config("scatter-linear", batch_size=TRAIN_BATCH)
    first = _train(backend, cfg, cache=True)
    second = _train(backend, cfg, cache=True)
    assert "fixed_front_reused" not in first.result.perf
    assert second.result.perf["fixed_front_reused"] is True
    np.testing.assert_array_equal(flat(first.weights), flat(second.weights))
    def figures(history: list[dict]) -> list[dict]:
        return [{k: v for k, v in row.items() if "seconds" not in k} for row in history]
    assert figures(first.result.history) == figures(second.result.history)


def test_the_memo_keys_on_the_images_and_drops_the_least_recently_used() -> None:
    from dpcore.frontcache import CachedInputs, FeatureMemo, memo_key

    data = digits16(8, 4)
    changed = dataclasses.replace(data, x_train=data.x_train.copy())
    changed.x_train[0, 0, 0] = changed.x_train[0, 0, 0] + 1  # one pixel: an LDP-privatised set
    assert memo_key("tf", "front", data) != memo_key("tf", "front", changed)
    assert memo_key("tf", "front", data) != memo_key("torch", "front", data)
    assert memo_key("tf", "front", data) == memo_key("tf", "front",
                                                      dataclasses.replace(data))

    def entry(n: int) -> CachedInputs:
        return CachedInputs(np.zeros((n, 4), np.float32), np.zeros((1, 4), np.float32), 0.0,
                            ("scatter",))

    memo = FeatureMemo(max_bytes=100)  # an entry of 3 + 1 rows of 4 float32 is 64 bytes
    memo.put(("a",), entry(3))
    memo.put(("b",), entry(3))
    assert len(memo) == 1 and memo.get(("a",)) is None  # a was dropped: both do not fit
    memo.put(("huge",), entry(1000))  # larger than the whole memo: not kept
    assert memo.get(("huge",)) is None and memo.get(("b",)) is not None
    kept = memo.get(("b",))
    with pytest.raises(ValueError, match="read-only"):
        kept.x_train[0, 0] = 1.0


def test_torch_inputs_from_read_only_features_warn_nothing() -> None:
    """The memo's read-only features become torch inputs without torch's "not writable"
    warning (the inputs are only read), in both memory formats, with the same values."""
    import warnings

    from torchpipe.predict import to_tensor

    features = np.arange(2 * 3 * 3 * 4, dtype=np.float32).reshape(2, 3, 3, 4)
    features.setflags(write=False)
    for memory_format in (torch.contiguous_format, torch.channels_last):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            tensor = to_tensor(features, text=False, memory_format=memory_format)
        np.testing.assert_array_equal(tensor.permute(0, 2, 3, 1).numpy(), features)
