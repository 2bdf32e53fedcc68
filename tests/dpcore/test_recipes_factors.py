"""Every factor as the step ran it (``dpcore.recipes.effective_factors``), the divisor rule,
and their place in the RunResult's recipe record."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from dpcore.config import RunConfig
from dpcore.errors import ConfigError
from dpcore.recipes import FACTOR_NAMES, divisor_rule, effective_factors, recipe_record


@pytest.mark.parametrize("sampling, normalisation, k, expected", [
    ("poisson", "expected", 1, "B"),
    ("shuffle", "expected", 1, "B"),
    ("shuffle", "actual", 1, "B"),          # a fixed-size batch's actual size is B
    ("poisson", "actual", 1, "actual batch size"),
    ("shuffle", "microbatches", 1, "B"),     # TF Privacy's per-example default
    ("shuffle", "microbatches", 32, "B/k"),
    ("poisson", "microbatches", 4, "actual microbatch count"),
])
def test_divisor_rule(sampling: str, normalisation: str, k: int, expected: str) -> None:
    assert divisor_rule(sampling, normalisation, k) == expected


def test_divisor_rule_unknown() -> None:
    with pytest.raises(ConfigError, match="factors.normalisation='median' is not known; valid"):
        divisor_rule("poisson", "median", 2)


def test_library_recipes_take_their_own_factors() -> None:
    tf = effective_factors("library", "tf", "shuffle", {})
    torch = effective_factors("library", "torch", "poisson", {})
    assert tf == {"sampling": "shuffle", "divisor": "B", "microbatch_size": 1, "init": "neutral",
                  "input_scaling": "unit", "calibration_accountant": None, "eval_split": "test"}
    assert {k: v for k, v in torch.items() if tf[k] != v} == {"sampling": "poisson",
                                                              "init": "torch"}
    assert list(tf) == list(FACTOR_NAMES)
    # the library ignores what the harmonised factors would set, except the measured split
    assert effective_factors("library", "torch", "poisson", {"eval_split": "train"})[
        "eval_split"] == "train"


def test_harmonised_takes_the_config() -> None:
    got = effective_factors("harmonised", "tf", "poisson",
                            {"init": "keras", "normalisation": "actual"})
    assert got["init"] == "neutral" and got["divisor"] == "actual batch size"
    with pytest.raises(ConfigError, match="factor 'speed' is not known; valid: normalisation"):
        effective_factors("harmonised", "tf", "poisson", {"speed": 2})


def test_recipe_record_has_the_effective_factors() -> None:
    config = RunConfig.from_dict({
        "data": {"name": "mnist"}, "model": {"name": "cnn4"},
        "privacy": {"mechanism": "dpsgd-gaussian", "noise_multiplier": 1.0,
                    "sampling": "shuffle"},
        "train": {"epochs": 1, "batch_size": 64},
        "factors": {"microbatch_size": 32, "normalisation": "microbatches"}})
    record = recipe_record(config, "tf")
    assert record["effective_factors"]["divisor"] == "B/k"
    assert record["effective_factors"]["microbatch_size"] == 32
    schema = json.loads((Path(__file__).parents[2] / "dpcore" / "schemas" /
                         "run_result.v1.json").read_text())
    jsonschema.validate(record, schema["properties"]["recipe"])
