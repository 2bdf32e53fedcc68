"""Augmentation is the same on both backends: a harmonised DP-SGD run with ``augment`` (flips
and crops drawn in dpcore, seeded by the run seed and the step) trains to the same weights in
TF Privacy and in Opacus, and to other weights than the run without augmentation.

Noise 0 with clipping active, as in test_dp_equivalence: with noise, each backend draws it from
its own framework's generator, so only the noise-free update is comparable across frameworks.
Tiny data (16x16 digits), 3 steps."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("torch")
pytest.importorskip("opacus")

from dpcore.config import AugmentSpec, PerfSpec, RunConfig  # noqa: E402
from dpcore.weights import init_weights, weight_shapes  # noqa: E402
from tests.backends.train_helpers import FRAMEWORKS, config, diff, digits16, rel_error  # noqa: E402

TOL = 1e-5  # relative, flat L2 norm of the update difference (as test_dp_equivalence)
N_TRAIN, N_TEST = 120, 40


def _config(augment: AugmentSpec) -> RunConfig:
    base = config(noise=0.0, clip=2.0, lr=0.5, momentum=0.9, steps=3, batch_size=32, seed=2)
    return dataclasses.replace(base, augment=augment)


def _updates(cfg: RunConfig) -> dict[str, dict[str, np.ndarray]]:
    data = digits16(N_TRAIN, N_TEST)
    start = init_weights(weight_shapes(cfg.model, data.input_shape, data.n_classes), cfg.seed)
    out = {}
    for name, framework in FRAMEWORKS.items():
        trained = framework.modules()[1].train(cfg, data, PerfSpec(physical_batch_size=16),
                                               progress=False)
        assert trained.result.status == "finished"
        out[name] = diff(trained.weights, start)
    return out


def test_an_augmented_dp_run_gives_the_same_weights_on_both_backends() -> None:
    augmented = _updates(_config(AugmentSpec(hflip=True, crop_padding=2)))
    assert rel_error(augmented["torch"], augmented["tf"]) < TOL
    plain = _updates(_config(AugmentSpec()))
    assert rel_error(plain["torch"], plain["tf"]) < TOL
    # augmentation changed what was learned, far beyond the cross-backend tolerance
    assert rel_error(augmented["tf"], plain["tf"]) > 100 * TOL
    assert rel_error(augmented["torch"], plain["torch"]) > 100 * TOL
