"""The model-randomisation sanity check (Adebayo et al. 2018), framework-free parts: the
layers it re-initialises, the weights it loads, and the similarity of maps against hand
values; an explanation that ignores the model fails, unrelated maps pass."""

from __future__ import annotations

import numpy as np
import pytest

from dpcore.architectures import architecture
from dpcore.config import ModelSpec
from dpcore.errors import ConfigError, DataError
from dpcore.metrics.sanity import (
    FAIL_SPEARMAN,
    FAILS,
    PASSES,
    cascade_layers,
    randomisation_check,
    randomised_weights,
    spearman_per_map,
    ssim_per_map,
)
from dpcore.weights import init_weights


def _cnn4() -> tuple[list[str], list[str], str, dict[str, tuple[int, ...]]]:
    arch = architecture(ModelSpec(name="cnn4"), (28, 28, 1), 10)
    return ([layer.name for layer in arch.walk()], list(arch.weight_kinds()),
            arch.gradcam_layer(), arch.weight_shapes())


def test_the_cascade_runs_from_the_explained_layer_to_the_output() -> None:
    order, weighted, explained, _ = _cnn4()
    assert explained == "conv2"
    assert cascade_layers(order, weighted, explained) == ["conv2", "fc1", "fc2"]
    assert cascade_layers(order, weighted, "conv1") == ["conv1", "conv2", "fc1", "fc2"]
    with pytest.raises(ConfigError, match="'conv9' is not a layer of the model; valid: conv1"):
        cascade_layers(order, weighted, "conv9")
    with pytest.raises(ConfigError, match="nothing to re-initialise"):
        cascade_layers(order, ["conv1"], "conv2")


def test_randomised_weights_change_the_cascade_only() -> None:
    order, weighted, explained, shapes = _cnn4()
    trained = init_weights(shapes, seed=7)
    layers = cascade_layers(order, weighted, explained)
    fresh = randomised_weights(trained, layers, seed=3)
    assert set(fresh) == set(trained)
    for key, value in trained.items():
        same = np.array_equal(fresh[key], value)
        layer = key.rsplit(".", 1)[0]
        if layer == "conv1":
            assert same, key
        elif key.endswith("kernel"):
            assert not same and fresh[key].shape == value.shape, key
    assert np.array_equal(randomised_weights(trained, layers, seed=3)["fc2.kernel"],
                          fresh["fc2.kernel"])  # seeded
    with pytest.raises(ConfigError, match="nope have no weights"):
        randomised_weights(trained, ["nope"])


def test_spearman_of_maps_against_hand_values() -> None:
    a = np.array([[[0.0, 0.2], [0.5, 1.0]]])
    assert spearman_per_map(a, a) == pytest.approx([1.0])
    assert spearman_per_map(a, 1.0 - a) == pytest.approx([-1.0])
    # ranks (1, 2, 3, 4) vs (2, 1, 3, 4): 1 - 6 * 2 / (4 * 15) = 0.8
    b = np.array([[[0.3, 0.1], [0.5, 1.0]]])
    assert spearman_per_map(a, b) == pytest.approx([0.8])
    flat = np.zeros_like(a)
    assert spearman_per_map(flat, flat) == pytest.approx([1.0])  # no ranking, none changed
    assert spearman_per_map(a, flat) == pytest.approx([0.0])  # the ranking was lost
    with pytest.raises(DataError, match="need two equal"):
        spearman_per_map(a, a[0])


def test_ssim_of_identical_maps_is_one() -> None:
    maps = np.random.default_rng(0).uniform(size=(3, 16, 16))
    assert ssim_per_map(maps, maps) == pytest.approx([1.0, 1.0, 1.0])


def test_an_explanation_that_ignores_the_model_fails_and_unrelated_maps_pass() -> None:
    """An "explanation" that is the image itself (Adebayo et al.'s edge-detector case) gives
    the same maps for the trained and the randomised model: it fails. Maps that share nothing
    pass."""
    rng = np.random.default_rng(1)
    images = rng.uniform(size=(20, 12, 12))
    same = randomisation_check(images, images.copy(), layers=["conv2", "fc"], seed=5)
    assert same["spearman_median"] == pytest.approx(1.0) and same["ssim_median"] == 1.0
    assert not same["passes"] and same["verdict"] == FAILS
    assert same["randomised_layers"] == ["conv2", "fc"] and same["seed"] == 5
    other = randomisation_check(images, rng.uniform(size=images.shape))
    assert abs(other["spearman_median"]) < 0.2
    assert other["passes"] and other["verdict"] == PASSES
    assert other["threshold"] == FAIL_SPEARMAN == 0.5
    # a slightly perturbed copy still ranks the pixels as before: fails
    close = randomisation_check(images, images + rng.normal(0, 0.05, size=images.shape))
    assert close["spearman_median"] > 0.9 and not close["passes"]
