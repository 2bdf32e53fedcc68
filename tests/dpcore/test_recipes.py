"""Recipes and factor switches: config hash stability, the bad-input rules, the privacy claims,
the step divisor and the data factors. No framework is imported."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from dpcore.config import FactorSpec, RunConfig
from dpcore.data.dataset import Dataset
from dpcore.errors import ConfigError
from dpcore.pipeline import apply_data_factors, factor_initial_weights
from dpcore.recipes import (
    CLAIMED_NOT_PROVED,
    PROVED,
    check_backend_recipe,
    privacy_claim,
    recipe_record,
    step_divisor,
)
from dpcore.weights import init_weights
from tests.committed_hashes import hash_before_noise_key

DP = {"mechanism": "dpsgd-gaussian", "noise_multiplier": 1.0, "delta": 1e-5}
TABLE_I = {"data": {"name": "mnist"}, "model": {"name": "cnn4"}, "privacy": DP,
           "train": {"epochs": 15, "batch_size": 1024, "lr": 0.1}, "seed": 2}


def cfg(**sections: object) -> RunConfig:
    raw: dict = {"privacy": dict(DP), "train": {"epochs": 1, "batch_size": 64}}
    for key, value in sections.items():
        if isinstance(value, dict):
            raw.setdefault(key, {}).update(value)
        else:
            raw[key] = value
    return RunConfig.from_dict(raw)


# -- the config hash of existing configs is unchanged ------------------------------------------
def test_known_hashes_unchanged() -> None:
    """Config hashes of committed runs (computed at 7e4c79d) stay what they were: a stored
    run is found again by its hash."""
    assert RunConfig().config_hash == "5044f4443cf0821c"
    # DP-SGD: under the hash rule before noise keys (tests/committed_hashes.py)
    assert hash_before_noise_key(RunConfig.from_dict(TABLE_I)) == "224f92e3a5fa1700"


def test_default_factors_and_recipe_are_left_out_of_the_hashed_form() -> None:
    explicit = dict(TABLE_I, recipe="harmonised", factors={"normalisation": "expected",
                                                           "microbatch_size": 1, "init": "keras"})
    config = RunConfig.from_dict(explicit)
    assert hash_before_noise_key(config) == "224f92e3a5fa1700"
    assert config.config_hash == RunConfig.from_dict(TABLE_I).config_hash
    assert "factors" not in config.to_dict() and "recipe" not in config.to_dict()


def test_recipe_and_each_factor_change_the_hash_and_round_trip() -> None:
    base = RunConfig.from_dict(TABLE_I)
    variants = ["recipe=library", "factors.normalisation=actual", "factors.init=torch",
                "factors.input_scaling=standardised", "factors.calibration_accountant=pld",
                "factors.eval_split=train", "privacy.sampling=shuffle"]
    hashes = {base.config_hash}
    for override in variants:
        changed = base.with_overrides([override])
        assert RunConfig.from_dict(changed.to_dict()) == changed
        hashes.add(changed.config_hash)
    assert len(hashes) == len(variants) + 1


@pytest.mark.parametrize("override", [
    "recipe=library", "factors.normalisation=actual", "factors.microbatch_size=4",
    "factors.init=torch", "factors.input_scaling=standardised",
    "factors.calibration_accountant=pld", "factors.eval_split=train",
    "privacy.sampling=shuffle",
])
def test_each_switch_changes_exactly_one_field(override: str) -> None:
    base = cfg(privacy={"sampling": "shuffle"}) if "microbatch" in override else cfg()
    changed = base.with_overrides([override])
    a, b = base.to_dict(), changed.to_dict()
    flat_a, flat_b = _flatten(a), _flatten(b)
    diff = {k for k in flat_a.keys() | flat_b.keys() if flat_a.get(k) != flat_b.get(k)}
    assert diff == {override.split("=")[0]}


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and k != "ldp_params":
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


# -- bad input: one-line ConfigError naming the field ------------------------------------------
@pytest.mark.parametrize(("raw", "field"), [
    ({"factors": {"microbatch_size": 4}}, "factors.microbatch_size"),  # Poisson
    ({"factors": {"microbatch_size": 5}, "privacy": {"sampling": "shuffle"}},
     "factors.microbatch_size"),  # does not divide 64
    ({"factors": {"normalisation": "median"}}, "factors.normalisation"),
    ({"factors": {"init": "xavier"}}, "factors.init"),
    ({"factors": {"calibration_accountant": "moments"}}, "factors.calibration_accountant"),
    ({"factors": {"eval_split": "valid"}}, "factors.eval_split"),
    ({"recipe": "stock"}, "recipe"),
    ({"recipe": "library", "factors": {"init": "torch"}}, "factors.init"),
    ({"recipe": "library", "privacy": {"mechanism": "dpsgd-laplace"}}, "privacy.mechanism"),
    ({"recipe": "library", "train": {"optimizer": "adam"}}, "train.optimizer"),
    ({"recipe": "library", "train": {"ema_decay": 0.9}}, "train.ema_decay"),
])
def test_bad_combinations_are_one_line_errors(raw: dict, field: str) -> None:
    with pytest.raises(ConfigError) as err:
        cfg(**raw)
    message = str(err.value)
    assert field in message and "valid" in message and "\n" not in message


def test_backend_rules() -> None:
    lib = cfg(recipe="library")
    with pytest.raises(ConfigError, match=r"privacy.sampling='poisson' cannot run through TF"):
        check_backend_recipe(lib, "tf")
    check_backend_recipe(lib, "torch")
    shuffled = cfg(recipe="library", privacy={"sampling": "shuffle"},
                   factors={"microbatch_size": 4})
    check_backend_recipe(shuffled, "tf")
    with pytest.raises(ConfigError, match="factors.microbatch_size=4 cannot run through Opacus"):
        check_backend_recipe(shuffled, "torch")
    check_backend_recipe(cfg(), "tf")  # the harmonised recipe runs Poisson on TF


# -- "claimed, not proved" ---------------------------------------------------------------------
def test_harmonised_default_is_proved() -> None:
    assert privacy_claim(cfg(), "tf") == {"status": PROVED, "reasons": []}
    assert privacy_claim(cfg(privacy={"mechanism": "none", "noise_multiplier": None}))[
        "status"] == "not private"


@pytest.mark.parametrize(("raw", "needle"), [
    ({"privacy": {"sampling": "shuffle"}}, "accounted as Poisson"),
    ({"privacy": {"sampling": "shuffle"}, "factors": {"microbatch_size": 4}}, "2C"),
    ({"factors": {"normalisation": "actual"}}, "actual"),
    ({"factors": {"normalisation": "microbatches"}}, "microbatch count"),
    ({"factors": {"input_scaling": "standardised"}}, "mean and std"),
    ({"factors": {"eval_split": "train"}}, "training set"),
])
def test_each_listed_case_is_claimed_not_proved(raw: dict, needle: str) -> None:
    claim = privacy_claim(cfg(**raw), "torch")
    assert claim["status"] == CLAIMED_NOT_PROVED
    assert any(needle in reason for reason in claim["reasons"])


def test_actual_normalisation_of_fixed_batches_is_not_a_leak() -> None:
    """With shuffled fixed-size batches the actual size is a public constant: only the
    shuffling reason remains."""
    claim = privacy_claim(cfg(privacy={"sampling": "shuffle"},
                              factors={"normalisation": "actual"}), "torch")
    assert len(claim["reasons"]) == 1 and "accounted as Poisson" in claim["reasons"][0]


def test_library_recipes_claims() -> None:
    tf_lib = cfg(recipe="library", privacy={"sampling": "shuffle"})
    assert privacy_claim(tf_lib, "tf")["status"] == CLAIMED_NOT_PROVED
    torch_lib = cfg(recipe="library")
    assert privacy_claim(torch_lib, "torch") == {"status": PROVED, "reasons": []}
    record = recipe_record(torch_lib, "torch")
    assert record["trainer"] == "PrivacyEngine.make_private"
    assert recipe_record(tf_lib, "tf")["trainer"].endswith("via model.fit")


def test_recipe_record_is_schema_valid() -> None:
    schema = json.loads((Path(__file__).parents[2] / "dpcore" / "schemas" /
                         "run_result.v1.json").read_text())
    sub = schema["properties"]["recipe"]
    jsonschema.validate(recipe_record(cfg(factors={"eval_split": "train"}), "tf"), sub)
    jsonschema.validate(None, sub)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"name": "library", "trainer": "x",
                             "privacy_claim": {"status": "maybe", "reasons": []}}, sub)


# -- the step divisor ---------------------------------------------------------------------------
def test_step_divisor() -> None:
    assert step_divisor("expected", 64, 50) == 64.0
    assert step_divisor("actual", 64, 50) == 50.0
    assert step_divisor("actual", 64, 0) == 1.0
    assert step_divisor("microbatches", 64, 64, 4) == 16.0
    with pytest.raises(ConfigError, match="factors.normalisation"):
        step_divisor("median", 64, 50)


def test_factor_spec_keras_is_the_neutral_init() -> None:
    assert FactorSpec(init="keras") == FactorSpec()


# -- data and weight factors -------------------------------------------------------------------
def _images() -> Dataset:
    rng = np.random.default_rng(0)
    return Dataset(name="toy", task="image",
                   x_train=rng.integers(0, 256, (20, 4, 4, 1), dtype=np.uint8),
                   y_train=np.arange(20) % 2,
                   x_test=rng.integers(0, 256, (6, 4, 4, 1), dtype=np.uint8),
                   y_test=np.arange(6) % 2, class_names=("a", "b"))


def test_standardised_inputs_use_the_training_mean_and_std_only() -> None:
    data = _images()
    out = apply_data_factors(cfg(factors={"input_scaling": "standardised"}), data)
    x = data.x_train.astype(np.float32) / 255
    assert out.x_train.mean() == pytest.approx(0.0, abs=1e-5)
    assert out.x_train.std() == pytest.approx(1.0, abs=1e-4)
    expected_test = (data.x_test.astype(np.float32) / 255 - x.mean()) / x.std()
    np.testing.assert_allclose(out.x_test, expected_test, rtol=1e-4, atol=1e-4)
    assert out.y_train is data.y_train and out.y_test is data.y_test  # only the scaling changed
    assert json.loads(out.extra["input_scaling"])["computed_on"] == "training set"
    again = apply_data_factors(cfg(factors={"input_scaling": "standardised"}), out)
    assert again is out  # idempotent: never standardised twice


def test_train_eval_split_swaps_only_the_evaluated_arrays() -> None:
    data = _images()
    out = apply_data_factors(cfg(factors={"eval_split": "train"}), data)
    assert out.x_test is data.x_train and out.y_test is data.y_train
    assert out.x_train is data.x_train and out.extra["eval_split"] == "train"
    assert apply_data_factors(cfg(), data) is data


def test_torch_init_scheme() -> None:
    shapes = {"dense.kernel": (100, 10), "dense.bias": (10,), "gn.gamma": (4,),
              "gn.beta": (4,), "emb.embeddings": (50, 8)}
    w = init_weights(shapes, 3, scheme="torch")
    bound = 1 / np.sqrt(100)
    assert np.abs(w["dense.kernel"]).max() <= bound and np.abs(w["dense.bias"]).max() <= bound
    assert np.abs(w["dense.kernel"]).max() > 0.9 * bound  # uniform over the whole range
    assert np.abs(w["dense.bias"]).max() > 0  # torch biases are not zero (Keras' are)
    assert (w["gn.gamma"] == 1).all() and (w["gn.beta"] == 0).all()
    assert w["emb.embeddings"].std() == pytest.approx(1.0, rel=0.1)
    again = init_weights(shapes, 3, scheme="torch")
    assert all(np.array_equal(w[k], again[k]) for k in shapes)
    keras = init_weights(shapes, 3)
    assert (keras["dense.bias"] == 0).all()


def test_factor_initial_weights() -> None:
    from dpcore.weights import weight_shapes

    rng = np.random.default_rng(0)
    data = Dataset(name="toy", task="image",
                   x_train=rng.integers(0, 256, (8, 16, 16, 1), dtype=np.uint8),
                   y_train=np.arange(8) % 2,
                   x_test=rng.integers(0, 256, (4, 16, 16, 1), dtype=np.uint8),
                   y_test=np.arange(4) % 2, class_names=("a", "b"))
    assert factor_initial_weights(cfg(), data) is None  # the backend's neutral init
    config = cfg(factors={"init": "torch"}, seed=5)
    w = factor_initial_weights(config, data)
    assert w is not None
    shapes = weight_shapes(config.model, data.input_shape, data.n_classes)
    assert {k: v.shape for k, v in w.items()} == shapes
    assert all(np.array_equal(w[k], v)
               for k, v in init_weights(shapes, 5, scheme="torch").items())


# -- the driver under the factors (a fake engine records what it is handed) ---------------------
class _RecordingEngine:
    def __init__(self) -> None:
        self.calls: list[tuple[list[int], float | None]] = []

    def train_step(self, chunks: list, divisor: float | None = None) -> float:
        self.calls.append(([len(y) for _, y in chunks], divisor))
        return 0.0

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        return np.full((len(x), 2), 0.5, np.float32)

    def predict_outputs(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        proba = self.predict_proba(x)  # logits whose softmax is proba
        return np.log(proba), proba

    def get_weights(self) -> dict[str, np.ndarray]:
        return {"w": np.zeros(1, np.float32)}

    def set_weights(self, weights: dict) -> None:
        pass


def _run(config: RunConfig, physical: int = 6) -> _RecordingEngine:
    from dpcore.config import PerfSpec
    from dpcore.pipeline import privacy_plan
    from dpcore.trainloop import run_training

    data = _images()  # 20 examples
    engine = _RecordingEngine()
    run_training(config, data, PerfSpec(physical_batch_size=physical),
                 privacy_plan(config, len(data.x_train)), engine, progress=False)
    return engine


def test_driver_microbatches_chunks_and_divisor() -> None:
    """k=4, batch 8, N=20: batches 8, 8, 4 per epoch; chunks of 4 (6 rounded down to k); the
    divisor is the microbatch count."""
    config = cfg(privacy={"sampling": "shuffle"}, train={"batch_size": 8, "epochs": 1},
                 factors={"microbatch_size": 4, "normalisation": "microbatches"})
    calls = _run(config).calls
    assert [sum(sizes) for sizes, _ in calls] == [8, 8, 4]
    assert all(size % 4 == 0 for sizes, _ in calls for size in sizes)
    assert [d for _, d in calls] == [2.0, 2.0, 1.0]


def test_driver_drops_the_leftover_of_a_partial_last_batch() -> None:
    config = cfg(privacy={"sampling": "shuffle"}, train={"batch_size": 12, "epochs": 1},
                 factors={"microbatch_size": 3})
    calls = _run(config).calls  # batches of 12 and 8: the 8 keeps 6 (two microbatches of 3)
    assert [sum(sizes) for sizes, _ in calls] == [12, 6]
    assert all(d is None for _, d in calls)  # normalisation expected: the engine's own B


def test_driver_actual_normalisation_passes_the_batch_size() -> None:
    config = cfg(train={"batch_size": 8, "epochs": 1}, factors={"normalisation": "actual"})
    calls = _run(config).calls
    assert [d for _, d in calls] == [float(max(sum(s), 1)) for s, _ in calls]


def test_pld_calibration_needs_less_noise_and_meets_the_target() -> None:
    from dpcore.accounting import dpsgd_event, epsilon_pld
    from dpcore.pipeline import privacy_plan

    base = cfg(privacy={"noise_multiplier": None, "target_epsilon": 3.0},
               train={"batch_size": 64, "epochs": 3})
    rdp_plan = privacy_plan(base, 1437)
    pld_plan = privacy_plan(base.with_overrides(["factors.calibration_accountant=pld"]), 1437)
    assert pld_plan.noise_multiplier < rdp_plan.noise_multiplier
    event = dpsgd_event("dpsgd-gaussian", pld_plan.noise_multiplier,
                        pld_plan.batches.sampling_rate, pld_plan.batches.steps)
    assert epsilon_pld(event, pld_plan.delta) <= 3.0 + 1e-6
    assert pld_plan.epsilon_pld == pytest.approx(3.0, abs=0.01)
