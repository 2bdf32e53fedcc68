"""The training contract, one abstract test run on both backends (Opacus BasePrivacyEngineTest
style): DP-SGD equals plain SGD without clipping/noise, clipping equals a naive per-example
loop, chunking changes nothing, the noise has the configured distribution, and ``train``
handles empty batches, Adam, momentum, EMA, divergence, determinism and checkpoints."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from scipy import stats

pytest.importorskip("tensorflow")
pytest.importorskip("torch")
pytest.importorskip("opacus")

from dpcore.accounting import plan_privacy  # noqa: E402
from dpcore.results import validate_result_dict  # noqa: E402
from dpcore.sampling import batches_for  # noqa: E402
from dpcore.trained import read_checkpoint  # noqa: E402
from dpcore.trainloop import step_mechanism  # noqa: E402
from tests.backends.train_helpers import (  # noqa: E402
    ENGINE_FRAMEWORKS,
    batch,
    chunks_of,
    config,
    diff,
    digits16,
    mechanism,
    naive_clipped_sum,
    rel_error,
)

TOL = 1e-5  # relative, flat L2 norm over all coordinates of the update
INDICES = np.arange(3, 23)  # one logical batch of 20 training examples
#: Clip norms near the median per-example norm of INDICES at the seed-0 initial weights
#: (L2 1.6..3.7, L1 57..159): about half the examples are clipped.
CLIPS = [("l2", 2.3), ("l1", 100.0)]
_BASELINES: dict[str, Any] = {}


class TrainContract:
    """Subclasses set ``framework`` (see tests/backends/train_helpers.py)."""

    framework: Any

    # -------------------------------------------------------------- one step, exact checks
    def _one_step(self, cfg: Any, mech: Any, chunk: int | None, seed: int = 0,
                  indices: np.ndarray = INDICES) -> tuple[dict, dict]:
        fw = self.framework
        models = fw.modules()[0]
        model = fw.build(seed)
        before = models.get_weights(model)
        engine = fw.engine(model, cfg, mech)
        engine.train_step(chunks_of(indices, chunk))
        return before, models.get_weights(model)

    def test_no_noise_huge_clip_equals_plain_sgd(self) -> None:
        fw = self.framework
        cfg = config(noise=0.0, clip=1e6, lr=0.1)
        before, after = self._one_step(cfg, mechanism("l2", 1e6, 0.0, 32), chunk=8)
        reference = fw.build(0)
        fw.plain_sgd_step(reference, *batch(INDICES), lr=0.1, expected_batch_size=32)
        expected = fw.modules()[0].get_weights(reference)
        assert rel_error(diff(after, before), diff(expected, before)) < TOL

    def test_non_private_step_equals_plain_sgd(self) -> None:
        fw = self.framework
        cfg = config(mechanism="none", lr=0.1)
        before, after = self._one_step(cfg, mechanism(None, math.inf, 0.0, 32), chunk=8)
        reference = fw.build(0)
        fw.plain_sgd_step(reference, *batch(INDICES), lr=0.1, expected_batch_size=32)
        expected = fw.modules()[0].get_weights(reference)
        assert rel_error(diff(after, before), diff(expected, before)) < TOL

    @pytest.mark.parametrize(("kind", "clip"), CLIPS)
    def test_clipping_equals_naive_per_example_loop(self, kind: str, clip: float) -> None:
        fw = self.framework
        cfg = config(mechanism="dpsgd-gaussian" if kind == "l2" else "dpsgd-laplace",
                     noise=0.0, clip=clip, lr=1.0)
        before, after = self._one_step(cfg, mechanism(kind, clip, 0.0, 32), chunk=6)
        probe = fw.build(0)
        total, norms = naive_clipped_sum(
            lambda x, y: fw.grad_of_sum(probe, x, y), INDICES, clip, kind)
        assert sum(n > clip for n in norms) >= 5, "clipping must be active for this test"
        assert sum(n < clip for n in norms) >= 5, "some examples should stay unclipped"
        expected = {k: -v / 32 for k, v in total.items()}  # lr 1, divided by B = 32
        assert rel_error(diff(after, before), expected) < TOL

    @pytest.mark.parametrize(("kind", "clip"), CLIPS)
    def test_chunked_equals_unchunked(self, kind: str, clip: float) -> None:
        cfg = config(noise=0.0, clip=clip, lr=1.0)
        before, whole = self._one_step(cfg, mechanism(kind, clip, 0.0, 32), chunk=None)
        _, chunked = self._one_step(cfg, mechanism(kind, clip, 0.0, 32), chunk=3)
        assert rel_error(diff(chunked, before), diff(whole, before)) < TOL

    # -------------------------------------------------------------- noise
    @pytest.mark.parametrize("kind", ["l2", "l1"])
    def test_noise_has_the_configured_distribution(self, kind: str) -> None:
        """Empty batches (noise-only updates) with lr 1 and B 1: the update is minus the noise.
        Gaussian std = sigma * C; Laplace scale b = sigma * C (std b * sqrt 2)."""
        fw = self.framework
        models = fw.modules()[0]
        sigma, clip = 2.0, 0.25
        cfg = config(mechanism="dpsgd-gaussian" if kind == "l2" else "dpsgd-laplace",
                     noise=sigma, clip=clip, lr=1.0, batch_size=1, seed=7)
        mech = step_mechanism(cfg, plan_privacy(cfg, 300))
        assert mech.expected_batch_size == 1 and mech.clip_kind == kind
        scale = sigma * clip

        def noise_draws(n: int) -> list[np.ndarray]:
            model = fw.build(0)
            engine = fw.engine(model, cfg, mech)
            draws = []
            for _ in range(n):
                before = models.get_weights(model)
                engine.train_step([])
                update = diff(models.get_weights(model), before)
                draws.append(-np.concatenate([v.ravel() for v in update.values()]))
            return draws

        samples = noise_draws(2)
        noise = np.concatenate(samples)
        assert noise.size >= 10_000
        if kind == "l2":
            expected_std, dist = scale, stats.norm(0, scale)
        else:
            expected_std, dist = scale * math.sqrt(2), stats.laplace(0, scale)
        assert np.std(noise) == pytest.approx(expected_std, rel=0.03)
        assert abs(np.mean(noise)) < 4 * expected_std / math.sqrt(noise.size)
        assert stats.kstest(noise, dist.cdf).pvalue > 1e-3
        # the two draws are independent, not one draw repeated
        assert abs(np.corrcoef(samples[0], samples[1])[0, 1]) < 0.05
        # the same seed gives the same noise
        np.testing.assert_allclose(noise_draws(1)[0], samples[0], rtol=0, atol=1e-6)

    # -------------------------------------------------------------- train()
    def _train(self, cfg: Any, **kwargs: Any) -> Any:
        train_module = self.framework.modules()[1]
        kwargs.setdefault("perf", self.framework.perf())
        return train_module.train(cfg, digits16(), progress=False, **kwargs)

    def _baseline(self) -> Any:
        """Plain SGD, noise 0.5, 4 steps (trained once per backend and engine, shared)."""
        key = f"{self.framework.name}-{self.framework.engine_name}"
        if key not in _BASELINES:
            _BASELINES[key] = self._train(config(noise=0.5, lr=0.1, steps=4))
        return _BASELINES[key]

    def test_train_writes_a_valid_result_with_history(self) -> None:
        cfg = config(noise=1.0, epochs=2, batch_size=50, lr=0.5)
        trained = self._train(cfg)
        result = trained.result.to_dict()
        validate_result_dict(result)
        assert result["status"] == "finished" and result["backend"] == self.framework.name
        assert result["perf"]["engine_used"] == self.framework.engine_name
        plan = plan_privacy(cfg, 300)
        assert [h["epoch"] for h in result["history"]] == [1, 2]
        assert result["history"][-1]["step"] == plan.batches.steps == 12
        eps = [h["epsilon_spent"] for h in result["history"]]
        assert eps[0] < eps[1] == pytest.approx(plan.epsilon_rdp)
        assert result["privacy"]["epsilon_rdp"] == pytest.approx(plan.epsilon_rdp)
        assert result["privacy"]["library_epsilon"]
        for value in result["privacy"]["library_epsilon"].values():
            assert value == pytest.approx(plan.epsilon_rdp, rel=0.25)
        for h in result["history"]:
            assert h["loss"] > 0 and 0 <= h["test_accuracy"] <= 1 and h["seconds"] > 0
        assert sum(h["examples"] for h in result["history"]) == result["timing"]["examples_seen"]
        assert result["metrics"]["accuracy"] == pytest.approx(
            result["history"][-1]["test_accuracy"])
        assert result["timing"]["peak_memory_mb"] > 0
        proba = self.framework.modules()[2].predict_proba(trained, digits16().x_test)
        assert proba.shape == (100, 10)
        np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-5)

    def test_empty_poisson_batch_is_a_noise_only_step(self) -> None:
        cfg = config(noise=1.0, steps=12, batch_size=1, seed=3)
        plan = plan_privacy(cfg, 300)
        sizes = [len(b) for b in batches_for(plan.batches, "poisson", cfg.seed)]
        assert 0 in sizes, "the seed must produce an empty batch for this test"
        trained = self._train(cfg)
        assert trained.result.status == "finished"
        assert all(np.isfinite(v).all() for v in trained.weights.values())

    @pytest.mark.parametrize(("optimizer", "momentum"), [("adam", 0.0), ("sgd", 0.9)])
    def test_adam_and_momentum_train(self, optimizer: str, momentum: float) -> None:
        plain = self._baseline()
        other = self._train(config(noise=0.5, lr=0.01 if optimizer == "adam" else 0.1, steps=4,
                                   optimizer=optimizer, momentum=momentum))
        assert other.result.status == "finished"
        assert all(np.isfinite(v).all() for v in other.weights.values())
        assert any(not np.allclose(other.weights[k], plain.weights[k]) for k in plain.weights)

    def test_ema_changes_the_evaluation_weights(self) -> None:
        raw = self._baseline()
        ema = self._train(config(noise=0.5, lr=0.1, steps=4, ema=0.9))
        assert any(not np.allclose(ema.weights[k], raw.weights[k]) for k in raw.weights)
        # the model itself holds the EMA weights after training
        got = self.framework.modules()[0].get_weights(ema.model)
        for key, value in ema.weights.items():
            np.testing.assert_array_equal(got[key], value)

    def test_divergence_is_a_status_not_a_crash(self) -> None:
        trained = self._train(config(mechanism="none", lr=1e12, steps=6))
        result = trained.result.to_dict()
        validate_result_dict(result)
        assert result["status"] == "diverged" and "step" in result["error"]

    def test_same_seed_same_weights(self) -> None:
        # the shared baseline is the first run (trained earlier in this process, other runs
        # in between, or now): the same config and seed again must give the same weights
        first = self._baseline()
        second = self._train(config(noise=0.5, lr=0.1, steps=4))
        for key, value in first.weights.items():
            np.testing.assert_array_equal(second.weights[key], value)

    def test_checkpoint_round_trip(self, tmp_path: Any) -> None:
        _, train_module, predict_module = self.framework.modules()
        trained = self._baseline()  # read only: saved, then compared with its loaded copy
        path = train_module.save_checkpoint(trained, tmp_path / "checkpoint.npz")
        weights, meta = read_checkpoint(path)
        assert meta["backend"] == self.framework.name and meta["n_classes"] == 10
        loaded = train_module.load_checkpoint(path)
        x = digits16().x_test[:20]
        np.testing.assert_allclose(predict_module.predict_proba(loaded, x),
                                   predict_module.predict_proba(trained, x), atol=1e-6)


class TestTrainTfReference(TrainContract):
    framework = ENGINE_FRAMEWORKS["tf-reference"]


class TestTrainTfFast(TrainContract):
    framework = ENGINE_FRAMEWORKS["tf-fast"]


class TestTrainTorchReference(TrainContract):
    framework = ENGINE_FRAMEWORKS["torch-reference"]


class TestTrainTorchFast(TrainContract):
    framework = ENGINE_FRAMEWORKS["torch-fast"]


def test_every_engine_of_every_backend_has_a_contract_class() -> None:
    from dpcore.backend import BACKENDS, ENGINE_NAMES, load_backend

    tested = {(c.framework.name, c.framework.engine_name) for c in TrainContract.__subclasses__()}
    for name in BACKENDS:
        assert set(load_backend(name).ENGINES) == set(ENGINE_NAMES)
    assert tested == {(b, e) for b in BACKENDS for e in ENGINE_NAMES}
