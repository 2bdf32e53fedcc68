"""The tuned defaults of ``dpcompare train`` (dpcore.defaults): filled in only where the user
gave nothing, never changing the config dataclasses, so stored runs and presets keep their
config hashes."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest

from dpcore.config import RunConfig
from dpcore.defaults import TRAIN_DEFAULTS, apply_train_defaults
from tests.committed_hashes import hash_before_noise_key

REPO = Path(__file__).resolve().parents[2]


def filled(raw: dict[str, Any]) -> RunConfig:
    return RunConfig.from_dict(apply_train_defaults(raw))


def test_an_empty_config_gets_every_default() -> None:
    config = filled({"data": {"name": "digits"}})
    assert config.model.activation == TRAIN_DEFAULTS["model.activation"]
    assert config.train.lr == TRAIN_DEFAULTS["train.lr"]
    assert config.train.momentum == TRAIN_DEFAULTS["train.momentum"]
    assert config.train.batch_size == TRAIN_DEFAULTS["train.batch_size"]
    assert config.train.epochs == TRAIN_DEFAULTS["train.epochs"] and config.train.steps is None
    assert config.data.name == "digits" and config.data.image_size == 16  # 8x8 is too small


def test_the_digits_size_is_applied_to_digits_only_and_never_over_a_given_size() -> None:
    """cnn4 needs at least 13x13: `dpcompare train --dataset digits` failed on the 8x8 images
    with no option given."""
    assert filled({"data": {"name": "digits", "image_size": 8}}).data.image_size == 8
    assert filled({"data": {"name": "digits", "image_size": None}}).data.image_size is None
    assert filled({"data": {"name": "mnist5k"}}).data.image_size is None
    assert filled({}).data.image_size is None


def test_the_defaults_differ_from_the_historical_dataclass_defaults() -> None:
    """Otherwise there is nothing to apply (and the test above would prove nothing)."""
    old = RunConfig()
    assert TRAIN_DEFAULTS["model.activation"] != old.model.activation
    assert (TRAIN_DEFAULTS["train.lr"], TRAIN_DEFAULTS["train.momentum"]) != (
        old.train.lr, old.train.momentum)
    assert TRAIN_DEFAULTS["train.epochs"] != old.train.epochs


def test_a_given_key_is_kept_even_at_the_dataclass_default() -> None:
    raw = {"model": {"activation": "relu"}, "train": {"lr": 0.1, "momentum": 0.0,
                                                      "batch_size": 256, "epochs": 1.0}}
    config = filled(raw)
    assert config.model.activation == "relu" and config.train.lr == 0.1
    assert config.train.momentum == 0.0 and config.train.batch_size == 256
    assert config.train.epochs == 1.0
    assert raw == {"model": {"activation": "relu"}, "train": {
        "lr": 0.1, "momentum": 0.0, "batch_size": 256, "epochs": 1.0}}  # not modified


def test_steps_given_means_no_default_epochs() -> None:
    config = filled({"train": {"steps": 7}})
    assert config.train.steps == 7 and config.train.epochs is None
    config = filled({"train": {"steps": 7, "epochs": None}})
    assert config.train.steps == 7 and config.train.epochs is None


def test_adam_gets_no_sgd_step_size() -> None:
    config = filled({"train": {"optimizer": "adam"}})
    assert config.train.lr == RunConfig().train.lr and config.train.momentum == 0.0
    assert config.model.activation == TRAIN_DEFAULTS["model.activation"]


def test_a_complete_config_is_untouched() -> None:
    """A stored run's config (every key present) hashes as before: nothing is filled in."""
    for config in (RunConfig(), RunConfig.from_dict({"data": {"name": "digits"},
                                                      "train": {"steps": 3, "epochs": None}})):
        assert filled(config.to_dict()).config_hash == config.config_hash
    assert RunConfig().config_hash == "5044f4443cf0821c"  # the dataclass defaults are unchanged


def test_a_null_section_is_filled() -> None:
    assert filled({"train": None}).train.lr == TRAIN_DEFAULTS["train.lr"]


def _committed_hashes(report: str) -> set[str]:
    with (REPO / "reports" / report / "runs.csv").open(encoding="utf-8") as handle:
        return {row["config_hash"] for row in csv.DictReader(handle)}


@pytest.mark.parametrize("preset", ["demo", "pneumonia-tuned"])
def test_presets_hash_as_their_committed_runs(preset: str) -> None:
    """The presets do not pass through the defaults: expanding one gives exactly the config
    hashes of the runs committed in its report, under the hash rule they were committed by
    (records with a noise-key version: today's; before noise keys: tests/committed_hashes.py)."""
    from compare.api import load_grid
    from compare.records import read_records

    committed = _committed_hashes(preset)
    with (REPO / "reports" / preset / "runs.csv").open(encoding="utf-8") as handle:
        seeds = len({row["seed"] for row in csv.DictReader(handle)})
    grid = load_grid(preset, seeds=seeds)
    keyed = any("noise_key_version" in (r.privacy or {})
                for r in read_records(REPO / "reports" / preset).results)
    rule = (lambda config: config.config_hash) if keyed else hash_before_noise_key
    assert {rule(cell.config) for cell in grid.cells} == committed
