"""The "how to add" checklists of docs/ARCHITECTURE.md, each followed once with a toy entry:
a layer type (registered from one module per checklist step, used in a custom YAML model,
trained one epoch on digits on both backends), a model architecture (built identically by
both backends) and a data set (loaded, trained on). Every registration is undone afterwards,
so the rest of the suite sees the real registries."""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
torch = pytest.importorskip("torch")

from dpcore import architectures as A  # noqa: E402
from dpcore.backend import load_backend  # noqa: E402
from dpcore.config import ModelSpec, RunConfig  # noqa: E402
from dpcore.data import load_dataset  # noqa: E402
from dpcore.data.loaders.base import Decoded, DecodeRequest  # noqa: E402
from dpcore.datasets import DATASETS, DatasetInfo  # noqa: E402
from dpcore.layers import LAYER_TYPES  # noqa: E402
from tfpipe import models as tfm  # noqa: E402
from torchpipe import models as ptm  # noqa: E402

# ----------------------------------------------------------------------------- a layer type
#: The checklist's steps for a layer type without weights, one module each (a real one puts
#: them in dpcore/layers.py, tfpipe/models.py and torchpipe/models.py).
TOY_LAYER_MODULES = ("tests.end_to_end.toy_layer.description",
                     "tests.end_to_end.toy_layer.keras_builder",
                     "tests.end_to_end.toy_layer.torch_builder")
#: Every registry a layer type's rules are looked up in, by layer type (or its name).
LAYER_REGISTRIES = (tfm.LAYER_BUILDERS, ptm.LAYER_BUILDERS, tfm.FAST_FALLBACKS,
                    ptm.FAST_FALLBACKS)


@pytest.fixture
def toy_layer() -> Iterator[type]:
    """Checklist "a layer type": its three modules imported afresh (importing one registers
    what it holds); the toy's type is yielded, and unregistered afterwards."""
    for name in TOY_LAYER_MODULES:
        if name in sys.modules:
            importlib.reload(sys.modules[name])
        else:
            importlib.import_module(name)
    toy = LAYER_TYPES["ToyScale"]
    try:
        yield toy
    finally:
        LAYER_TYPES.unregister(toy.__name__)
        for registry in LAYER_REGISTRIES:
            registry.unregister(toy)
        assert "ToyScale" not in LAYER_TYPES


def registering_modules(layer_type: type) -> set[str]:
    """The modules whose code registered ``layer_type`` and its rules."""
    return {LAYER_TYPES.origin(layer_type.__name__)} | {
        registry.origin(layer_type) for registry in LAYER_REGISTRIES if layer_type in registry}


def test_a_layer_type_is_registered_from_at_most_four_modules(toy_layer: type) -> None:
    """The toy needs exactly its three modules; every layer type of the zoo is registered
    from its description's module and one builder module per backend."""
    assert registering_modules(toy_layer) == set(TOY_LAYER_MODULES)
    for layer_type in LAYER_TYPES.values():
        assert len(registering_modules(layer_type)) <= 4, layer_type
        if layer_type is not toy_layer:
            assert registering_modules(layer_type) == {
                "dpcore.layers", "tfpipe.models", "torchpipe.models"}, layer_type


TOY_LAYER_YAML = """\
data: {name: digits}
model:
  name: custom
  activation: tanh
  layers:
    - {type: Conv2D, name: conv1, filters: 4, kernel: 3}
    - {type: ToyScale, factor: 0.25}
    - {type: Activation, name: act1}
    - {type: Flatten, name: flatten}
    - {type: Dense, name: head}
privacy: {mechanism: dpsgd-gaussian, noise_multiplier: 1.0, max_grad_norm: 1.0}
train: {epochs: 1, batch_size: 128, lr: 0.5, optimizer: sgd}
seed: 0
"""


def test_a_toy_layer_type_trains_in_a_custom_model_on_both_backends(
        toy_layer: type, tmp_path: Path) -> None:
    path = tmp_path / "toy-layer.yaml"
    path.write_text(TOY_LAYER_YAML, encoding="utf-8")
    config = RunConfig.from_file(path)
    arch = A.architecture(config.model, (8, 8, 1), 10)
    assert [type(layer) for layer in arch.layers][1] is toy_layer
    assert arch.layers[1] == toy_layer("toyscale1", 0.25)  # default name: type + count
    data = load_dataset(config.data, cache=False)
    x = data.x_test[:8].astype(np.float32) / np.float32(255.0)
    trained = {}
    for backend in ("tf", "torch"):
        trained[backend] = load_backend(backend).train(config, data, progress=False)
        result = trained[backend].result
        assert result.status == "finished" and len(result.history) == 1, backend
        assert result.perf["engine_used"] == "fast", backend  # no weights: nothing to fall back
    # the two builders compute the same function: tf's trained weights give the same
    # probabilities in a torch model, and the toy layer really scales (0.25 != 1)
    ported = ptm.build_model(config.model, (8, 8, 1), 10)
    ptm.set_weights(ported, trained["tf"].weights)
    p_tf = load_backend("tf").predict_proba(trained["tf"].model, x)
    np.testing.assert_allclose(load_backend("torch").predict_proba(ported, x), p_tf, atol=1e-5)
    unscaled = tfm.build_model(config.model, (8, 8, 1), 10)
    tfm.set_weights(unscaled, trained["tf"].weights)
    unscaled.get_layer("toyscale1").scale = 1.0
    assert np.abs(load_backend("tf").predict_proba(unscaled, x) - p_tf).max() > 1e-3


# ----------------------------------------------------------------------------- a model
def toy_mlp(spec: ModelSpec, input_shape: A.Shape, n_classes: int) -> tuple[A.Layer, ...]:
    """flatten -> dense 16 (times width) -> act -> dense n_classes."""
    return (A.Flatten("flatten"), A.Dense("fc1", max(1, round(16 * spec.width))),
            A.Activation("fc1_act"), A.Dense("fc2", n_classes))


@pytest.fixture
def toy_model() -> Iterator[str]:
    """Checklist "a model": a layer-graph function registered in IMAGE_ARCHITECTURES."""
    A.IMAGE_ARCHITECTURES.register("toy-mlp")(toy_mlp)
    try:
        yield "toy-mlp"
    finally:
        A.IMAGE_ARCHITECTURES.unregister("toy-mlp")


def test_a_toy_model_architecture_builds_the_same_model_in_both_backends(
        toy_model: str) -> None:
    assert toy_model in A.model_names()
    spec = RunConfig.from_dict({"data": {"name": "digits"},
                                "model": {"name": "toy-mlp", "width": 0.5}}).model
    keras_model = tfm.build_model(spec, (8, 8, 1), 10, seed=3)
    torch_model = ptm.build_model(spec, (8, 8, 1), 10, seed=3).eval()
    assert A.architecture(spec, (8, 8, 1), 10).weight_shapes() == {
        "fc1.kernel": (64, 8), "fc1.bias": (8,), "fc2.kernel": (8, 10), "fc2.bias": (10,)}
    x = np.random.default_rng(0).uniform(size=(4, 8, 8, 1)).astype(np.float32)
    with torch.no_grad():
        out_torch = torch_model(torch.from_numpy(np.moveaxis(x, -1, 1).copy())).numpy()
    np.testing.assert_allclose(out_torch, keras_model(x).numpy(), atol=1e-5)


# ----------------------------------------------------------------------------- a data set
def _toy_decode(path: Path | None, request: DecodeRequest) -> Decoded:
    """Two classes of 8x8 images: dark (class 0) and bright (class 1), seeded."""
    rng = np.random.default_rng(request.split_seed)
    y = np.arange(120) % 2
    x = (rng.integers(0, 100, (120, 8, 8, 1)) + 155 * y[:, None, None, None]).astype(np.uint8)
    return Decoded(x_train=x[:80], y_train=y[:80].astype(np.int64), x_test=x[80:],
                   y_test=y[80:].astype(np.int64), extra={})


def _toy_loader() -> types.ModuleType:
    """The loader module a new data set adds under dpcore/data/loaders/."""
    module = types.ModuleType("dpcore.data.loaders.toy_blobs")
    module_any: Any = module
    module_any.source_files = lambda path, info: []
    module_any.decode = _toy_decode
    module_any.split_sizes = lambda path, info: {"train": 80, "test": 40}
    return module


@pytest.fixture
def toy_data_set(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Checklist "a data set": a loader module and one DATASETS entry."""
    monkeypatch.setitem(sys.modules, "dpcore.data.loaders.toy_blobs", _toy_loader())
    DATASETS.register()(DatasetInfo(
        name="toy-blobs", task="image", class_names=("dark", "bright"),
        description="120 seeded 8x8 images, dark or bright (a test's toy).", candidates=(),
        how_to_get="built in: the test", documented_sizes=(80, 40), loader="toy_blobs",
        native_channels=1))
    try:
        yield "toy-blobs"
    finally:
        DATASETS.unregister("toy-blobs")


def test_a_toy_data_set_loads_and_trains(toy_data_set: str) -> None:
    config = RunConfig.from_dict({
        "data": {"name": toy_data_set},
        "model": {"name": "custom", "layers": [{"type": "Flatten"}, {"type": "Dense"}]},
        "privacy": {"mechanism": "dpsgd-gaussian", "noise_multiplier": 0.5,
                    "max_grad_norm": 1.0},
        "train": {"epochs": 1, "batch_size": 20, "lr": 0.5, "optimizer": "sgd"},
    })
    data = load_dataset(config.data, cache=False)
    assert (data.x_train.shape, data.x_test.shape) == ((80, 8, 8, 1), (40, 8, 8, 1))
    assert data.class_names == ("dark", "bright")
    trained = load_backend("torch").train(config, data, progress=False)
    assert trained.result.status == "finished"
    assert trained.weights["dense1.kernel"].shape == (64, 2)  # one unit per class
