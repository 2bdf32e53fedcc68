"""Executors run a grid's unfinished runs: ``local`` (in this process, the default) or ``ray``
(one Ray task per run, on a local Ray or a cluster). A run's result never depends on the
executor: both call :func:`compare.cellrun.run_one` and write to the same results store.

Importing this package never imports Ray (only preparing a ``ray`` executor does).
"""

from __future__ import annotations

from compare.executors.base import Executor, GridJob, RunTracker
from compare.executors.local import LocalExecutor
from dpcore.claims import ClaimPolicy
from dpcore.errors import ConfigError

EXECUTORS = ("local", "ray")


def make_executor(name: str, *, ray_address: str | None = None,
                  cpus_per_run: float | None = None, gpus_per_run: float | None = None,
                  max_concurrent: int | None = None,
                  claims: ClaimPolicy | None = None) -> Executor:
    """The executor called ``name``; the Ray options are refused for ``local``.

    ``claims``: how runs are claimed in the store (default :class:`ClaimPolicy`), the same
    for both executors.

    Raises:
        ConfigError: an unknown name, a Ray option given with ``local``, or a bad value.
    """
    ray_options = {"--ray-address": ray_address, "--cpus-per-run": cpus_per_run,
                   "--gpus-per-run": gpus_per_run, "--max-concurrent": max_concurrent}
    if name == "local":
        given = [flag for flag, value in ray_options.items() if value is not None]
        if given:
            raise ConfigError(f"{', '.join(given)} only apply to --executor ray "
                              "(the local executor runs one run at a time in this process)")
        return LocalExecutor(claims)
    if name == "ray":
        from compare.executors.ray_executor import RayExecutor, RayOptions

        return RayExecutor(RayOptions(
            address=ray_address,
            cpus_per_run=1.0 if cpus_per_run is None else cpus_per_run,
            gpus_per_run=0.0 if gpus_per_run is None else gpus_per_run,
            max_concurrent=max_concurrent,
        ), claims=claims)
    raise ConfigError(f"--executor={name!r} is not known; valid: {', '.join(EXECUTORS)}")


__all__ = ["EXECUTORS", "Executor", "GridJob", "LocalExecutor", "RunTracker", "make_executor"]
