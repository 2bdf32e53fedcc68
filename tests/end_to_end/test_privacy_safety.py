"""Privacy safety: what would make the reported epsilon false is refused with the privacy
reason (PrivacyError, exit 2), and what only weakens it (delta >= 1/N) is warned about.

* BatchNorm in a DP model: :mod:`dpcore.privacy_checks` on torch and Keras models (Opacus's
  own validator agrees), and the runner refuses to store such a DP run as finished;
* a weighted / class-balanced sampler, and dividing by the actual batch size: not options;
  a config naming them is refused with the reason; no config field or CLI option sets them
  (the loss's class weights, ``train.class_weights``, are refused on every private run);
* a delta not below 1/N: a one-line warning in the CLI;
* training past the planned steps (what the accountant charged): the shared loop takes
  exactly ``plan.batches.steps`` steps, whatever N, B, epochs, sampling and chunking.
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpcore.accounting import plan_privacy
from dpcore.config import (
    DataSpec,
    ModelSpec,
    PerfSpec,
    PrivacySpec,
    RunConfig,
    TrainSpec,
    check_delta_below_one_over_n,
    default_delta,
)
from dpcore.data.dataset import Dataset
from dpcore.errors import ConfigError, PrivacyError, PrivacyWarning
from dpcore.privacy_checks import check_dp_layer_types, check_dp_model, layer_type_names
from dpcore.trainloop import run_training, step_mechanism
from tests.end_to_end.helpers import TINY_GRID, assert_one_line_error, run_cli, write_grid

TRAIN = ["train", "--backend", "torch", "--dataset", "digits", "--model", "cnn4",
         "--steps", "1", "--batch-size", "64", "--set", "data.image_size=16", "--quiet"]


# ------------------------------------------------------------------------------ BatchNorm
def test_batchnorm_in_a_torch_model_is_refused() -> None:
    torch = pytest.importorskip("torch")
    from opacus.validators import ModuleValidator

    nn = torch.nn
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(),
                          nn.Sequential(nn.Flatten(), nn.LazyLinear(2), nn.BatchNorm1d(2)))
    with pytest.raises(PrivacyError) as excinfo:
        check_dp_model(model)
    message = str(excinfo.value)
    assert "BatchNorm1d, BatchNorm2d" in message and "2 batch-normalisation" in message
    assert "per-example clipping" in message and "epsilon would be false" in message
    assert "GroupNorm" in message
    assert ModuleValidator.validate(model, strict=False)  # Opacus finds it too

    from torchpipe.models import build_model

    for name in ("cnn4", "resnet18"):  # the zoo: GroupNorm, accepted by both checks
        zoo = build_model(ModelSpec(name=name), (32, 32, 3), 5, seed=0)
        check_dp_model(zoo)
        assert ModuleValidator.validate(zoo, strict=False) == []
        assert "GroupNorm" in layer_type_names(zoo) or name == "cnn4"


def test_batchnorm_in_a_keras_model_is_refused() -> None:
    tf = pytest.importorskip("tensorflow")

    inner = tf.keras.Sequential([tf.keras.layers.BatchNormalization()])
    model = tf.keras.Sequential([tf.keras.Input((8, 8, 1)), tf.keras.layers.Conv2D(4, 3),
                                 inner, tf.keras.layers.Flatten(), tf.keras.layers.Dense(2)])
    assert "BatchNormalization" in layer_type_names(model)  # nested layers are seen
    with pytest.raises(PrivacyError, match="BatchNormalization.*epsilon would be false"):
        check_dp_model(model)

    from tfpipe.models import build_model

    for name in ("cnn4", "resnet18"):
        check_dp_model(build_model(ModelSpec(name=name), (32, 32, 3), 5, seed=0))


@pytest.mark.parametrize("names", [["Conv2d", "SyncBatchNorm"], ["BatchNorm3d"],
                                   ["SyncBatchNormalization"], ["batch_norm"]])
def test_batchnorm_type_names_of_both_frameworks(names: list[str]) -> None:
    with pytest.raises(PrivacyError):
        check_dp_layer_types(names)


def test_layer_type_names_without_a_framework_model() -> None:
    check_dp_layer_types(["Conv2d", "GroupNorm", "LayerNorm", "Linear"])  # fine
    with pytest.raises(TypeError):
        layer_type_names(object())


def test_runner_refuses_a_dp_model_with_batchnorm(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A DP run whose backend builds a model holding BatchNorm is refused by the one assembly
    (dpcore.assembly.train) before its first step, and recorded as failed, never finished."""
    torch = pytest.importorskip("torch")
    import compare.runner as runner
    import compare.training as training
    from compare.grid import expand_grid
    from dpcore import assembly
    from dpcore.results import ResultsStore

    real = training.load_backend

    class AddBatchNorm:
        def __init__(self, module: Any) -> None:
            self.module = module

        def __getattr__(self, name: str) -> Any:
            return getattr(self.module, name)

        def build_model(self, *args: Any, **kwargs: Any) -> Any:
            model = self.module.build_model(*args, **kwargs)
            model.add_module("sneaky_bn", torch.nn.BatchNorm2d(4))
            return model

        def train(self, *args: Any, **kwargs: Any) -> Any:
            return assembly.train(self, *args, **kwargs)  # the assembly over this backend

    monkeypatch.setattr(training, "load_backend", lambda b: AddBatchNorm(real(b)))
    grid = expand_grid({**TINY_GRID, "axes": {"privacy": TINY_GRID["axes"]["privacy"][:1]}})
    outcome = runner.run_grid(grid, tmp_path, progress=False, log=lambda _m: None)
    assert len(outcome.failed) == 1
    (record,) = ResultsStore(tmp_path).list_runs()
    assert record.status == "failed" and "BatchNorm2d" in record.error
    assert "epsilon would be false" in record.error
    assert record.checkpoint is None


# ----------------------------------------------------------- samplers and normalisation
@pytest.mark.parametrize("value", ["weighted", "class_balanced", "Class-Balanced",
                                   "oversampling", "importance"])
def test_weighted_or_balanced_sampling_is_refused_with_the_reason(value: str) -> None:
    with pytest.raises(PrivacyError) as excinfo:
        RunConfig().with_overrides([f"privacy.sampling={value}"])
    assert isinstance(excinfo.value, ConfigError)  # also a config error (exit 2 either way)
    message = str(excinfo.value)
    assert f"privacy.sampling={value!r} is refused" in message
    assert "sampling rate q = B/N" in message and "epsilon would be false" in message
    assert "valid: poisson, shuffle" in message


@pytest.mark.parametrize(("key", "reason"), [
    ("privacy.sampler=weighted", "sampling rate q = B/N"),
    ("train.sample_weights=[1, 2]", "sampling rate q = B/N"),
    ("train.balanced_sampling=true", "sampling rate q = B/N"),
    ("privacy.normalization=actual", "expected batch size B = qN"),
    ("train.normalize_by=actual_batch_size", "expected batch size B = qN"),
    ("privacy.divide_by_actual_batch=true", "expected batch size B = qN"),
    ("model.batch_norm=true", "BatchNorm"),
    ("normalization=actual", "expected batch size B = qN"),
])
def test_privacy_defeating_keys_are_refused_with_the_reason(key: str, reason: str) -> None:
    with pytest.raises(PrivacyError) as excinfo:
        RunConfig().with_overrides([key])
    assert "is refused" in str(excinfo.value) and reason in str(excinfo.value)


#: Fields whose names the check below flags but that set no sampler and no divisor, each with
#: a value that changes the run; every mechanism that promises privacy must refuse that value
#: with the privacy reason (checked by the same test), so none of them can reach a private run.
NON_PRIVATE_ONLY_FIELDS = {(TrainSpec, "class_weights"): ("train", "balanced")}


def test_no_config_field_or_cli_option_sets_a_sampler_or_the_normalisation() -> None:
    """The only sampling knob is poisson|shuffle; the divisor of the noised sum is not
    configurable at all (it is always the expected batch size, see the backend contract tests
    ``tests/backends/test_train_contract.py``: actual batch 20, divisor 32). A field listed in
    :data:`NON_PRIVATE_ONLY_FIELDS` (the loss's class weights: no sampler, no divisor) is
    refused by every private mechanism."""
    from dpcore.mechanisms import is_non_private, mechanism_names

    suspicious = re.compile(r"normali[sz]|weight|sampler|balanc|divi|actual", re.IGNORECASE)
    for spec in (DataSpec, ModelSpec, PrivacySpec, TrainSpec, PerfSpec, RunConfig):
        names = [f.name for f in dataclasses.fields(spec)
                 if (spec, f.name) not in NON_PRIVATE_ONLY_FIELDS]
        assert not [n for n in names if suspicious.search(n)], spec
    private = [m for m in mechanism_names() if not is_non_private(m)]
    assert "dpsgd-gaussian" in private and "ldp" in private
    for (_, field), (section, value) in NON_PRIVATE_ONLY_FIELDS.items():
        for mechanism in private:
            raw: dict[str, Any] = {"data": {"name": "digits"}, "privacy": {"mechanism": mechanism},
                                   section: {field: value}}
            if mechanism == "ldp":
                raw["data"].update(ldp_mechanism="laplace", ldp_params={"scale": 1.0})
            else:
                raw["privacy"]["noise_multiplier"] = 1.0
            with pytest.raises(PrivacyError, match=f"{section}.{field}={value!r}"):
                RunConfig.from_dict(raw)
    from compare.cli.main import build_parser

    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command")
    for name, sub in subparsers.choices.items():
        options = [o for a in sub._actions for o in a.option_strings]
        assert not [o for o in options if suspicious.search(o)], (name, options)


@given(n=st.integers(2, 100_000), frac=st.floats(0.0001, 1.0), steps=st.integers(1, 50),
       sampling=st.sampled_from(["poisson", "shuffle"]),
       mechanism=st.sampled_from(["dpsgd-gaussian", "dpsgd-laplace", "none"]))
@settings(max_examples=40, deadline=None)
def test_the_divisor_is_always_the_planned_expected_batch_size(
    n: int, frac: float, steps: int, sampling: str, mechanism: str
) -> None:
    batch = max(1, min(n, round(frac * n)))
    config = RunConfig(
        privacy=PrivacySpec(mechanism=mechanism, sampling=sampling,
                            noise_multiplier=None if mechanism == "none" else 1.0),
        train=TrainSpec(epochs=None, steps=steps, batch_size=batch))
    plan = dataclasses.replace(plan_privacy(config.replace(privacy=PrivacySpec()), n),
                               mechanism=mechanism, noise_multiplier=1.0)
    mech = step_mechanism(config, plan)
    assert mech.expected_batch_size == plan.batches.expected_batch_size == batch
    assert plan.batches.sampling_rate == pytest.approx(batch / n)


# ------------------------------------------------------------------------------- delta
def test_delta_not_below_one_over_n_warns_with_the_reason() -> None:
    with pytest.warns(PrivacyWarning, match=r"privacy.delta=0.02 is not below 1/N = 1/50"):
        assert PrivacySpec(delta=0.02).resolved_delta(50) == 0.02
    with pytest.warns(PrivacyWarning, match="releasing one random example in the clear"):
        check_delta_below_one_over_n(0.01, 100)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyWarning)
        assert PrivacySpec(delta=1e-3).resolved_delta(50) == 1e-3  # 1e-3 < 1/50: silent
        for n in (1, 9, 10, 11, 999, 1000, 60_000):  # the default is always below 1/N
            assert PrivacySpec().resolved_delta(n) == default_delta(n) < 1.0 / n


def test_delta_warning_is_one_line_in_the_cli(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "epsilon", "--n", "100", "--batch-size", "10", "--steps",
                             "10", "--noise-multiplier", "1", "--delta", "0.05", "--no-library")
    assert code == 0 and "epsilon" in out
    warning_lines = [line for line in err.splitlines() if "warning" in line]
    assert warning_lines == [
        line for line in warning_lines
        if line.startswith("dpcompare epsilon: warning: --delta=0.05 is not below 1/N = 1/100")
    ] and len(warning_lines) == 1

    code, out, err = run_cli(capsys, *TRAIN, "--noise-multiplier", "1", "--delta", "0.01",
                             "--out", tmp_path / "out")
    assert code == 0, err
    warning_lines = [line for line in err.splitlines() if "warning" in line]
    assert len(warning_lines) == 1, err  # one line, once, though delta is resolved repeatedly
    assert warning_lines[0].startswith(
        "dpcompare train: warning: privacy.delta=0.01 is not below 1/N = 1/1437")


def test_refused_sampler_through_the_cli(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, *TRAIN, "--set", "privacy.sampling=class_balanced",
                           "--out", tmp_path / "out")
    assert_one_line_error(code, err, "privacy.sampling='class_balanced' is refused",
                          "epsilon would be false", "valid: poisson, shuffle")
    grid = write_grid(tmp_path / "g.yaml", {
        **TINY_GRID, "base": {**TINY_GRID["base"], "privacy": {"normalize_by": "actual"}}})
    code, _, err = run_cli(capsys, "compare", "--config", grid, "--out", tmp_path / "out2")
    assert_one_line_error(code, err, "privacy.normalize_by is refused", "expected batch size")
    assert not (tmp_path / "out").exists() and not (tmp_path / "out2").exists()


# ----------------------------------------------------------------------- planned steps
class CountingEngine:
    """A StepEngine that counts steps and examples (a linear softmax of fixed weights)."""

    def __init__(self, n_classes: int) -> None:
        self.n_classes = n_classes
        self.steps = 0
        self.examples = 0
        self.w = {"bias": np.zeros(n_classes, np.float32)}

    def train_step(self, chunks: list[tuple[np.ndarray, np.ndarray]]) -> float:
        self.steps += 1
        self.examples += sum(len(y) for _, y in chunks)
        self.w["bias"] = self.w["bias"] + 0.01
        return float(sum(len(y) for _, y in chunks)) * math.log(self.n_classes)

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        return np.full((len(x), self.n_classes), 1.0 / self.n_classes, np.float32)

    def predict_outputs(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        proba = self.predict_proba(x)  # logits whose softmax is proba
        return np.log(proba), proba

    def get_weights(self) -> dict[str, np.ndarray]:
        return {k: v.copy() for k, v in self.w.items()}

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        self.w = {k: np.array(v) for k, v in weights.items()}


def tiny_dataset(n: int) -> Dataset:
    rng = np.random.default_rng(n)
    return Dataset("tiny", "image", rng.integers(0, 256, (n, 2, 2, 1), dtype=np.uint8),
                   np.arange(n) % 3, np.zeros((3, 2, 2, 1), np.uint8), np.arange(3),
                   ("a", "b", "c"))


@given(n=st.integers(1, 300), frac=st.floats(0.001, 1.0),
       length=st.one_of(st.integers(1, 40).map(lambda s: ("steps", s)),
                        st.floats(0.01, 4.0).map(lambda e: ("epochs", e))),
       sampling=st.sampled_from(["poisson", "shuffle"]), chunk=st.sampled_from([None, 1, 7]),
       ema=st.sampled_from([None, 0.9]))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_training_never_exceeds_the_planned_steps(
    n: int, frac: float, length: tuple[str, float], sampling: str, chunk: int | None,
    ema: float | None,
) -> None:
    batch = max(1, min(n, round(frac * n)))
    kind, value = length
    train = (TrainSpec(epochs=None, steps=int(value), batch_size=batch, ema_decay=ema)
             if kind == "steps" else TrainSpec(epochs=value, batch_size=batch, ema_decay=ema))
    config = RunConfig(privacy=PrivacySpec(sampling=sampling), train=train)
    plan = plan_privacy(config, n)
    engine = CountingEngine(3)
    outcome = run_training(config, tiny_dataset(n), PerfSpec(physical_batch_size=chunk), plan,
                           engine, progress=False, callbacks=[lambda _r: False])
    assert engine.steps == outcome.steps_completed == plan.batches.steps
    assert outcome.history[-1]["step"] == plan.batches.steps
    assert sum(r["examples"] for r in outcome.history) == engine.examples


def test_dp_run_is_charged_for_exactly_the_steps_it_takes() -> None:
    """The epsilon recorded after the last epoch is the plan's (the accountant's charge)."""
    n, batch = 200, 20
    config = RunConfig(privacy=PrivacySpec(mechanism="dpsgd-gaussian", noise_multiplier=1.0),
                       train=TrainSpec(epochs=2.5, batch_size=batch))
    plan = plan_privacy(config, n)
    engine = CountingEngine(3)
    outcome = run_training(config, tiny_dataset(n), PerfSpec(), plan, engine, progress=False)
    assert engine.steps == plan.batches.steps == 25
    assert plan.event.count == plan.batches.steps  # SelfComposedDpEvent(PoissonSampled, T)
    assert outcome.history[-1]["epsilon_spent"] == pytest.approx(plan.epsilon_rdp)
