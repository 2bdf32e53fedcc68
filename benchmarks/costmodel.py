"""A cost model of the plain and the DP step per layer: multiply-adds and bytes moved, from the
layer's shapes alone (pure arithmetic), and a roofline time from a CPU's peak FLOP/s and memory
bandwidth (:mod:`benchmarks.roofline` measures them).

One trainable layer of a chunk of ``n`` examples is described by :class:`LayerShape`: ``T``
positions sharing a ``p x d`` weight (a convolution's output pixels, its patch size
``p = k_h k_w C_in`` and ``d = C_out``; a dense layer on vectors has ``T = 1``), the input
elements per example ``a_in`` (before any unfold), and whether it is the model's first layer
(no input gradient). What each step does with it:

* **plain**: forward ``z = a W`` (``n T p d`` multiply-adds), input gradient (the same, except
  the first layer) and weight gradient (the same): one large product each (K = p, d or n T);
* **DP** (the fast engines, Book-Keeping): the same forward and input gradient, no weight
  gradient in the backward pass, then the layer's route (:data:`dpcore.fastrules.ROUTES`):
  ``ghost`` two Gram matrices per example (``n T^2 (p + d)``), their product-sum, and the
  weight gradient of ``c g`` for the clipped sum; ``per_example`` / ``unfold`` the per-example
  gradients ``n T p d`` in n products of K = T, their norms and the clip-weighted
  contraction (``2 n p d``).

Bytes count each tensor a step reads or writes once per op (float32): inputs and outputs of
the products, an unfold's patches (written, then read), the Gram matrices, per-example
gradients (written, read by the norm, read by the contraction), and the layout copies of the
``per_example`` route's grouped convolution (``a`` and ``g`` rewritten once each). Caches are
ignored (every op streams its operands from memory once): an upper bound on traffic for small
layers, a fair one for layers larger than the cache. Embeddings and normalisation layers have
no p x d product: they are memory-bound in both steps and modelled by their bytes only. What
the model leaves out: activations, pooling, the loss and the optimizer (the same in both
steps), and the efficiency of small products (n products of K = T run well below the peak
FLOP/s that one product of K = n T reaches: that is what measured / modelled shows).
"""

from __future__ import annotations

from dataclasses import dataclass

from dpcore.fastrules import GHOST, PER_EXAMPLE, UNFOLD

#: Bytes of one float32.
FLOAT = 4


@dataclass(frozen=True)
class Cost:
    """Multiply-adds and bytes moved of one piece of work."""

    macs: float = 0.0
    bytes: float = 0.0

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.macs + other.macs, self.bytes + other.bytes)

    def seconds(self, peak_flops: float, bandwidth: float) -> float:
        """Roofline time: the larger of ``2 macs / peak_flops`` and ``bytes / bandwidth``
        (FLOP/s and bytes/s)."""
        return max(2.0 * self.macs / peak_flops, self.bytes / bandwidth)

    def bound(self, peak_flops: float, bandwidth: float) -> str:
        """``arithmetic`` or ``memory``: which side of the roofline limits it."""
        return "arithmetic" if 2.0 * self.macs / peak_flops >= self.bytes / bandwidth \
            else "memory"


@dataclass(frozen=True)
class LayerShape:
    """One trainable layer on a chunk.

    Attributes:
        kind: ``product`` (a p x d weight: convolution, dense), ``embedding`` or ``norm``.
        n: examples in the chunk.
        t: positions per example sharing the weight (T).
        p: weight inputs per position (a convolution's k_h k_w C_in; a norm's channels).
        d: weight outputs per position (C_out; an embedding's width).
        a_in: input elements per example (before any unfold).
        first: the model's first trainable layer (its input gradient is not computed).
    """

    kind: str
    n: int
    t: int
    p: int
    d: int
    a_in: int
    first: bool = False


def forward(s: LayerShape) -> Cost:
    """The forward pass of the layer (both steps)."""
    if s.kind != "product":
        return Cost(0.0, FLOAT * s.n * (s.a_in + s.t * s.d))
    return Cost(s.n * s.t * s.p * s.d, FLOAT * (s.n * s.a_in + s.n * s.t * s.d + s.p * s.d))


def input_gradient(s: LayerShape) -> Cost:
    """The input gradient (both steps; none for the first layer)."""
    if s.first:
        return Cost()
    return forward(s)


def weight_gradient(s: LayerShape) -> Cost:
    """The summed weight gradient of the plain step: one product of K = n T (a product
    layer), or a pass over ``a`` and ``g`` (the others)."""
    if s.kind != "product":
        return Cost(0.0, FLOAT * (s.n * s.a_in + s.n * s.t * s.d + s.p * s.d))
    return Cost(s.n * s.t * s.p * s.d,
                FLOAT * (s.n * s.a_in + s.n * s.t * s.d + s.p * s.d))


def route(s: LayerShape, name: str) -> Cost:
    """The DP step's per-example norm and clipped sum of the layer by route ``name``."""
    g = FLOAT * s.n * s.t * s.d
    a = FLOAT * s.n * s.a_in
    per_example = FLOAT * s.n * s.p * s.d
    if s.kind == "embedding":  # distinct (example, token) rows summed; one index_add
        return Cost(0.0, 3 * g + FLOAT * s.n * s.t * 2 + FLOAT * s.p * s.d)
    if s.kind == "norm":  # per-example [n, C] gradients: a few passes over a and g
        return Cost(0.0, 2 * a + 2 * g + 3 * per_example)
    if name == GHOST:
        if s.t == 1:  # a vector per example: ||a g^T||^2 = ||a||^2 ||g||^2
            return Cost(s.n * (s.p + s.d), a + g) + weight_gradient(s)
        patches = FLOAT * s.n * s.t * s.p
        grams = FLOAT * s.n * s.t * s.t
        norm = Cost(s.n * (s.t * s.t * (s.p + s.d) + s.t * s.t),
                    a + 2 * patches + 2 * g + 4 * grams)
        return norm + weight_gradient(s)
    if name in (PER_EXAMPLE, UNFOLD):
        macs = s.n * (s.t * s.p * s.d + 2 * s.p * s.d)
        reads = 2 * (a + g) if name == PER_EXAMPLE else \
            a + 2 * FLOAT * s.n * s.t * s.p + g
        return Cost(macs, reads + 3 * per_example)
    raise ValueError(f"route {name!r} is not known; valid: {GHOST}, {PER_EXAMPLE}, {UNFOLD}")


def plain_step(s: LayerShape) -> Cost:
    """The layer's share of the plain step: forward, input and weight gradients."""
    return forward(s) + input_gradient(s) + weight_gradient(s)


def dp_step(s: LayerShape, name: str) -> Cost:
    """The layer's share of the DP step by route ``name``: forward, input gradient, route."""
    return forward(s) + input_gradient(s) + route(s, name)
