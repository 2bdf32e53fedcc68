"""Every layer type has its rules: a shape rule in the core, a builder in both backends, and a
fast-engine rule (or a declared fallback) in both backends, for every layer of every
registered architecture and of the custom-YAML layer types; the registries' lookups."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path

import pytest

tf = pytest.importorskip("tensorflow")
torch = pytest.importorskip("torch")

from dpcore import architectures as A  # noqa: E402
from dpcore.config import ModelSpec, RunConfig  # noqa: E402
from dpcore.errors import ConfigError  # noqa: E402
from dpcore.layer_registry import LayerRegistry  # noqa: E402
from dpcore.layers import LAYER_TYPES  # noqa: E402
from tfpipe import fast as tf_fast  # noqa: E402
from tfpipe import models as tfm  # noqa: E402
from torchpipe import fast as pt_fast  # noqa: E402
from torchpipe import models as ptm  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "custom-model.yaml"
CASES = (*A.MODEL_NAMES, "custom-example")


@cache
def _architecture(case: str) -> A.Architecture:
    """``case`` resolved at a small size it accepts (width 0.125 keeps the big ones light)."""
    if case == "custom-example":
        return A.architecture(RunConfig.from_file(EXAMPLE).model, (16, 16, 1), 10)
    if case in A.TEXT_ARCHITECTURES:
        return A.architecture(ModelSpec(name=case, width=0.125), (12,), 2, vocab_size=9)
    shape = (16, 16, 1) if case in ("cnn4", "scatter-cnn", "scatter-linear") else (32, 32, 3)
    return A.architecture(ModelSpec(name=case, width=0.125), shape, 10)


def test_every_layer_type_has_a_shape_rule_and_a_builder_in_both_backends() -> None:
    used = {type(layer) for case in CASES for layer in _architecture(case).walk()}
    yaml_types = set(LAYER_TYPES.values())
    # the zoo uses every type a custom model may declare, so building the zoo builds them all
    assert used == yaml_types
    for registry in (A.SHAPE_RULES, tfm.LAYER_BUILDERS, ptm.LAYER_BUILDERS):
        missing = sorted(t.__name__ for t in yaml_types - registry.types())
        assert not missing, (registry.job, missing)
    with_weights = {t for t in yaml_types if t in A.WEIGHT_SHAPE_RULES}
    assert with_weights == set(A.WEIGHT_KINDS)  # a weighted type has a neutral weight kind


def _layer_types(arch: A.Architecture) -> dict[str, type]:
    return {layer.name: type(layer) for layer in arch.walk()}


def _tf_problem_layers(model: object) -> list[str]:
    """Neutral names of the Keras layers the fast engine names ("<name> (<why>)")."""
    return [problem.split(" ")[0] for problem in tf_fast.unsupported_layers(model)]


def _torch_problem_layers(model: object) -> list[str]:
    """Neutral names of the torch modules the fast engine names ("<path> (<why>)"); the
    last part of a module's path is its neutral name (``ZooModel`` keys modules by it)."""
    return [problem.split(" ")[0].rsplit(".", 1)[-1]
            for problem in pt_fast.unsupported_layers(model)]


@pytest.mark.parametrize("case", CASES)
def test_every_trainable_layer_has_a_fast_rule_or_a_declared_fallback(case: str) -> None:
    arch = _architecture(case)
    types = _layer_types(arch)
    for registry, problems in (
        (tfm.LAYER_BUILDERS, _tf_problem_layers(tfm.from_architecture(arch))),
        (ptm.LAYER_BUILDERS, _torch_problem_layers(ptm.from_architecture(arch))),
    ):
        undeclared = [name for name in problems if registry.fast_fallback(types[name]) is None]
        assert not undeclared, (registry.job, undeclared)
        # a declared fallback is true: every weighted layer of that type is named
        declared = [name for name in arch.weight_kinds()
                    if registry.fast_fallback(types[name]) is not None]
        assert set(declared) <= set(problems), (registry.job, declared)


def test_a_layer_type_without_a_rule_is_named_with_the_registered_ones() -> None:
    class Unknown:
        name = "odd"

    registry: LayerRegistry[Callable[..., object]] = LayerRegistry("Keras builder")
    registry.register(A.Dense)(lambda layer, x, ctx: x)
    with pytest.raises(ConfigError, match=r"^layer type Unknown has no Keras builder; "
                                          r"valid: Dense$"):
        registry[Unknown]
    arch = A.Architecture("m", (4,), 2, _architecture("cnn4").activation,
                          (A.Dense("fc", 2),))
    dense = tfm.LAYER_BUILDERS[A.Dense]
    tfm.LAYER_BUILDERS.unregister(A.Dense)
    try:
        with pytest.raises(ConfigError, match="layer type Dense has no Keras builder"):
            tfm.from_architecture(arch)
    finally:
        tfm.register_layer_builder(A.Dense)(dense)
    assert tfm.from_architecture(arch).output_shape == (None, 2)


def test_a_declared_fast_fallback_is_kept_until_replaced() -> None:
    registry: LayerRegistry[Callable[..., object]] = LayerRegistry("torch builder")
    registry.register(A.Dense, A.Conv2D, fast_fallback="no per-example rule")(print)
    assert registry.fast_fallback(A.Dense) == registry.fast_fallback(A.Conv2D) \
        == "no per-example rule"
    registry.register(A.Dense)(print)  # a later registration replaces the declaration
    assert registry.fast_fallback(A.Dense) is None
    assert registry.types() == {A.Dense, A.Conv2D}
    registry.unregister(A.Conv2D)
    assert A.Conv2D not in registry and registry.fast_fallback(A.Conv2D) is None
