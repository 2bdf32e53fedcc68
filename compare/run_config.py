"""A run's config from what a user gives (:func:`as_config`, :func:`resolve_config`), and
the backend name checked (:func:`check_backend`): the one reading of ``config`` arguments of
:mod:`compare.api` (``train``, ``load_data``) and ``dpcompare train``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dpcore.backend import BACKENDS
from dpcore.config import RunConfig, load_mapping_file
from dpcore.defaults import fill_defaults
from dpcore.errors import ConfigError, DataError
from dpcore.names import resolve_backend
from dpcore.results import RESULT_FILE, RunResult, read_result


def read_run(run_dir: Path) -> RunResult:
    """The RunResult stored in the run folder ``run_dir``.

    Raises:
        DataError: no readable record there (the expected file is named).
    """
    result = read_result(run_dir / RESULT_FILE)
    if result is None:
        raise DataError(f"{run_dir} holds no readable run record (expected "
                        f"{run_dir / RESULT_FILE})")
    return result


def as_config(config: RunConfig | Mapping[str, Any] | str | Path) -> RunConfig:
    """A :class:`RunConfig` from itself, a (partial) config mapping, a YAML/JSON config file,
    or a run folder (its ``result.json``'s config).

    Raises:
        ConfigError: unknown keys, bad values, a missing or unreadable file.
    """
    if isinstance(config, RunConfig):
        return config
    if isinstance(config, Mapping):
        return RunConfig.from_dict(config)
    if isinstance(config, str | Path):
        path = Path(config)
        if path.is_dir():
            return RunConfig.from_dict(read_run(path).config)
        return RunConfig.from_file(path)
    raise ConfigError(f"config of type {type(config).__name__} is not valid; valid: a "
                      "RunConfig, a mapping, or the path of a YAML/JSON config file")


def resolve_config(config: RunConfig | Mapping[str, Any] | str | Path,
                   backend: str | None = None) -> tuple[RunConfig, dict[str, Any]]:
    """:func:`as_config`, with the bench's defaults (:func:`dpcore.defaults.fill_defaults`:
    tanh, SGD step size and momentum, batch, epochs, digits at 16x16, and under ``recipe:
    library`` the sampling of ``backend``'s library) filled in where a partial mapping or
    config file gives no value; returns the config and ``{dotted key: value}`` of what was
    filled. A :class:`RunConfig` or a run folder is complete: used as it is, nothing filled."""
    if isinstance(config, Mapping) or (
            isinstance(config, str | Path) and not Path(config).is_dir()):
        raw = config if isinstance(config, Mapping) else load_mapping_file(config)
        completed, filled = fill_defaults(raw, backend)
        return RunConfig.from_dict(completed), filled
    return as_config(config), {}


def with_train_defaults(config: RunConfig | Mapping[str, Any] | str | Path,
                        backend: str | None = None) -> RunConfig:
    """The config of :func:`resolve_config` (without the record of what was filled)."""
    return resolve_config(config, backend)[0]


def check_backend(backend: str) -> str:
    """The backend ``backend`` names (aliases such as ``opacus`` or ``tensorflow`` accepted:
    :func:`dpcore.names.resolve_backend`), else ConfigError."""
    return resolve_backend(backend, BACKENDS)


__all__ = ["as_config", "check_backend", "read_run", "resolve_config", "with_train_defaults"]
