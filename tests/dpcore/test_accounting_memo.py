"""The per-process memo of the shared accountant's pure functions (calibration, epsilon of an
event): the same inputs are computed once and give the same figure; other inputs, errors and
unhashable events are computed every time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import dp_accounting
import pytest

from dpcore import accounting
from dpcore.errors import ConfigError


@pytest.fixture()
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[Any, ...]]]:
    """Every call that reaches dp_accounting's calibration, with the memo emptied first."""
    calls: list[tuple[Any, ...]] = []
    inner = accounting._calibrate_dp_accounting  # noqa: SLF001

    def counting(*args: Any, **kwargs: Any) -> float:
        calls.append(args)
        return inner(*args, **kwargs)

    monkeypatch.setattr(accounting, "_calibrate_dp_accounting", counting)
    accounting._calibrated.cache_clear()  # noqa: SLF001
    yield calls
    accounting._calibrated.cache_clear()  # noqa: SLF001


def test_a_calibration_is_computed_once_per_process(counted: list[tuple[Any, ...]]) -> None:
    first = accounting.calibrate_noise_multiplier("dpsgd-gaussian", 2.0, 1e-5, 0.01, 300,
                                                  accountant="rdp")
    again = accounting.calibrate_noise_multiplier("dpsgd-gaussian", 2.0, 1e-5, 0.01, 300,
                                                  accountant="rdp")
    assert again == first and len(counted) == 1
    other = accounting.calibrate_noise_multiplier("dpsgd-gaussian", 2.0, 1e-5, 0.01, 301,
                                                  accountant="rdp")
    assert len(counted) == 2 and other != first
    # the memo serves what the calibrator computes: the target is met, as without it
    event = accounting.dpsgd_event("dpsgd-gaussian", first, 0.01, 300)
    assert accounting.epsilon_rdp(event, 1e-5) <= 2.0


def test_an_error_is_raised_every_time_not_kept(counted: list[tuple[Any, ...]]) -> None:
    for _ in range(2):  # a target the smallest noise already meets: refused, twice computed
        with pytest.raises(ConfigError, match="target_epsilon=1e\\+08"):
            accounting.calibrate_noise_multiplier("dpsgd-gaussian", 1e8, 1e-5, 0.01, 10,
                                                  accountant="rdp")
    assert len(counted) == 2


def test_an_unhashable_event_is_computed_not_refused() -> None:
    step = dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.0))
    composed = dp_accounting.ComposedDpEvent([step, step])  # holds a list: no hash
    with pytest.raises(TypeError):
        hash(composed)
    assert accounting.epsilon_rdp(composed, 1e-5) == accounting.epsilon_rdp(
        dp_accounting.SelfComposedDpEvent(step, 2), 1e-5)
    assert accounting.epsilon_pld(composed, 1e-5) is not None
