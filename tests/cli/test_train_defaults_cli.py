"""``dpcompare train`` and ``api.train`` take the tuned defaults (dpcore.defaults) for the
hyper-parameters the user does not give, from options, a config file or a mapping alike."""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from compare.api import with_train_defaults
from compare.cli.main import build_parser
from compare.cli.train import build_config
from dpcore.config import RunConfig
from dpcore.defaults import TRAIN_DEFAULTS


def parse(*args: str) -> argparse.Namespace:
    return build_parser().parse_args(["train", "--backend", "torch", *args])


def test_no_hyper_parameter_gives_the_tuned_defaults() -> None:
    config = build_config(parse("--dataset", "digits", "--epsilon", "8"))
    assert config.model.activation == TRAIN_DEFAULTS["model.activation"]
    assert config.train.lr == TRAIN_DEFAULTS["train.lr"]
    assert config.train.momentum == TRAIN_DEFAULTS["train.momentum"]
    assert config.train.batch_size == TRAIN_DEFAULTS["train.batch_size"]
    assert config.train.epochs == TRAIN_DEFAULTS["train.epochs"]
    assert config.privacy.mechanism == "dpsgd-gaussian" and config.privacy.target_epsilon == 8


def test_options_file_and_set_win_over_the_defaults(tmp_path: Path) -> None:
    config = build_config(parse("--lr", "0.1", "--batch-size", "256", "--steps", "5",
                                "--set", "model.activation=relu", "--set", "train.momentum=0"))
    assert (config.train.lr, config.train.batch_size, config.train.steps) == (0.1, 256, 5)
    assert config.train.epochs is None and config.model.activation == "relu"
    assert config.train.momentum == 0.0
    path = tmp_path / "run.yaml"
    path.write_text("model: {activation: relu}\ntrain: {lr: 0.1}\n")
    from_file = build_config(parse("--config", str(path)))
    assert from_file.model.activation == "relu" and from_file.train.lr == 0.1
    assert from_file.train.batch_size == TRAIN_DEFAULTS["train.batch_size"]  # not in the file


def test_a_complete_config_file_keeps_its_hash(tmp_path: Path) -> None:
    """A config written out in full (as a stored run's) trains exactly as before."""
    config = RunConfig.from_dict({"data": {"name": "digits", "image_size": 16},
                                  "privacy": {"mechanism": "dpsgd-gaussian",
                                              "target_epsilon": 8.0}})
    path = tmp_path / "full.yaml"
    path.write_text(yaml.safe_dump(config.to_dict()))
    assert build_config(parse("--config", str(path))).config_hash == config.config_hash
    assert with_train_defaults(path).config_hash == config.config_hash
    assert with_train_defaults(config) is config


def test_api_and_cli_fill_the_same_defaults(tmp_path: Path) -> None:
    partial = {"data": {"name": "digits"}, "privacy": {"mechanism": "dpsgd-gaussian",
                                                       "target_epsilon": 8.0}}
    cli = build_config(parse("--dataset", "digits", "--epsilon", "8"))
    assert with_train_defaults(partial).config_hash == cli.config_hash
    path = tmp_path / "partial.yaml"
    path.write_text(yaml.safe_dump(partial))
    assert with_train_defaults(path).config_hash == cli.config_hash
