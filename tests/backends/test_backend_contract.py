"""One typed backend contract: ``dpcore.backend.load_backend`` is the only place that maps a
backend name to code, loads lazily, and returns modules with every entry point of
``dpcore.backend.Backend``; ``choose_engine`` is the engine rule of both backends."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from dpcore.backend import (
    BACKEND_PACKAGES,
    BACKENDS,
    ENGINE_NAMES,
    Backend,
    EngineChoice,
    choose_engine,
    load_backend,
)
from dpcore.errors import ConfigError, DpCompareError

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("compare", "dpcore", "tfpipe", "torchpipe", "benchmarks", "examples")


def test_every_result_backend_name_has_a_package() -> None:
    assert set(BACKEND_PACKAGES) == set(BACKENDS)


@pytest.mark.parametrize("name", BACKENDS)
def test_load_backend_gives_every_entry_point_of_the_protocol(name: str) -> None:
    pytest.importorskip({"tf": "tensorflow", "torch": "torch"}[name])
    backend = load_backend(name)
    members = [m for m in dir(Backend) if not m.startswith("_")] + ["NAME", "ENGINES"]
    missing = [m for m in members if not hasattr(backend, m)]
    assert not missing, missing
    assert name == backend.NAME
    assert set(backend.ENGINES) == set(ENGINE_NAMES)


def test_an_unknown_backend_is_named_with_the_valid_ones() -> None:
    with pytest.raises(DpCompareError, match=r"backend 'jax' is not known; valid: tf, torch"):
        load_backend("jax")


def test_importing_dpcore_backend_imports_no_framework() -> None:
    code = ("import sys, dpcore.backend, dpcore.results, dpcore.pipeline; "
            "print(sorted(m for m in ('tensorflow', 'torch', 'opacus', 'tfpipe', 'torchpipe') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"


def _package_literals(path: Path) -> list[str]:
    """String constants of ``path`` that name a backend package or one of its modules."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            value = node.value
            if any(value == p or value.startswith(p + ".") for p in BACKEND_PACKAGES.values()):
                found.append(value)
    return found


def test_load_backend_is_the_only_place_that_maps_a_name_to_a_package() -> None:
    offenders = {}
    for top in PRODUCT:
        for path in sorted((REPO / top).rglob("*.py")):
            if path == REPO / "dpcore" / "backend.py":
                continue
            literals = _package_literals(path)
            if literals:
                offenders[str(path.relative_to(REPO))] = literals
    assert offenders == {}


@pytest.mark.parametrize(("requested", "unsupported", "k", "expected"), [
    (None, [], 1, EngineChoice("fast")),
    ("fast", [], 1, EngineChoice("fast")),
    ("reference", [], 1, EngineChoice("reference")),
    ("reference", ["ln (LayerNorm)"], 1, EngineChoice("reference")),
    (None, ["ln (LayerNorm)"], 1,
     EngineChoice("reference", "unsupported layers: ln (LayerNorm)")),
    (None, [], 2, EngineChoice("reference", "factors.microbatch_size > 1 (reference only)")),
    ("fast", [], 2, EngineChoice("reference", "factors.microbatch_size > 1 (reference only)")),
])
def test_choose_engine(requested: str | None, unsupported: list[str], k: int,
                       expected: EngineChoice) -> None:
    assert choose_engine(requested, unsupported, k) == expected


def test_explicit_fast_on_a_layer_without_a_rule_is_one_line_naming_it() -> None:
    with pytest.raises(ConfigError) as info:
        choose_engine("fast", ["blocks.0.ln (LayerNorm: no per-example rule)"], 1)
    message = str(info.value)
    assert "\n" not in message and "blocks.0.ln" in message and "--engine reference" in message


def test_an_unknown_engine_is_refused() -> None:
    with pytest.raises(ConfigError, match="perf.engine='turbo' is not known"):
        choose_engine("turbo", [], 1)


def test_the_step_engines_keep_their_old_import_paths() -> None:
    pytest.importorskip("opacus")
    pytest.importorskip("tensorflow")
    from tfpipe.engine import TfStepEngine
    from tfpipe.train import TfStepEngine as TfFromTrain
    from torchpipe.engine import TorchStepEngine
    from torchpipe.train import TorchStepEngine as TorchFromTrain

    assert TfFromTrain is TfStepEngine and TorchFromTrain is TorchStepEngine
