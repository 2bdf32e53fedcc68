"""The model-randomisation check and the calibrated faithfulness through the backend contract,
on both backends: a trained model's Grad-CAM passes the check, a model whose explained layers
already hold the randomisation's draw (its maps cannot change) fails; one code path
(:func:`dpcore.evaluation.randomisation.randomisation_check_of`) serves both frameworks."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dpcore.backend import load_backend
from dpcore.config import RunConfig
from dpcore.data import as_float01, load_dataset
from dpcore.evaluation.calibrated import calibrated_faithfulness_of
from dpcore.evaluation.randomisation import randomisation_check_of
from dpcore.metrics.calibration import fit_temperature
from dpcore.metrics.sanity import FAILS, PASSES, randomised_weights

CONFIG = RunConfig.from_dict({
    "data": {"name": "digits", "image_size": 28}, "model": {"name": "cnn4"},
    "train": {"epochs": 2, "batch_size": 64, "lr": 0.1, "optimizer": "sgd", "momentum": 0.9},
    "privacy": {"mechanism": "none"}})
FRAMEWORK = {"tf": "tensorflow", "torch": "torch"}


@pytest.fixture(autouse=True)
def _isolated_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DPCOMPARE_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module", params=["tf", "torch"])
def trained(request: pytest.FixtureRequest) -> tuple[str, Any, Any]:
    pytest.importorskip(FRAMEWORK[request.param])
    dataset = load_dataset(CONFIG.data)
    return request.param, load_backend(request.param).train(CONFIG, dataset, progress=False), \
        dataset


def _maps(backend: str, model: Any, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    api = load_backend(backend)
    target = api.predict_proba(model, x).argmax(axis=1)
    return target, api.gradcam(model, x, target)


def test_a_trained_model_passes_and_a_randomised_one_fails(trained: tuple[str, Any, Any]
                                                           ) -> None:
    backend, model, dataset = trained
    x = as_float01(dataset.x_test[:48])
    target, maps = _maps(backend, model.model, x)
    check = randomisation_check_of(load_backend(backend), model, x, target, maps)
    assert check["randomised_layers"] == ["conv2", "fc1", "fc2"]
    assert check["passes"] and check["verdict"] == PASSES
    assert check["spearman_median"] < 0.5 and check["n"] == 48
    # the model whose explained layer and those above it are the check's own draw: the
    # randomised model is itself, its maps do not change, the check must fail
    weights = randomised_weights(model.weights, check["randomised_layers"], check["seed"])
    api = load_backend(backend)
    randomised = api.build_model(CONFIG.model, model.input_shape, model.n_classes)
    api.set_weights(randomised, weights)
    as_drawn = dataclasses.replace(model, model=randomised, weights=weights)
    target, maps = _maps(backend, randomised, x)
    failed = randomisation_check_of(api, as_drawn, x, target, maps)
    assert not failed["passes"] and failed["verdict"] == FAILS
    assert failed["spearman_median"] == pytest.approx(1.0, abs=1e-6)


def test_calibrated_faithfulness_is_fitted_outside_the_measured_images(
        trained: tuple[str, Any, Any]) -> None:
    backend, model, dataset = trained
    idx = np.arange(100)
    x = as_float01(dataset.x_test[idx])
    target, maps = _maps(backend, model.model, x)
    out = calibrated_faithfulness_of(load_backend(backend), model, dataset, idx, x, maps,
                                     target, seed=0)
    assert out["fit_on"] == "test images outside the faithfulness subset"
    assert out["fit_split"] == "test"
    assert out["n_fit"] == len(dataset.x_test) - 100 and out["n"] == 100
    assert out["temperature"] > 0 and out["nll_after"] <= out["nll_before"] + 1e-9
    assert 0.0 <= out["average_drop"] <= 100.0
    # a test set too small to leave 100 images out: the subset is split in two
    small = calibrated_faithfulness_of(load_backend(backend), model, dataset,
                                       np.arange(len(dataset.x_test) - 10),
                                       as_float01(dataset.x_test[:-10]),
                                       load_backend(backend).gradcam(
                                           model.model, as_float01(dataset.x_test[:-10]),
                                           np.zeros(len(dataset.x_test) - 10, dtype=int)),
                                       np.zeros(len(dataset.x_test) - 10, dtype=int), seed=0)
    assert small["fit_on"].startswith("half of the faithfulness subset")
    assert small["n_fit"] + small["n"] == len(dataset.x_test) - 10
    assert small["fit_split"] == "faithfulness subset"
    # a data set with a validation split: T is fitted there, on nothing else
    with_val = dataclasses.replace(dataset, x_val=dataset.x_test[-80:],
                                   y_val=dataset.y_test[-80:])
    val = calibrated_faithfulness_of(load_backend(backend), model, with_val, idx, x, maps,
                                     target, seed=0)
    assert val["fit_split"] == "validation" and val["n_fit"] == 80 and val["n"] == 100
    proba = load_backend(backend).predict_proba(model.model, as_float01(dataset.x_test[-80:]))
    assert val["temperature"] == pytest.approx(fit_temperature(proba, dataset.y_test[-80:]),
                                               rel=1e-6)
