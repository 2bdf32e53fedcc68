"""What the two fast DP engines (:mod:`tfpipe.fast`, :mod:`torchpipe.fast`) share: the
registry of per-layer rules and Book-Keeping's per-layer cost rule. Framework-neutral.

**Book-Keeping clipping** (Bu, Wang, Zha, Karypis, "Differentially private optimization on
large model at small cost", ICML 2023; the ``fastDP`` code): one forward and one backward
pass keep each trainable layer's input ``a`` [n, T, p] and output gradient ``g`` [n, T, d]
(T positions, p inputs and d outputs per position of a p x d weight; a convolution's ``a``
are its unfolded patches). From them, per layer,

* the per-example squared norm of the weight gradient ``a_i^T g_i``, either as the *ghost
  norm* ``sum_{t,t'} (a_i a_i^T)_{tt'} (g_i g_i^T)_{tt'}`` (two T x T Gram matrices per
  example: space 2 T^2) or from the *per-example gradient* ``a_i^T g_i`` itself (space p d);
  :func:`use_ghost_norm` takes the ghost norm exactly when ``2 T^2 < p d``, Book-Keeping's
  hybrid rule (it compares what each holds per example: two T x T Gram matrices or one
  p x d gradient). L1 norms have no ghost form and always take the per-example gradient;
* the clipped sum ``sum_i c_i a_i^T g_i``: from the kept per-example gradients where they
  were made (one contraction with the clip factors ``c``: n p d products, fewer than the
  weight-gradient op's n T p d), else as one weight-gradient op of
  the layer with output gradient ``c * g`` (``a^T (c g)``). Neither is a second backward
  pass: no gradient flows through any other layer again, only the layer's own weight
  gradient is formed from the kept ``a`` and ``g`` (the op the plain backward runs for it).

A layer type's rule is one class per backend registered with its registry's decorator
(``@register_fast_rule(nn.Conv2d)``); :class:`RuleRegistry` looks rules up by exact type.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

R = TypeVar("R")

#: The cost rule's name as recorded in a run's ``perf`` entry.
COST_RULE = "Book-Keeping (Bu et al. 2023): ghost norm where 2 T^2 < p d, else per-example"


def use_ghost_norm(positions: int, fan_in: int, fan_out: int, kind: str = "l2") -> bool:
    """Book-Keeping's per-layer choice: the ghost norm (True) or the per-example gradient.

    Args:
        positions: T, positions per example sharing the weight (output pixels of a
            convolution, tokens of a sequence; 1 for a dense layer on a vector).
        fan_in: p, the weight's inputs per position (a convolution's k_h k_w c_in).
        fan_out: d, the weight's outputs per position (output channels / units).
        kind: ``"l2"`` or ``"l1"``; an L1 norm has no ghost form (always False).

    Returns:
        ``2 T^2 < p d`` for L2 (Bu et al. 2023, ICML, Book-Keeping's hybrid rule).
    """
    return kind == "l2" and 2 * positions * positions < fan_in * fan_out


class RuleRegistry(Generic[R]):
    """One backend's fast rules by exact layer type (an Opacus-style registry).

    ``register(*types)`` is a class decorator that instantiates the rule class once and files
    it under each type; :meth:`get` returns None for an unregistered type (the engine then
    names the layer as unsupported).
    """

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self._rules: dict[type, R] = {}

    def register(self, *layer_types: type) -> Callable[[type[R]], type[R]]:
        """Class decorator: one instance of the decorated rule handles ``layer_types``."""
        def decorate(rule_class: type[R]) -> type[R]:
            rule = rule_class()
            for layer_type in layer_types:
                self._rules[layer_type] = rule
            return rule_class
        return decorate

    def get(self, layer_type: type) -> R | None:
        """The rule of exactly ``layer_type`` (no subclass lookup: a subclass may compute
        something else), or None."""
        return self._rules.get(layer_type)

    def __contains__(self, layer_type: object) -> bool:
        return layer_type in self._rules

    def __iter__(self) -> Iterator[type]:
        return iter(self._rules)

    def __len__(self) -> int:
        return len(self._rules)
