"""A number written as an int or as a float is one setting: ``lr: 1`` and ``lr: 1.0`` (YAML,
``--set``) give one config and one config hash, so a run is stored and found once. The
canonical types are those every stored run already has (real-valued fields as floats), so no
stored hash changes. ``train.epochs`` keeps the type it is given: the default (1.0) and the
presets' runs (``epochs: 20``) already hash with both types."""

from __future__ import annotations

import pytest

from dpcore.config import RunConfig


@pytest.mark.parametrize(("as_int", "as_float"), [
    ({"train": {"lr": 1}}, {"train": {"lr": 1.0}}),
    ({"train": {"momentum": 0}}, {"train": {"momentum": 0.0}}),
    ({"train": {"ema_decay": 0}}, {"train": {"ema_decay": 0.0}}),
    ({"privacy": {"max_grad_norm": 1}}, {"privacy": {"max_grad_norm": 1.0}}),
    ({"privacy": {"mechanism": "dpsgd-gaussian", "target_epsilon": 3}},
     {"privacy": {"mechanism": "dpsgd-gaussian", "target_epsilon": 3.0}}),
    ({"privacy": {"mechanism": "dpsgd-gaussian", "noise_multiplier": 1,
                  "target_epsilon": None}},
     {"privacy": {"mechanism": "dpsgd-gaussian", "noise_multiplier": 1.0,
                  "target_epsilon": None}}),
    ({"model": {"width": 2}}, {"model": {"width": 2.0}}),
    ({"data": {"ldp_mechanism": "laplace", "ldp_params": {"scale": 1}},
      "privacy": {"mechanism": "ldp", "target_epsilon": None}},
     {"data": {"ldp_mechanism": "laplace", "ldp_params": {"scale": 1.0}},
      "privacy": {"mechanism": "ldp", "target_epsilon": None}}),
])
def test_an_int_and_the_equal_float_are_one_config(as_int: dict, as_float: dict) -> None:
    a, b = RunConfig.from_dict(as_int), RunConfig.from_dict(as_float)
    assert a == b
    assert a.config_hash == b.config_hash


def test_the_canonical_types_are_those_of_the_stored_runs() -> None:
    config = RunConfig.from_dict({"train": {"lr": 1, "momentum": 0},
                                  "privacy": {"max_grad_norm": 1}})
    assert isinstance(config.train.lr, float) and isinstance(config.train.momentum, float)
    assert isinstance(config.privacy.max_grad_norm, float)
    # the pinned hashes of the defaults and of Table I (tests/dpcore/test_recipes.py) hold
    assert RunConfig().config_hash == "5044f4443cf0821c"
