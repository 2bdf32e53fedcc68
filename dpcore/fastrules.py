"""What the two fast DP engines (:mod:`tfpipe.fast`, :mod:`torchpipe.fast`) share:
Book-Keeping's per-layer cost rule. Framework-neutral.

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

Each backend files its rules in its own :class:`dpcore.registry.Registry`, keyed by the exact
framework class a rule handles (``@FAST_RULES.register(nn.Conv2d)``; one rule may handle
several classes).

**Routes.** A layer's norm can be computed by one of several *routes* (:data:`ROUTES`), each
exact (the same per-example norms and clipped sum up to float rounding, in a different order
of float sums):

* ``ghost``: the ghost norm from the two Gram matrices (L2 only);
* ``per_example``: the per-example weight gradients from the layer's own weight-gradient op
  run once with the examples as groups (a grouped convolution of groups = n: no unfolded
  input is materialised), kept for the clipped sum;
* ``unfold``: the per-example weight gradients from an explicit unfold of the layer input
  ([n, T, p] patches) and one batched matrix product, kept for the clipped sum.

Book-Keeping's rule gives each layer its *default* route (:func:`default_route`), the route
the engines take unless told otherwise; with ``perf.route_choice: measure`` they time the
applicable routes on the layer's real input at warm-up and keep the fastest
(:mod:`dpcore.fastroutes`). :func:`route_macs` is the arithmetic of each route, used to leave
out of the timing a route that is modelled to be many times slower than the best.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: The cost rule's name as recorded in a run's ``perf`` entry.
COST_RULE = "Book-Keeping (Bu et al. 2023): ghost norm where 2 T^2 < p d, else per-example"

GHOST = "ghost"
PER_EXAMPLE = "per_example"
UNFOLD = "unfold"
#: Every route a layer's norm may take, with what it computes.
ROUTES: dict[str, str] = {
    GHOST: "ghost norm from the two T x T Gram matrices (L2); clipped sum by the layer's "
           "weight-gradient op of c g",
    PER_EXAMPLE: "per-example gradients by the layer's weight-gradient op with the examples "
                 "as groups (no unfolded input); clipped sum from them",
    UNFOLD: "per-example gradients by an explicit unfold [n, T, p] of the input and one "
            "batched matrix product; clipped sum from them",
}


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


def default_route(positions: int, fan_in: int, fan_out: int, kind: str,
                  available: Sequence[str]) -> str:
    """Book-Keeping's route for a layer among the routes its rule implements (``available``,
    in the rule's order of preference): ``ghost`` where :func:`use_ghost_norm` picks it and
    the rule has it, else the first of ``available`` that is not ``ghost``; a layer whose
    only route is ``ghost`` (an embedding, a dense layer on vectors: exact in closed form)
    takes it whatever the rule says.
    """
    if GHOST in available and use_ghost_norm(positions, fan_in, fan_out, kind):
        return GHOST
    others = [r for r in available if r != GHOST]
    return others[0] if others else available[0]


def route_macs(route: str, positions: int, fan_in: int, fan_out: int) -> int:
    """Multiply-adds per example of a route's norm *and* clipped sum for a p x d weight
    shared by T positions (the plain step's weight gradient is ``T p d``).

    ``ghost``: two Gram matrices ``T^2 (p + d)``, their product-sum ``T^2``, then the
    weight-gradient op of ``c g`` (``T p d``); ``per_example`` and ``unfold``: the
    per-example gradient ``T p d``, its norm ``p d`` and the clip-weighted contraction ``p d``
    (``unfold`` moves more bytes, not more multiply-adds).
    """
    t, p, d = positions, fan_in, fan_out
    if route == GHOST:
        return t * t * (p + d) + t * t + t * p * d
    if route in (PER_EXAMPLE, UNFOLD):
        return t * p * d + 2 * p * d
    raise ValueError(f"route {route!r} is not known; valid: {', '.join(ROUTES)}")


class RouteRule:
    """What a backend's per-layer rule (``tfpipe.fast.FastRule``, ``torchpipe.fast.FastRule``)
    says of its routes, framework-neutrally: :attr:`ROUTES` the routes it implements (its
    order of preference: the first that is not ``ghost`` is its per-example default),
    :meth:`dims` BK's ``(T, p, d)`` of a layer (the backend's), :meth:`routes` those valid for
    a norm kind and :meth:`default_route` Book-Keeping's pick among them.
    """

    ROUTES: tuple[str, ...] = (PER_EXAMPLE,)
    #: True where the ghost form is exact for L1 norms too (an outer product, an embedding).
    GHOST_FOR_L1 = False

    def dims(self, layer: Any, a: Any, g: Any) -> tuple[int, int, int] | None:
        """``(T, p, d)`` of BK's cost rule (positions, weight inputs and outputs per
        position), or None for a layer without a p x d weight."""
        return None

    def routes(self, layer: Any, a: Any, kind: str) -> tuple[str, ...]:
        """The routes of ``layer`` on input ``a`` for ``kind`` norms (an L1 norm has no
        ghost form, except where :attr:`GHOST_FOR_L1`)."""
        if kind == "l2" or self.GHOST_FOR_L1:
            return self.ROUTES
        return tuple(r for r in self.ROUTES if r != GHOST) or self.ROUTES

    def default_route(self, layer: Any, a: Any, g: Any, kind: str) -> str:
        """Book-Keeping's route of ``layer`` on this chunk (:func:`default_route`)."""
        dims = self.dims(layer, a, g)
        available = self.routes(layer, a, kind)
        return available[0] if dims is None else default_route(*dims, kind, available)
