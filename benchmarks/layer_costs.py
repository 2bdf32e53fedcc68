"""Per-layer cost of the fast DP step: which route each layer takes, what every candidate route
cost, and the layer's norm and clipped sum beside what the plain step pays for its weight
gradient, measured and modelled.

For one chunk of a case (random data of its shape), the fast engine's single forward and
backward pass is run once (:func:`tfpipe.fast.record_layers` / :func:`torchpipe.fast.
record_layers`); then, per trainable layer:

* the routes are chosen as the engine chooses them (:class:`dpcore.fastroutes.RouteBook`:
  each candidate route's norm and clipped sum timed on the layer's real input and output
  gradient, the fastest kept if it beats Book-Keeping's default by the margin): ``route``,
  ``default_route`` and every timed candidate's milliseconds (``routes_ms``);
* three ops are timed on the chosen route (best of :data:`REPEATS` runs, after one untimed
  run; TF ops each as a ``tf.function`` graph, as in training): ``norm`` (the per-example
  norm), ``sum`` (the clip-weighted sum), ``plain`` (the layer's weight-gradient op of ``g``:
  what the plain backward computes for its weights; empty for a layer whose rule has none,
  e.g. GroupNorm); ``extra = norm + sum - plain`` is roughly what DP adds for the layer;
* the cost model (:mod:`benchmarks.costmodel`, with this CPU's roofline): multiply-adds,
  bytes and roofline milliseconds of the plain weight gradient and of the chosen route, which
  side of the roofline bounds each, and the layer's modelled share of the plain and the DP
  step (forward, input gradient and weight gradient or route) for the case's modelled ratio.

Torch runs in channels-last memory format (torch at its best, as the ``torch_dp_fast_cl``
tier). Times are wall clock on a shared machine: a reading of where the DP step's cost lies.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from benchmarks import costmodel
from benchmarks.roofline import fastest
from benchmarks.variants import CHUNK, ModelCase
from dpcore.config import ModelSpec
from dpcore.fastroutes import LayerRoutes, RouteBook, TimingPolicy

#: Timed runs per op (the best is kept).
REPEATS = 3
#: Layer types without a p x d product, by their cost-model kind.
KINDS = {"Embedding": "embedding", "GroupNorm": "norm", "LayerNorm": "norm",
         "GroupNormalization": "norm", "LayerNormalization": "norm"}


def _best_ms(run: Callable[[], Any], repeats: int = REPEATS) -> float:
    """Milliseconds of the fastest of ``repeats`` calls (after one untimed call)."""
    return 1000.0 * fastest(run, repeats)


def _inputs(case: ModelCase, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Random model inputs of the case's shape (float images in [0, 1], or token ids)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, case.n_classes, n).astype(np.int64)
    if case.vocab_size is not None:
        return rng.integers(0, case.vocab_size, (n, *case.shape)).astype(np.int64), y
    return rng.uniform(size=(n, *case.shape)).astype(np.float32), y


@dataclass(frozen=True)
class LayerProbe:
    """One recorded layer as a framework presents it: its routes (for the route book), its
    type, its cost-model shape, and thunks of its norm, its clipped sum (by route) and its
    plain weight-gradient op (None: the rule has none)."""

    routes: LayerRoutes
    type: str
    shape: costmodel.LayerShape
    norm: Callable[[str], Callable[[], Any]]
    summed: Callable[[str], Callable[[], Any]]
    plain: Callable[[], Any] | None


def model_shape(type_name: str, n: int, dims: tuple[int, int, int] | None, a_in: int,
                channels: int, first: bool) -> costmodel.LayerShape:
    """The cost model's view of a layer: its kind by type; BK's (T, p, d) where it has a
    p x d weight; a normalisation layer as T = a_in / C positions of its C channels (p 1,
    d C: per-example gradients of C entries)."""
    kind = KINDS.get(type_name, "product")
    if dims is None:
        return costmodel.LayerShape(kind, n, max(1, a_in // channels), 1, channels, a_in,
                                    first)
    t, p, d = dims
    return costmodel.LayerShape(kind, n, t, p, d, a_in, first)


def _rows(probes: Sequence[LayerProbe], n: int, roofline: dict[str, Any] | None
          ) -> list[dict[str, Any]]:
    """The table's rows: routes chosen by a route book, the chosen route's ops timed, the
    cost model beside them."""
    book = RouteBook(policy=TimingPolicy(budget_seconds=math.inf))  # every layer timed
    chosen = book.settle(n, lambda: [p.routes for p in probes])
    timings = book.timings_ms.get(str(n), {})
    rows = []
    for probe in probes:
        name = probe.routes.name
        route = chosen[name]
        plain = None if probe.plain is None else _best_ms(probe.plain)
        norm_ms, sum_ms = _best_ms(probe.norm(route)), _best_ms(probe.summed(route))
        t, p, d = probe.routes.dims if probe.routes.dims is not None else (None, None, None)
        row = {"layer": name, "type": probe.type, "T": t, "p": p, "d": d, "route": route,
               "default_route": probe.routes.default, "routes_ms": timings.get(name, {}),
               "norm_ms": norm_ms, "sum_ms": sum_ms, "plain_ms": plain,
               "extra_ms": norm_ms + sum_ms - (plain or 0.0)}
        row["model"] = _modelled(probe.shape, route, roofline)
        if row["model"].get("route_ms"):
            row["measured_over_model"] = (norm_ms + sum_ms) / row["model"]["route_ms"]
        rows.append(row)
    return rows


def _modelled(shape: costmodel.LayerShape, route: str, roofline: dict[str, Any] | None
              ) -> dict[str, Any]:
    """Multiply-adds, bytes, and (with a roofline) ms and bound of the plain weight
    gradient and the chosen route, and of the layer's whole plain and DP step shares."""
    plain, dp_route = costmodel.weight_gradient(shape), costmodel.route(shape, route)
    out: dict[str, Any] = {"plain_macs": plain.macs, "plain_bytes": plain.bytes,
                           "route_macs": dp_route.macs, "route_bytes": dp_route.bytes}
    if roofline:
        peak, bandwidth = roofline["peak_flops"], roofline["bandwidth_bytes_per_s"]
        out.update(
            plain_ms=1000 * plain.seconds(peak, bandwidth),
            route_ms=1000 * dp_route.seconds(peak, bandwidth),
            plain_bound=plain.bound(peak, bandwidth), route_bound=dp_route.bound(peak, bandwidth),
            plain_step_ms=1000 * costmodel.plain_step(shape).seconds(peak, bandwidth),
            dp_step_ms=1000 * costmodel.dp_step(shape, route).seconds(peak, bandwidth))
    return out


def torch_probes(case: ModelCase, chunk: int = CHUNK) -> tuple[list[LayerProbe], int]:
    """The recorded torch modules (channels-last memory format), forward order."""
    import torch

    from torchpipe.fast import FAST_RULES, layer_routes, module_names, record_layers
    from torchpipe.models import build_model
    from torchpipe.predict import to_tensor

    model = build_model(ModelSpec(name=case.model), case.shape, case.n_classes, seed=0,
                        vocab_size=case.vocab_size)
    model.to(memory_format=torch.channels_last).train()
    xs, ys = _inputs(case, min(chunk, case.batch_size))
    x = to_tensor(xs, case.vocab_size is not None, memory_format=torch.channels_last)
    _, records = record_layers(model, x, torch.from_numpy(ys))
    routes = layer_routes(records, module_names(model), "l2", None)
    factors = torch.full((len(xs),), 0.5)
    probes = []
    for i, ((module, a, g), layer) in enumerate(zip(records, routes, strict=True)):
        rule = FAST_RULES.get(type(module))

        def norm(route: str, rule: Any = rule, m: Any = module, a: Any = a, g: Any = g
                 ) -> Callable[[], Any]:
            return partial(_no_grad, lambda: rule.norms(m, a, g, "l2", route))

        def summed(route: str, rule: Any = rule, m: Any = module, a: Any = a, g: Any = g
                   ) -> Callable[[], Any]:
            kept = _no_grad(lambda: rule.norms(m, a, g, "l2", route)).kept
            return partial(_no_grad, lambda: rule.weighted_sum(m, a, g, factors, kept))

        plain: Callable[[], Any] | None = partial(_no_grad, partial(
            rule.weight_gradients, module, a, g))
        try:
            plain()
        except NotImplementedError:
            plain = None
        probes.append(LayerProbe(layer, type(module).__name__, model_shape(
            type(module).__name__, len(xs), layer.dims, a[0].numel(), g.shape[1], i == 0),
            norm, summed, plain))
    return probes, len(xs)


def _no_grad(run: Callable[[], Any]) -> Any:
    import torch

    with torch.no_grad():
        return run()


def tf_probes(case: ModelCase, chunk: int = CHUNK) -> tuple[list[LayerProbe], int]:
    """The recorded TF layers with trainable weights (NHWC), forward order; each op a
    ``tf.function`` graph."""
    import tensorflow as tf

    from tfpipe.fast import FAST_RULES, layer_routes, record_layers
    from tfpipe.models import build_model

    model = build_model(ModelSpec(name=case.model), case.shape, case.n_classes, seed=0,
                        vocab_size=case.vocab_size)
    xs, ys = _inputs(case, min(chunk, case.batch_size))
    x, y = tf.constant(xs), tf.constant(ys)
    _, records = record_layers(model, x, y)
    routes = layer_routes(model, x, y, "l2")
    factors = tf.fill([len(xs)], 0.5)

    def graph(body: Callable[[], Any]) -> Callable[[], Any]:
        compiled = tf.function(body)
        return lambda: [t.numpy() for t in tf.nest.flatten(compiled())]

    probes = []
    for i, ((layer, a, g), routed) in enumerate(zip(records, routes, strict=True)):
        rule = FAST_RULES.get(type(layer))

        def norm(route: str, rule: Any = rule, la: Any = layer, a: Any = a, g: Any = g
                 ) -> Callable[[], Any]:
            return graph(lambda: rule.norms(la, a, g, "l2", route).sums)

        def summed(route: str, rule: Any = rule, la: Any = layer, a: Any = a, g: Any = g
                   ) -> Callable[[], Any]:
            kept = rule.norms(la, a, g, "l2", route).kept
            return graph(lambda: [t for _, t in rule.weighted_sum(la, a, g, factors, kept)])

        plain: Callable[[], Any] | None = graph(
            lambda rule=rule, la=layer, a=a, g=g: [t for _, t in rule.weight_gradients(la, a, g)])
        try:
            rule.weight_gradients(layer, a, g)
        except NotImplementedError:
            plain = None
        probes.append(LayerProbe(routed, type(layer).__name__, model_shape(
            type(layer).__name__, len(xs), routed.dims, int(np.prod(a.shape[1:])),
            int(g.shape[-1]), i == 0), norm, summed, plain))
    return probes, len(xs)


#: The per-layer tables of a case by framework view, and the tier each explains.
LAYER_TABLES: dict[str, tuple[str, Callable[[ModelCase, int], tuple[list[LayerProbe], int]]]] \
    = {"tf": ("tf_dp_fast", tf_probes), "torch_cl": ("torch_dp_fast_cl", torch_probes)}


def layer_tables(tiers: tuple[str, ...]) -> list[str]:
    """The keys of :data:`LAYER_TABLES` whose tier is among ``tiers``."""
    return [key for key, (tier, _) in LAYER_TABLES.items() if tier in tiers]


def layer_costs(case: ModelCase, tiers: tuple[str, ...],
                roofline: dict[str, Any] | None = None, only: str | None = None
                ) -> dict[str, Any]:
    """Every per-layer table of :data:`LAYER_TABLES` whose tier the case runs (``only``: that
    table alone); a table that fails records why instead (the benchmark goes on)."""
    out: dict[str, Any] = {}
    for key in layer_tables(tiers):
        if only is not None and key != only:
            continue
        probe = LAYER_TABLES[key][1]
        try:
            probes, n = probe(case, CHUNK)
            out[key] = _rows(probes, n, roofline)
        except Exception as exc:  # noqa: BLE001 - recorded, the benchmark goes on
            out[key] = {"skipped": f"failed: {type(exc).__name__}: {exc}"[:300]}
    return out
