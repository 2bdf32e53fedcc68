"""With ``privacy.noise_source: shared`` both backends add the one noise vector dpcore draws
per step: from the same initial weights (``init_weights`` of the seed, ported into both) and
the same batches (the shared sampler), TF Privacy and Opacus reach the same weights after a
few steps of DP training on digits, on the reference and on the fast engines. With each
framework's own noise they do not."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("torch")
pytest.importorskip("opacus")

from dpcore.config import PerfSpec, RunConfig  # noqa: E402
from tests.backends.train_helpers import FRAMEWORKS, config, diff, digits16, rel_error  # noqa: E402

#: Relative tolerance of the weight update (flat L2 norm of the difference over the update's
#: norm): the one of the existing equivalence tests (tests/backends/test_dp_equivalence.py).
TOL = 1e-5


def _shared(cfg: RunConfig, source: str = "shared") -> RunConfig:
    return dataclasses.replace(
        cfg, privacy=dataclasses.replace(cfg.privacy, noise_source=source))


def _train(backend: str, cfg: RunConfig, engine: str) -> Any:
    train = FRAMEWORKS[backend].modules()[1]
    return train.train(cfg, digits16(), PerfSpec(engine=engine, physical_batch_size=16),
                       progress=False)


def _initial(cfg: RunConfig) -> dict[str, np.ndarray]:
    from dpcore.weights import init_weights, weight_shapes

    return init_weights(weight_shapes(cfg.model, (16, 16, 1), 10), cfg.seed)


@pytest.mark.parametrize(("engine", "mechanism", "clip"), [
    ("reference", "dpsgd-gaussian", 1.0), ("fast", "dpsgd-gaussian", 1.0),
    ("fast", "dpsgd-laplace", 30.0)])
def test_shared_noise_gives_the_same_weights_in_both(engine: str, mechanism: str,
                                                     clip: float) -> None:
    cfg = _shared(config(mechanism=mechanism, noise=1.0, clip=clip, steps=4, batch_size=32,
                         lr=0.5, seed=2))
    start = _initial(cfg)
    tf_w = _train("tf", cfg, engine).weights
    torch_w = _train("torch", cfg, engine).weights
    update_tf, update_torch = diff(tf_w, start), diff(torch_w, start)
    assert rel_error(update_torch, update_tf) < TOL
    if engine == "reference":
        return
    # the noise is really in the update: the noise-free step moves the weights elsewhere
    silent = _train("torch", dataclasses.replace(
        cfg, privacy=dataclasses.replace(cfg.privacy, noise_multiplier=0.0)), engine).weights
    assert rel_error(diff(silent, start), update_tf) > 0.5


def test_framework_noise_differs_between_backends() -> None:
    """The control: each library's own noise (the default) makes the two runs differ."""
    cfg = config(noise=1.0, clip=1.0, steps=4, batch_size=32, lr=0.5, seed=2)
    start = _initial(cfg)
    tf_w = _train("tf", cfg, "reference").weights
    torch_w = _train("torch", cfg, "reference").weights
    assert rel_error(diff(torch_w, start), diff(tf_w, start)) > 0.1
