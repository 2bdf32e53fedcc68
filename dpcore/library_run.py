"""What a ``recipe: library`` DP-SGD run will take through its library's own loader, known
before training (:func:`library_as_run`): its steps, sampling rate and their epsilons.

The bench's plan takes ``round(N / B)`` steps per epoch at q = B / N; a library's loader
may take other steps (:func:`dpcore.recipes.library_schedule`), and the run records the
epsilon of what ran (``privacy.as_run``). This states the same figures before the first step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dpcore.accounting import PrivacyPlan, dpsgd_event, epsilon_pld, epsilon_rdp
from dpcore.config import RunConfig
from dpcore.recipes import library_schedule
from dpcore.trainloop import library_epochs


@dataclass(frozen=True)
class LibraryRun:
    """The privacy of the steps a library run takes.

    Attributes:
        steps: optimizer steps the library's loader runs.
        sampling_rate: the q it samples at.
        epsilon_rdp / epsilon_pld: the shared accountants' epsilon of those steps at the
            plan's noise and delta (None where an accountant does not support the event).
    """

    steps: int
    sampling_rate: float
    epsilon_rdp: float | None
    epsilon_pld: float | None


def library_as_run(config: RunConfig, backend: str, plan: PrivacyPlan, n_train: int
                   ) -> LibraryRun | None:
    """The steps, q and epsilons of what a ``recipe: library`` DP-SGD run of ``backend`` on
    ``n_train`` examples will take, or None when that is what ``plan`` says (or the run is no
    library DP-SGD run)."""
    if config.recipe != "library" or plan.noise_multiplier <= 0:
        return None
    per_epoch, rate = library_schedule(config, n_train, backend)
    steps = library_epochs(plan) * per_epoch
    if steps == plan.batches.steps and math.isclose(rate, plan.batches.sampling_rate):
        return None
    event = dpsgd_event(plan.mechanism, plan.noise_multiplier, rate, steps)
    return LibraryRun(steps, rate, epsilon_rdp(event, plan.delta),
                      epsilon_pld(event, plan.delta))


__all__ = ["LibraryRun", "library_as_run"]
