"""Per-layer-type rules looked up by the type of a framework-neutral layer description.

Each job done on a layer of :mod:`dpcore.layers` (its shape rule and weight shapes in
:mod:`dpcore.architectures`, its Keras layer in ``tfpipe.models``, its torch modules in
``torchpipe.models``) is one function per layer type, registered with a decorator, as Opacus
registers its grad samplers (``@register_grad_sampler(nn.Linear)``)::

    @register_layer_builder(Conv2D)
    def _conv2d(layer: Conv2D, x: tf.Tensor, ctx: KerasContext) -> tf.Tensor: ...

so a new layer type is one dataclass and one function per job, never a branch in a chain.
This module is pure Python (no framework): both backends share it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from dpcore.errors import ConfigError

Rule = TypeVar("Rule", bound=Callable[..., Any])


class LayerRegistry(Generic[Rule]):
    """Layer description type -> the rule doing one job on layers of that type.

    A registration may declare that the backend's fast DP engine has no per-example rule for
    the module it builds (``fast_fallback``: why); runs of a model with such a layer then use
    the reference engine (:func:`dpcore.backend.choose_engine`). Lookups are by exact type.
    """

    def __init__(self, job: str) -> None:
        """``job`` names the rules in error messages, e.g. ``"Keras builder"``."""
        self.job = job
        self._rules: dict[type, Rule] = {}
        self._fast_fallbacks: dict[type, str] = {}

    def register(self, *layer_types: type, fast_fallback: str | None = None
                 ) -> Callable[[Rule], Rule]:
        """Decorator registering the decorated function for ``layer_types`` (a later
        registration of a type replaces the earlier one, as Opacus's does)."""
        if not layer_types:
            raise TypeError("register() needs at least one layer type")

        def decorate(rule: Rule) -> Rule:
            for layer_type in layer_types:
                self._rules[layer_type] = rule
                if fast_fallback is None:
                    self._fast_fallbacks.pop(layer_type, None)
                else:
                    self._fast_fallbacks[layer_type] = fast_fallback
            return rule

        return decorate

    def unregister(self, layer_type: type) -> None:
        """Forget ``layer_type``'s rule (a no-op if it has none); for tests' toy layers."""
        self._rules.pop(layer_type, None)
        self._fast_fallbacks.pop(layer_type, None)

    def __contains__(self, layer_type: object) -> bool:
        return layer_type in self._rules

    def __getitem__(self, layer_type: type) -> Rule:
        """The rule of ``layer_type``.

        Raises:
            ConfigError: no rule is registered for it (one line naming the registered types).
        """
        try:
            return self._rules[layer_type]
        except KeyError:
            known = ", ".join(sorted(t.__name__ for t in self._rules))
            raise ConfigError(f"layer type {layer_type.__name__} has no {self.job}; "
                              f"valid: {known}") from None

    def get(self, layer_type: type) -> Rule | None:
        """The rule of ``layer_type``, or None."""
        return self._rules.get(layer_type)

    def types(self) -> frozenset[type]:
        """Every layer type with a registered rule."""
        return frozenset(self._rules)

    def fast_fallback(self, layer_type: type) -> str | None:
        """Why the fast DP engine falls back for ``layer_type`` (None: it has a rule)."""
        return self._fast_fallbacks.get(layer_type)


__all__ = ["LayerRegistry"]
