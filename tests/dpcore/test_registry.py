"""The one registry type (dpcore/registry.py): registration, exact lookups, the missing-key
error, unregistering, registration order and where a registration was made."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dpcore.errors import ConfigError
from dpcore.registry import Registry


class Layer:
    pass


class Special(Layer):
    pass


def test_a_decorated_function_is_registered_under_each_type_and_returned_unchanged() -> None:
    rules: Registry[type, Callable[[int], int]] = Registry("toy rules", key="layer type")

    @rules.register(Layer, int)
    def double(x: int) -> int:
        return 2 * x

    assert double(3) == 6  # the decorator returns the function itself
    assert rules[Layer] is rules[int] is double
    assert Special not in rules and rules.get(Special) is None  # exact types only
    assert list(rules) == [Layer, int] and len(rules) == 2
    assert rules.names() == ("Layer", "int")
    assert rules.origin(Layer) == __name__  # the module whose code registered it


def test_a_missing_key_names_the_key_the_job_a_suggestion_and_the_valid_keys() -> None:
    mechanisms: Registry[str, str] = Registry("privacy mechanisms", key="privacy.mechanism")
    for name in ("none", "dpsgd-gaussian", "ldp"):
        mechanisms.register(name)(name.upper())
    with pytest.raises(ConfigError) as caught:
        mechanisms["dpsgd-gausian"]
    assert str(caught.value) == (
        "privacy.mechanism='dpsgd-gausian' is not known to the privacy mechanisms (did you "
        "mean 'dpsgd-gaussian'?); valid: none, dpsgd-gaussian, ldp")
    rules: Registry[type, str] = Registry("Keras builders", key="layer type")
    rules.register(Layer)("build")
    with pytest.raises(ConfigError, match=r"^layer type Special is not known to the Keras "
                                          r"builders; valid: Layer$"):
        rules[Special]
    with pytest.raises(ConfigError, match="valid: none registered"):
        Registry("empties", key="name")["x"]
    # a value from a user's file may be unhashable: not found, never a TypeError
    assert mechanisms.get(["none"]) is None and ["none"] not in mechanisms
    with pytest.raises(ConfigError, match=r"privacy.mechanism=\['none'\] is not known"):
        mechanisms[["none"]]  # type: ignore[index]


def test_a_later_registration_replaces_in_place_and_unregister_forgets() -> None:
    names: Registry[str, int] = Registry("numbers", key="name")
    names.register("a")(1)
    names.register("b")(2)
    names.register("a")(3)
    assert dict(names) == {"a": 3, "b": 2} and list(names) == ["a", "b"]
    names.unregister("a", "not-there")
    assert "a" not in names and list(names) == ["b"]
    with pytest.raises(ConfigError, match="name='a' is not known"):
        names.origin("a")


def test_key_of_and_make_register_a_class_once_under_its_own_name() -> None:
    made: list[type] = []

    def one_instance(cls: type) -> object:
        made.append(cls)
        return cls()

    things: Registry[str, object] = Registry("things", key="thing",
                                            key_of=lambda cls: cls.name, make=one_instance)

    @things.register()
    class Thing:
        name = "thing-1"

    assert isinstance(things["thing-1"], Thing) and made == [Thing]
    both: Registry[str, object] = Registry("things", key="thing", make=one_instance)
    both.register("x", "y")(Thing)
    assert both["x"] is both["y"]  # one stored object for all the keys of a registration
    with pytest.raises(TypeError, match="needs at least one thing"):
        both.register()


def test_a_layer_type_must_be_a_frozen_dataclass_of_layer_named_first() -> None:
    from dataclasses import dataclass

    from dpcore.layers import LAYER_TYPES, Layer

    @dataclass  # not frozen
    class Loose(Layer):
        name: str

    @dataclass(frozen=True)
    class Unnamed(Layer):
        size: int
        name: str

    for cls in (Loose, Unnamed, int):
        with pytest.raises(TypeError, match="is not a layer type; valid: a frozen dataclass"):
            LAYER_TYPES.register()(cls)
        assert getattr(cls, "__name__", "") not in LAYER_TYPES
