"""Audit canaries, faults and their config rules (dpcore.audit, dpcore.config)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from dpcore.architectures import architecture
from dpcore.audit.canaries import (
    CANARY_NORM_MULTIPLE,
    GradientCanaries,
    InputCanaries,
    canary_seed,
)
from dpcore.audit.canary_records import (
    CanaryRecords,
    canary_record,
    clipped_sum,
    with_canaries,
)
from dpcore.audit.faults import NO_CLIP_NORM, apply_fault
from dpcore.audit.plan import check_audit_inputs
from dpcore.config import AuditCanarySpec, ModelSpec, RunConfig
from dpcore.data.dataset import Dataset
from dpcore.errors import ConfigError
from dpcore.sampling import BatchPlan, shuffled_batches
from dpcore.trainloop import StepMechanism

ARCH = architecture(ModelSpec(name="custom", layers=[
    {"type": "Flatten", "name": "flat"}, {"type": "Dense", "name": "a", "units": 4},
    {"type": "Dense", "name": "b"}]), (1, 1, 3), 5)
SHAPES = ARCH.weight_shapes()  # a.kernel (3, 4), a.bias (4,), b.kernel (4, 5), b.bias (5,)
TOTAL = 41
HONEST = StepMechanism("l2", 2.0, "gaussian", 2.0, 1.0, 10)


def canaries(count: int = 10, q: float = 1.0, seed: int = 3, kind: str = "l2",
             sampling: str = "poisson", n: int = 1000, batch: int | None = None
             ) -> GradientCanaries:
    """Canaries of a run of N = ``n`` examples at rate ``q`` (Poisson) or in shuffled batches
    of ``batch`` (default q N), clip norm 2 in ``kind``."""
    size = batch if batch is not None else max(1, round(q * n))
    plan = BatchPlan(n, size, q if batch is None else size / n, 100,
                     max(1, round(1 / q)) if sampling == "poisson" and q > 0
                     else math.ceil(n / size))
    return GradientCanaries.for_run(AuditCanarySpec(count=count), seed, SHAPES, ARCH, plan,
                                    sampling, clip_norm=2.0, clip_kind=kind)


def test_gradient_canaries_have_distinct_coordinates_and_a_recorded_seed() -> None:
    c = canaries(17)
    flat = {(c.keys[k], int(i)) for k, i in zip(c.key_index, c.flat_index, strict=True)}
    assert len(flat) == 17
    assert c.seed == canary_seed(3)
    again = canaries(17)
    assert (again.included == c.included).all() and (again.flat_index == c.flat_index).all()
    assert [(r.key, r.flat) for r in c.records] == [
        (c.keys[k], int(i)) for k, i in zip(c.key_index, c.flat_index, strict=True)]


@pytest.mark.parametrize("kind", ["l2", "l1"])
def test_each_record_has_norm_100_c_and_an_honest_step_adds_it_clipped_to_c(kind: str
                                                                             ) -> None:
    c = canaries(17, q=1.0, kind=kind)  # every included canary in every step
    for record in c.records:
        assert record.norm(kind) == pytest.approx(CANARY_NORM_MULTIPLE * 2.0)
    records = c.step_records()
    assert records is not None and records.count == int(c.included.sum())
    step = c.step_gradient()  # what an honest step adds (the same draw as step_records)
    assert step is not None
    total = sum(float(np.linalg.norm(v) if kind == "l2" else np.abs(v).sum())
                for v in step.values())
    assert total > 0
    expected = clipped_sum([c.records[i] for i in np.flatnonzero(c.included)], 2.0, kind)
    for key, entries in expected.items():
        for flat, value in entries.items():
            assert step[key].reshape(-1)[flat] == pytest.approx(value, rel=1e-6)


def test_a_kernel_canary_also_touches_its_units_bias() -> None:
    record = canary_record(ARCH, "a.kernel", 6)  # [1, 2]: input 1, unit 2
    assert record.gradient == (("a.kernel", 6, 1.0), ("a.bias", 2, 1.0))
    assert record.activation == (((1,), 1.0),) and record.output_gradient == (((2,), 1.0),)
    assert canary_record(ARCH, "b.bias", 3).gradient == (("b.bias", 3, 1.0),)


def test_canaries_are_poisson_sampled_at_the_runs_rate() -> None:
    c = canaries(17, q=0.0)
    assert c.step_records() is None
    assert c.step_gradient() is None
    c = canaries(17, q=0.25)
    joined = np.array([c.sampled() for _ in range(4000)])
    assert joined[:, c.included].mean() == pytest.approx(0.25, abs=0.01)
    assert not joined[:, ~c.included].any()


def test_shuffled_canaries_join_one_batch_per_epoch_like_a_shuffled_example() -> None:
    """N = 1000, B = 300: 4 batches an epoch (the last of 100). Each included canary joins
    exactly one of them every epoch, the last with probability 100/1000, as an example of
    the run's own shuffled batches does; an excluded canary never joins."""
    c = canaries(17, sampling="shuffle", n=1000, batch=300)
    assert c.steps_per_epoch == 4
    epochs = 3000
    joined = np.array([c.sampled() for _ in range(4 * epochs)]).reshape(epochs, 4, 17)
    assert (joined[:, :, c.included].sum(axis=1) == 1).all()
    assert not joined[:, :, ~c.included].any()
    share = joined[:, :, c.included].mean(axis=(0, 2))
    np.testing.assert_allclose(share, [0.3, 0.3, 0.3, 0.1], atol=0.01)
    # the run's own sampler: an example is in batch b of an epoch with the same shares
    rows = list(shuffled_batches(1000, 300, 4 * 2000, seed=0))
    example = np.array([[7 in rows[4 * e + b] for b in range(4)] for e in range(2000)])
    np.testing.assert_allclose(example.mean(axis=0), [0.3, 0.3, 0.3, 0.1], atol=0.02)


def test_scores_are_the_movement_against_the_canary() -> None:
    c = canaries(17)
    initial = {k: np.zeros(s, np.float32) for k, s in SHAPES.items()}
    final = {k: np.zeros(s, np.float32) for k, s in SHAPES.items()}
    key, index = c.keys[c.key_index[0]], c.flat_index[0]
    final[key].reshape(-1)[index] = -0.5
    scores = c.scores(initial, final)
    assert scores[0] == pytest.approx(0.5) and not scores[1:].any()


def test_more_gradient_canaries_than_coordinates_is_refused() -> None:
    with pytest.raises(ConfigError, match=f"more than the model's {TOTAL} weight coordinates"):
        canaries(TOTAL + 1)


def test_records_ride_along_the_chunks_and_the_rest_get_chunks_of_their_own() -> None:
    c = canaries(TOTAL, q=1.0)
    records = CanaryRecords.of(c.records)
    plan = with_canaries(2, records, 10)
    assert [i for i, _ in plan] == [0, 1, None, None, None]
    assert [p.count for _, p in plan if p is not None] == [10, 10, 10, 10, 1]
    dense = records.dense_gradient(SHAPES)
    parts = [p.dense_gradient(SHAPES) for _, p in plan if p is not None]
    for key in SHAPES:
        np.testing.assert_array_equal(np.concatenate([p[key] for p in parts]), dense[key])
    assert with_canaries(3, None, 4) == [(0, None), (1, None), (2, None)]


def _images(n: int = 20, task: str = "image") -> Dataset:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 255, (n, 8, 8, 1), dtype=np.uint8)
    y = np.arange(n, dtype=np.int64) % 3
    return Dataset("tiny", task, x, y, x[:5], y[:5], ("a", "b", "c"))


def test_input_canaries_are_mislabelled_copies_appended_when_included() -> None:
    ds = _images()
    c = InputCanaries.for_dataset(AuditCanarySpec(count=8, kind="input"), 1, ds)
    assert (c.labels != ds.y_train[c.source_index]).all()
    grown = c.training_set(ds)
    assert len(grown.x_train) == len(ds.x_train) + int(c.included.sum())
    assert (grown.y_train[len(ds.x_train):] == c.labels[c.included]).all()


def test_input_canary_scores_are_the_wrong_labels_probability() -> None:
    ds = _images()
    spec = AuditCanarySpec(count=4, kind="input", guesses=1)
    c = InputCanaries.for_dataset(spec, 1, ds)
    proba = np.full((4, 3), 0.1)
    first_in = int(np.flatnonzero(c.included)[0])
    proba[first_in, c.labels[first_in]] = 0.9
    assert c.audit(spec, proba, 1e-5).correct == 1


def test_input_canaries_bad_input() -> None:
    with pytest.raises(ConfigError, match="more than the 20 training examples"):
        InputCanaries.for_dataset(AuditCanarySpec(count=21, kind="input"), 0, _images())
    tokens = np.ones((20, 6), np.int64)
    text = Dataset("tinytext", "text", tokens, np.arange(20) % 2, tokens[:4],
                   np.arange(4) % 2, ("neg", "pos"), vocabulary_size=5)
    with pytest.raises(ConfigError, match="needs an image data set"):
        InputCanaries.for_dataset(AuditCanarySpec(count=2, kind="input"), 0, text)


def test_check_audit_inputs_counts_the_models_coordinates() -> None:
    config = RunConfig.from_dict({"model": {"name": "cnn4"},
                                  "privacy": {"mechanism": "dpsgd-gaussian",
                                              "noise_multiplier": 1.0},
                                  "audit_canaries": {"count": 10 ** 7}})
    ds = _images(40)
    ds = dataclasses.replace(ds, x_train=np.zeros((40, 28, 28, 1), np.uint8),
                             x_test=np.zeros((5, 28, 28, 1), np.uint8))
    with pytest.raises(ConfigError, match="weight coordinates of model 'cnn4'"):
        check_audit_inputs(config, ds)


@pytest.mark.parametrize(("fault", "clip", "scale", "sigma"), [
    ("none", 2.0, 2.0, 1.0), ("no_noise", 2.0, 0.0, 0.0),
    ("no_clip", NO_CLIP_NORM, 2.0, 2.0 / NO_CLIP_NORM), ("noise_div10", 2.0, 0.2, 0.1),
])
def test_faults_break_the_step_mechanism(fault: str, clip: float, scale: float,
                                         sigma: float) -> None:
    m = apply_fault(HONEST, fault)
    assert (m.clip_norm, m.noise_scale) == (clip, pytest.approx(scale))
    assert m.noise_multiplier == pytest.approx(sigma)
    assert m.noise_multiplier * m.clip_norm == pytest.approx(scale)  # Opacus's noise std


DP = {"mechanism": "dpsgd-gaussian", "noise_multiplier": 1.0}


def test_a_fault_without_an_audit_is_refused() -> None:
    with pytest.raises(ConfigError, match="factors.fault='no_noise'.*audit_canaries.count"):
        RunConfig.from_dict({"privacy": DP, "factors": {"fault": "no_noise"}})
    RunConfig.from_dict({"privacy": DP, "factors": {"fault": "no_noise"},
                         "audit_canaries": {"count": 10}})


def test_unknown_fault_and_kind_are_refused() -> None:
    with pytest.raises(ConfigError, match="factors.fault"):
        RunConfig.from_dict({"factors": {"fault": "half_noise"}})
    with pytest.raises(ConfigError, match="audit_canaries.kind"):
        RunConfig.from_dict({"audit_canaries": {"count": 1, "kind": "label"}})


def test_gradient_canaries_need_dpsgd_under_either_recipe() -> None:
    with pytest.raises(ConfigError, match="needs DP-SGD"):
        RunConfig.from_dict({"audit_canaries": {"count": 10}})
    with pytest.raises(ConfigError, match="needs DP-SGD"):
        RunConfig.from_dict({"recipe": "library", "privacy": {"mechanism": "none"},
                             "audit_canaries": {"count": 10}})
    RunConfig.from_dict({"recipe": "library", "privacy": {**DP, "sampling": "shuffle"},
                         "audit_canaries": {"count": 10}})  # through the library's step
    RunConfig.from_dict({"recipe": "library", "privacy": {**DP, "sampling": "shuffle"},
                         "audit_canaries": {"count": 10, "kind": "input"}})


def test_defaults_keep_the_config_hash_and_an_audit_changes_it() -> None:
    plain = RunConfig.from_dict({"privacy": DP})
    explicit = RunConfig.from_dict({"privacy": DP, "factors": {"fault": "none"},
                                    "audit_canaries": {"count": 0}})
    audited = RunConfig.from_dict({"privacy": DP, "audit_canaries": {"count": 10}})
    assert plain.config_hash == explicit.config_hash
    assert "audit_canaries" not in plain.to_dict() and "factors" not in plain.to_dict()
    assert audited.config_hash != plain.config_hash
    assert RunConfig.from_dict(audited.to_dict()) == audited


def test_default_guesses_are_a_tenth_of_the_canaries() -> None:
    assert AuditCanarySpec(count=1000).k == 100
    with pytest.raises(ConfigError, match="guesses=600"):
        AuditCanarySpec(count=1000, guesses=600, guess_out=True)
