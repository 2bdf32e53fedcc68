"""The IMDB epsilon puzzle's accountant helpers (no framework needed)."""

from __future__ import annotations

import math

import pytest
from dp_accounting import dp_event as dpe
from dp_accounting.rdp import rdp_privacy_accountant as rdp

from benchmarks.imdb_epsilon_puzzle import ORDERS_2019, rdp_epsilon, tf_privacy_2019


def test_published_setting_gives_the_opacus_figures() -> None:
    q = 64 / 25_000
    got = [rdp_epsilon(q, 0.56, math.ceil(e * 25_000 / 64), 1e-5) for e in (15, 45, 60)]
    assert got == pytest.approx([6.84, 10.31, 11.74], abs=0.01)


def test_linear_composition_equals_the_accountant() -> None:
    acc = rdp.RdpAccountant()
    acc.compose(dpe.SelfComposedDpEvent(
        dpe.PoissonSampledDpEvent(0.01, dpe.GaussianDpEvent(1.1)), 321))
    assert rdp_epsilon(0.01, 1.1, 321, 1e-5) == pytest.approx(acc.get_epsilon(1e-5), rel=1e-9)


def test_2019_formula_is_larger_and_matches_its_documented_example() -> None:
    """The 2019 script's docstring: N=60000, batch 256, noise 1.12, 60 epochs, delta 1e-5
    satisfies (2.92, 1e-5)-DP."""
    assert tf_privacy_2019(60_000, 256, 1.12, 60, 1e-5) == pytest.approx(2.92, abs=0.005)
    assert tf_privacy_2019(25_000, 64, 0.56, 15, 1e-5) > 7.5
    assert 1.25 in ORDERS_2019 and 512 in ORDERS_2019
