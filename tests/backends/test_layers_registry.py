"""Every layer type has its rules: its shape rule and weights on its description in the core, a
builder in both backends, and a fast-engine rule (or a declared fallback) in both backends,
for every layer of every registered architecture and of the custom-YAML layer types; the
builders' lookups."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

tf = pytest.importorskip("tensorflow")
torch = pytest.importorskip("torch")

from dpcore import architectures as A  # noqa: E402
from dpcore.config import ModelSpec, RunConfig  # noqa: E402
from dpcore.errors import ConfigError  # noqa: E402
from dpcore.layers import LAYER_TYPES, Layer, Tracer  # noqa: E402
from tfpipe import fast as tf_fast  # noqa: E402
from tfpipe import models as tfm  # noqa: E402
from torchpipe import fast as pt_fast  # noqa: E402
from torchpipe import models as ptm  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "custom-model.yaml"
CASES = (*A.model_names(), "custom-example")


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
    for registry in (tfm.LAYER_BUILDERS, ptm.LAYER_BUILDERS):
        missing = sorted(t.__name__ for t in yaml_types - set(registry))
        assert not missing, (registry.job, missing)
    for layer_type in yaml_types:  # a shape rule of its own; weights only with a weight kind
        assert layer_type.output_shape is not Layer.output_shape, layer_type
        has_weights = layer_type.weight_shapes is not Layer.weight_shapes
        assert has_weights == (layer_type.weight_kind is not Layer.weight_kind), layer_type
    kinds = set()
    for case in CASES:  # a layer has weights exactly when it has a weight kind
        arch = _architecture(case)
        assert {key.split(".")[0] for key in arch.weight_shapes()} == set(arch.weight_kinds())
        kinds |= set(arch.weight_kinds().values())
    assert kinds == {"conv2d", "conv1d", "dense", "groupnorm", "embedding"}


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
        (tfm.FAST_FALLBACKS, _tf_problem_layers(tfm.from_architecture(arch))),
        (ptm.FAST_FALLBACKS, _torch_problem_layers(ptm.from_architecture(arch))),
    ):
        undeclared = [name for name in problems if types[name] not in registry]
        assert not undeclared, (registry.job, undeclared)
        # a declared fallback is true: every weighted layer of that type is named
        declared = [name for name in arch.weight_kinds() if types[name] in registry]
        assert set(declared) <= set(problems), (registry.job, declared)


@dataclass(frozen=True)
class Unbuilt(Layer):
    """A layer type no backend builds."""

    name: str

    def output_shape(self, shape: A.Shape, t: Tracer) -> A.Shape:
        return shape


def test_a_layer_type_without_a_builder_is_named_with_the_registered_ones() -> None:
    arch = A.Architecture("m", (4,), 2, _architecture("cnn4").activation,
                          (Unbuilt("odd"), A.Dense("fc", 2)))
    valid = ", ".join(t.__name__ for t in tfm.LAYER_BUILDERS)
    with pytest.raises(ConfigError, match=rf"^layer type Unbuilt is not known to the Keras "
                                          rf"builders; valid: {valid}$"):
        tfm.from_architecture(arch)
    with pytest.raises(ConfigError, match="layer type Unbuilt is not known to the torch "
                                          "builders; valid: Conv2D, Conv1D, GroupNorm"):
        ptm.from_architecture(arch)
    assert Unbuilt not in tfm.LAYER_BUILDERS and A.Dense in tfm.LAYER_BUILDERS
