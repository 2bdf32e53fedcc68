"""The "a local-DP mechanism" checklist of docs/ARCHITECTURE.md followed once with a toy
mechanism: an ``LdpMechanism`` subclass registered in ``LDP_MECHANISMS`` is built by name,
reports its epsilons and privatises a data set whose record carries its DpEvent."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import dp_accounting
import numpy as np
import pytest

from dpcore.config import DataSpec
from dpcore.data import load_dataset
from dpcore.ldp import LDP_MECHANISMS, build_mechanism
from dpcore.ldp.mechanisms import LdpMechanism, _level_entry
from dpcore.ldp.privatize import privatize_dataset


@dataclass(frozen=True)
class ToyLaplace(LdpMechanism):
    """Laplace noise of scale ``scale`` on every value, always clipped to [0, 1]; reports the
    per-image level only (L1 sensitivity H W C)."""

    name: ClassVar[str] = "toy_laplace"
    noise_param: ClassVar[str] = "scale"
    levels: ClassVar[tuple[str, ...]] = ("image",)
    scale: float = 1.0
    clip: bool = True

    def _perturb(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return x + self.scale * rng.laplace(size=x.shape)  # Laplace(0, scale)

    def _event(self, noise_multiplier: float) -> dp_accounting.DpEvent:
        return dp_accounting.LaplaceDpEvent(noise_multiplier)

    @property
    def method(self) -> str:
        return "Laplace mechanism, L1 sensitivity H W C per image"

    def _levels(self, shape: tuple[int, int, int], delta: float | None) -> dict[str, Any]:
        hwc = float(math.prod(shape))
        entry = _level_entry(epsilon=hwc / self.scale, delta=0.0, sensitivity=hwc, norm="L1",
                             noise_scale=self.scale, neighbours="any image")
        return {"image": entry}


@pytest.fixture
def toy() -> Iterator[str]:
    """The checklist's registration: ``@LDP_MECHANISMS.register()`` on the class, undone
    afterwards."""
    LDP_MECHANISMS.register()(ToyLaplace)
    try:
        yield ToyLaplace.name
    finally:
        LDP_MECHANISMS.unregister(ToyLaplace.name)


def test_a_toy_ldp_mechanism_privatises_a_data_set(toy: str) -> None:
    assert toy in DataSpec(name="digits", ldp_mechanism=toy).ldp_mechanism  # config accepts it
    mechanism = build_mechanism(toy, {"scale": 2.0})
    assert mechanism.label() == "toy_laplace-scale2-clip"
    epsilons = mechanism.epsilons((8, 8, 1), delta=1e-5)
    assert epsilons["per_image"]["epsilon"] == 32.0 and "per_value" not in epsilons

    data = load_dataset(DataSpec(name="digits", train_limit=50, test_limit=20), cache=False)
    private = privatize_dataset(data, mechanism, seed=0, cache_dir=None)
    assert private.x_train.shape == data.x_train.shape and private.x_train.dtype == np.float32
    assert private.x_train.min() >= 0.0 and private.x_train.max() <= 1.0
    clean = data.x_train.astype(np.float32) / 255.0
    assert np.abs(private.x_train - clean).mean() > 0.1  # noised (scale 2, clipped)
    assert private.ldp is not None and private.ldp.mechanism == "toy_laplace"
    assert private.ldp.dp_event == dp_accounting.LaplaceDpEvent(2.0 / 64)  # per image
    again = privatize_dataset(data, mechanism, seed=0, cache_dir=None)
    np.testing.assert_array_equal(again.x_train, private.x_train)  # seeded
