"""Every honest configuration of every bundled preset passes ``dpcompare verify``: one
representative per distinct DP step (backend, mechanism, sampling, microbatching, divisor,
recipe, noise source), on the bundled digits at 16x16 with cnn4 and a batch of 64 (small data;
the preset's step settings: mechanism, noise or target epsilon, clip norm, sampling,
microbatch size, normalisation, recipe, noise source, and its perf settings), every engine that
applies. The deliberately broken configurations (``factors.fault``) fail it."""

from __future__ import annotations

from typing import Any

import pytest

from compare.grid import expand_grid, load_preset, preset_names
from dpcore.config import PerfSpec, RunConfig
from dpcore.mechanisms import noises_gradients

pytestmark = pytest.mark.slow

pytest.importorskip("tensorflow")
pytest.importorskip("torch")

#: The small data and model every representative runs on.
SMALL = {"data": {"name": "digits", "image_size": 16},
         "train": {"batch_size": 64, "epochs": 5, "steps": None}}


def _step_key(config: RunConfig, backend: str) -> tuple[Any, ...]:
    p, f = config.privacy, config.factors
    return (backend, p.mechanism, p.sampling, f.microbatch_size, f.normalisation,
            config.recipe, p.noise_source)


def _small(config: RunConfig) -> RunConfig:
    """``config`` on digits with cnn4 (its activation kept), a batch of 64 and 5 epochs, its
    step settings unchanged (its audit section too: verify adds no canaries, and a fault is
    refused without one)."""
    raw = config.to_dict()
    raw["data"] = dict(SMALL["data"])
    raw["model"] = {"name": "cnn4", "activation": raw["model"].get("activation", "tanh")}
    raw["train"] = {**raw["train"], **SMALL["train"]}
    return RunConfig.from_dict(raw)


def _representatives() -> tuple[dict[tuple[Any, ...], tuple[str, RunConfig, PerfSpec]],
                                list[tuple[str, RunConfig, str]]]:
    """One honest config per distinct step, and every faulty one."""
    honest: dict[tuple[Any, ...], tuple[str, RunConfig, PerfSpec]] = {}
    faulty: list[tuple[str, RunConfig, str]] = []
    for name in preset_names():
        grid = expand_grid(load_preset(name))
        for cell, backend in grid.runs():
            config = cell.config
            if not noises_gradients(config.privacy.mechanism):
                continue
            if config.factors.fault != "none":
                faulty.append((name, config, backend))
                continue
            honest.setdefault(_step_key(config, backend), (name, config, grid.perf))
    return honest, faulty


HONEST, FAULTY = _representatives()


def test_the_presets_hold_the_distinct_steps_this_test_expects() -> None:
    keys = set(HONEST)
    steps = {(k[1], k[2], k[3] > 1, k[4], k[5], k[6]) for k in keys}
    assert ("dpsgd-gaussian", "poisson", False, "expected", "harmonised", "framework") in steps
    assert ("dpsgd-laplace", "poisson", False, "expected", "harmonised", "framework") in steps
    assert ("dpsgd-gaussian", "poisson", False, "expected", "harmonised", "shared") in steps
    assert ("dpsgd-gaussian", "shuffle", True, "microbatches", "harmonised", "framework") \
        in steps
    assert ("dpsgd-gaussian", "shuffle", False, "expected", "library", "framework") in steps
    assert {k[0] for k in keys if k[5] == "library"} == {"tf", "torch"}
    assert FAULTY


@pytest.mark.parametrize("key", sorted(HONEST, key=str), ids=lambda k: "-".join(map(str, k)))
def test_every_preset_step_passes_verify(key: tuple[Any, ...]) -> None:
    from compare.verify import verify_config

    preset, config, perf = HONEST[key]
    report = verify_config(_small(config), key[0], perf=perf)
    assert report.passed, f"preset {preset}: {report.render()}"
    assert report.steps, f"preset {preset}: no step checked"


@pytest.mark.parametrize("fault", ["no_noise", "no_clip", "noise_div10"])
def test_the_deliberately_broken_preset_runs_fail_verify(fault: str) -> None:
    from compare.verify import verify_config

    matches = [(p, c, b) for p, c, b in FAULTY if c.factors.fault == fault and b == "torch"]
    assert matches, fault
    preset, config, _ = matches[0]
    report = verify_config(_small(config), "torch", engine="fast")
    assert not report.passed, f"preset {preset} fault {fault} passed verify"
