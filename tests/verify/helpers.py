"""Running ``dpcompare verify`` in tests: small configurations on the bundled digits, a cache
of reports so that one (configuration, backend, step, bug) is verified once per process."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

from dpcore.config import PerfSpec, RunConfig, apply_overrides

#: The bug tests' configuration: Gaussian DP-SGD at noise multiplier 1 on digits (16x16),
#: cnn4, expected batch 64 under Poisson sampling, 5 epochs.
BASE = ("data.name=digits", "model.name=cnn4", "privacy.mechanism=dpsgd-gaussian",
        "privacy.noise_multiplier=1.0", "privacy.target_epsilon=null", "train.batch_size=64",
        "train.epochs=5", "train.steps=null", "seed=0")
#: What a library step adds: TF Privacy's recipe takes shuffled fixed-size batches.
LIBRARY = {"tf": ("recipe=library", "privacy.sampling=shuffle"),
           "torch": ("recipe=library",)}


def config_of(backend: str, step: str, settings: Sequence[str] = ()) -> RunConfig:
    """The resolved configuration of one verify run (``step``: an engine or ``library``)."""
    from compare.api import resolve_config

    extra = LIBRARY[backend] if step == "library" else ()
    raw = apply_overrides({}, [*BASE, *extra, *settings])
    return resolve_config(raw, backend)[0]


def run_verify(backend: str, step: str, settings: Sequence[str] = (),
               perf: dict[str, Any] | None = None) -> Any:
    """The report of ``dpcompare verify`` on one step of one configuration."""
    from compare.verify import verify_config

    config = config_of(backend, step, settings)
    engine = "all" if step == "library" else step
    return verify_config(config, backend, engine=engine, perf=PerfSpec(**(perf or {})))


@cache
def honest_report(backend: str, step: str, settings: tuple[str, ...] = (),
                  perf: tuple[tuple[str, Any], ...] = ()) -> Any:
    """:func:`run_verify` of the honest step, once per process."""
    return run_verify(backend, step, settings, dict(perf))


@cache
def bug_report(bug_name: str, backend: str, step: str) -> Any:
    """:func:`run_verify` with one bug of the catalogue installed, once per process."""
    from tests.verify.bugs import BUGS

    bug = BUGS[bug_name]
    with bug.applied(backend, step):
        return run_verify(backend, step, bug.settings, dict(bug.perf))


def failed_checks(report: Any) -> set[str]:
    """Names of the checks that failed, over every step of a report."""
    return {name for step in report.steps for name in step.failed_checks()}
