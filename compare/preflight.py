"""Every check of a grid's runs before the first one trains (:func:`check_grid`).

Each run still to do is checked before any trains, so that a model too large for its images or
a target epsilon no noise reaches is found before other runs have spent their time: its data
set and model names, what its backend's library recipe can run, that the model fits the
data's shape, and that its privacy plan exists. Every problem is reported at once, in
one line, and nothing is trained or written.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compare.grid import GridCell
from dpcore.config import LDP_TEST_INPUTS, PrivacySpec, RunConfig
from dpcore.errors import ConfigError, DpCompareError

if TYPE_CHECKING:
    from dpcore.data.dataset import Dataset


def check_run(config: RunConfig, dataset: Dataset) -> Any:
    """Every check of one run that needs its data, before any training: the model fits the
    data's shape (:func:`dpcore.architectures.architecture`, framework-free) and the privacy
    plan is possible (calibration, noise floor). Returns the run's
    :class:`~dpcore.accounting.PrivacyPlan`.

    Raises:
        ConfigError: an image too small for the model, a target epsilon no noise reaches...
    """
    from compare.calibrators import load_config_calibrator
    from dpcore.architectures import architecture
    from dpcore.pipeline import privacy_plan

    load_config_calibrator(config)  # e.g. Opacus's prv: registered by the torch backend
    architecture(config.model, dataset.input_shape, dataset.n_classes,
                 dataset.vocabulary_size)
    return privacy_plan(config, len(dataset.x_train))


__all__ = ["check_grid", "check_run"]


def _data_only(config: RunConfig) -> RunConfig:
    """``config`` without its local-DP step: the data set's shape and size, loaded once per
    data spec (privatising it per seed is the run's work, not the check's)."""
    if config.data.ldp_mechanism is None:
        return config
    return config.replace(
        data=dataclasses.replace(config.data, ldp_mechanism=None, ldp_params={},
                                 ldp_test_inputs=LDP_TEST_INPUTS[0]),
        privacy=PrivacySpec())


def check_grid(runs: Sequence[tuple[GridCell, str]], data_dir: str | Path | None) -> int:
    """Check every run of ``runs`` as ``dpcompare train`` checks one before training
    (:func:`check_run`); returns how many were checked.

    Data sets are loaded once per data spec, models traced once per (model, data), privacy
    plans computed once per (privacy, schedule, data size).

    Raises:
        DpCompareError: one line naming every failing setting (first occurrence of each
            message) and its run; nothing is trained or written.
    """
    from dpcore.names import check_names
    from dpcore.pipeline import prepare_dataset
    from dpcore.recipes import check_backend_recipe

    problems: dict[str, str] = {}
    datasets: dict[str, Any] = {}
    seen: set[str] = set()
    for cell, backend in runs:
        config = cell.config
        where = f"{backend} {cell.setting or config.config_hash}"
        try:
            check_names(config)
            check_backend_recipe(config, backend)
            loadable = _data_only(config)
            data_key = repr(loadable.data)
            if data_key not in datasets:
                datasets[data_key] = prepare_dataset(loadable, data_dir)
            dataset = datasets[data_key]
            key = repr((config.model, config.privacy, config.train, config.factors,
                        config.data, config.recipe))
            if key not in seen:
                check_run(config, dataset)
                seen.add(key)
        except DpCompareError as exc:
            problems.setdefault(str(exc), where)
    if problems:
        listed = "; ".join(f"{where}: {message}" for message, where in problems.items())
        raise ConfigError(
            f"{len(problems)} problem(s) found before any training (nothing was trained): "
            f"{listed}")
    return len(runs)
