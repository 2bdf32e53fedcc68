"""Each check of a run runs once, in the layer that owns it: one tiny run through
``compare.api.train`` and through a grid (``compare.api.compare``) counts the calls.

Owners: the core assembly :func:`dpcore.assembly.train` (every caller goes through it) for
``check_backend_recipe``, ``apply_data_factors``, ``check_audit_inputs`` and
``check_dp_model``; the loop (:func:`dpcore.trainloop.run_training`) for
``check_augment_data``; the grid's caller (``api.compare``, else ``run_grid``) for
``plan_runs``. The grid preflight (:func:`compare.preflight.check_grid`) asks
``check_backend_recipe`` once more per run, ahead of any training, to refuse the whole grid
in one line; the core's call is the guard (direct callers, executors in other processes)."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dpcore.config import RunConfig
from dpcore.errors import ConfigError

pytest.importorskip("torch")

#: (module that defines it, function name) of every counted check.
CHECKS = (("dpcore.recipes", "check_backend_recipe"), ("dpcore.pipeline", "apply_data_factors"),
          ("dpcore.audit.plan", "check_audit_inputs"),
          ("dpcore.privacy_checks", "check_dp_model"), ("dpcore.augment", "check_augment_data"),
          ("compare.runplan", "plan_runs"))

CONFIG: dict[str, Any] = {
    "data": {"name": "digits", "image_size": 16},
    "model": {"name": "cnn4", "activation": "relu"},
    "train": {"steps": 2, "batch_size": 64, "lr": 0.5, "momentum": 0.0},
    "privacy": {"mechanism": "dpsgd-gaussian", "noise_multiplier": 1.0},
}


@pytest.fixture(autouse=True)
def _isolated_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DPCOMPARE_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Counts the calls of every function of :data:`CHECKS`, wherever it was imported."""
    import importlib

    for loaded in ("compare.api", "compare.runner", "torchpipe.backend"):
        importlib.import_module(loaded)  # every module that imports a check by name is loaded
    counts: Counter[str] = Counter()
    for module_name, name in CHECKS:
        original = getattr(importlib.import_module(module_name), name)

        def counted(*args: Any, _name: str = name, _original: Callable[..., Any] = original,
                    **kwargs: Any) -> Any:
            counts[_name] += 1
            return _original(*args, **kwargs)

        for module in list(sys.modules.values()):
            if getattr(module, name, None) is original:
                monkeypatch.setattr(module, name, counted)
    return counts


@pytest.mark.parametrize("recipe", ["harmonised", "library"])
def test_api_train_runs_each_check_once(recipe: str, calls: Counter[str],
                                        tmp_path: Path) -> None:
    from compare.api import train

    result = train({**CONFIG, "recipe": recipe}, backend="torch", out=tmp_path / "out",
                   faithfulness_subset=0, progress=False)
    assert result.status == "finished"
    assert dict(calls) == {"check_backend_recipe": 1, "apply_data_factors": 1,
                           "check_audit_inputs": 1, "check_dp_model": 1,
                           # the harmonised loop augments; the library's does not
                           **({"check_augment_data": 1} if recipe == "harmonised" else {})}


def test_a_grid_run_runs_each_check_once(calls: Counter[str], tmp_path: Path) -> None:
    from compare.api import compare

    grid = {"name": "once", "base": CONFIG, "axes": {}, "seeds": 1, "backends": ["torch"],
            "evaluation": {"faithfulness": False, "montage_images": 0}}
    store = compare(grid, out=tmp_path / "out", report=False, progress=False)
    assert [r.status for r in store.results().itertuples()] == ["finished"]
    assert dict(calls) == {"plan_runs": 1, "apply_data_factors": 1, "check_audit_inputs": 1,
                           "check_dp_model": 1, "check_augment_data": 1,
                           # the preflight's look ahead, and the core's guard
                           "check_backend_recipe": 2}


def test_a_dry_run_checks_the_recipe_without_training(calls: Counter[str],
                                                      tmp_path: Path) -> None:
    from compare.api import train

    with pytest.raises(ConfigError, match="microbatch_size=2 cannot run through Opacus"):
        train({**CONFIG, "recipe": "library", "factors": {"microbatch_size": 2},
               "privacy": {**CONFIG["privacy"], "sampling": "shuffle"}}, backend="torch",
              out=tmp_path / "out", dry_run=True)
    assert calls["check_backend_recipe"] == 1 and calls["check_dp_model"] == 0
    assert not (tmp_path / "out").exists()


def test_the_core_guards_a_direct_caller(calls: Counter[str]) -> None:
    """A caller of the backend contract that skipped every pre-check is still refused before
    anything is built (the library recipe cannot run this on Opacus)."""
    from dpcore.backend import load_backend
    from dpcore.data import load_dataset, resolve_data_root

    config = RunConfig.from_dict({**CONFIG, "recipe": "library",
                                  "factors": {"microbatch_size": 2},
                                  "privacy": {**CONFIG["privacy"], "sampling": "shuffle"}})
    dataset = load_dataset(config.data, resolve_data_root(None))
    with pytest.raises(ConfigError, match="microbatch_size=2 cannot run through Opacus"):
        load_backend("torch").train(config, dataset, progress=False)
    assert calls["check_backend_recipe"] == 1 and calls["check_dp_model"] == 0
