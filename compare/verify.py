"""``dpcompare verify`` from Python: load a resolved config's data and backend and run the
framework-neutral check driver (:func:`dpcore.verify.run.verify`); :func:`compare.api.verify`
resolves the config as ``dpcompare train`` does and calls :func:`verify_config`.

The backend is reached only through :func:`dpcore.backend.load_backend`; nothing is trained to
the end and nothing is written.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from dpcore.config import PerfSpec, RunConfig
from dpcore.verify import VerifyReport

#: Values of ``engine``: every engine that applies to the model, or one of them.
ENGINE_CHOICES = ("all", "fast", "reference")


def verify_config(config: RunConfig, backend: str, *,
                  data_dir: str | Path | None = None, engine: str = "all",
                  perf: PerfSpec | None = None, log: Callable[[str], None] | None = None,
                  processes: int | str = 1) -> VerifyReport:
    """Check one configured DP step of ``backend`` (sensitivity, noise, divisor, accounting).

    Args:
        config: the complete configuration (:func:`compare.api.resolve_config` completes a
            partial one with the defaults ``dpcompare train`` uses).
        backend: ``tf`` or ``torch`` (aliases accepted).
        data_dir: the data root (default ``$DPCOMPARE_DATA_DIR``).
        engine: ``all`` (every engine that applies to the model), ``fast`` or ``reference``.
        perf: performance switches the engines are built with.
        log: receives one line as each step's checks start.
        processes: engines checked at the same time, each beyond the first in a process of
            its own (1: one after another; see :func:`dpcore.verify.run.verify`).

    Returns:
        The report; ``report.passed`` is False when some check failed
        (``report.failed()`` names them).

    Raises:
        ConfigError: a bad config or backend, a mechanism without a DP-SGD step, an engine
            that does not apply to the model (before anything is checked).
        DataError: the data set is missing or malformed.
    """
    from dpcore.backend import BACKENDS, load_backend
    from dpcore.errors import ConfigError
    from dpcore.names import check_names, resolve_backend
    from dpcore.pipeline import prepare_dataset
    from dpcore.recipes import check_backend_recipe
    from dpcore.verify.run import verify

    if engine not in ENGINE_CHOICES:
        raise ConfigError(f"engine={engine!r} is not known; valid: {', '.join(ENGINE_CHOICES)}")
    name = resolve_backend(backend, BACKENDS)
    check_names(config)
    check_backend_recipe(config, name)
    dataset = prepare_dataset(config, data_dir)
    return verify(config, dataset, load_backend(name), engine=engine, perf=perf, log=log,
                  processes=processes)
