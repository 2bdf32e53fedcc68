"""Per-layer cost of the fast DP step: which layer's per-example norm and clipped sum cost
what, beside what the plain step pays for the same layer's weight gradient.

For one chunk of a case (random data of its shape), the fast engine's single forward and
backward pass is run once (:func:`tfpipe.fast.record_layers` / :func:`torchpipe.fast.
record_layers`); then, per trainable layer, three ops are timed on its kept input ``a`` and
output gradient ``g`` (best of :data:`REPEATS` runs, after one untimed run; TF ops are each
wrapped in a ``tf.function`` so that they run as graphs, as in training):

* ``norm``: the rule's per-example norm (ghost norm or per-example gradients, as Book-Keeping's
  rule picks: the ``route`` column, with the rule's T, p and d);
* ``sum``: the clip-weighted sum (from the kept per-example gradients, or one weight-gradient
  op of ``c g``);
* ``plain``: the layer's weight-gradient op of ``g`` (what the plain backward computes for this
  layer's weights; empty for a layer whose rule has none, e.g. GroupNorm).

``extra = norm + sum - plain`` is roughly what DP adds for the layer (the clip factors, the
noise and the rest of the pass are not per layer). Torch runs in channels-last memory format
(torch at its best, as the ``torch_dp_fast_cl`` tier). Times are wall clock on a shared
machine: a reading of where the DP step's cost lies, not a target.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from benchmarks.variants import CHUNK, ModelCase
from dpcore.config import ModelSpec

#: Timed runs per op (the best is kept).
REPEATS = 3


def _best_ms(run: Callable[[], Any], repeats: int = REPEATS) -> float:
    """Milliseconds of the fastest of ``repeats`` calls (after one untimed call)."""
    run()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return 1000.0 * best


def _inputs(case: ModelCase, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Random model inputs of the case's shape (float images in [0, 1], or token ids)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, case.n_classes, n).astype(np.int64)
    if case.vocab_size is not None:
        return rng.integers(0, case.vocab_size, (n, *case.shape)).astype(np.int64), y
    return rng.uniform(size=(n, *case.shape)).astype(np.float32), y


def _row(name: str, layer: Any, dims: tuple[int, int, int] | None, ghost: bool,
         norm: float, summed: float, plain: float | None) -> dict[str, Any]:
    t, p, d = dims if dims is not None else (None, None, None)
    return {"layer": name, "type": type(layer).__name__, "T": t, "p": p, "d": d,
            "route": "ghost norm" if ghost else "per-example", "norm_ms": norm,
            "sum_ms": summed, "plain_ms": plain,
            "extra_ms": norm + summed - (plain or 0.0)}


def torch_layer_costs(case: ModelCase, chunk: int = CHUNK) -> list[dict[str, Any]]:
    """One row per trainable torch module (channels-last memory format), forward order."""
    import torch

    from torchpipe.fast import FAST_RULES, record_layers
    from torchpipe.models import build_model
    from torchpipe.predict import to_tensor

    model = build_model(ModelSpec(name=case.model), case.shape, case.n_classes, seed=0,
                        vocab_size=case.vocab_size)
    model.to(memory_format=torch.channels_last).train()
    xs, ys = _inputs(case, min(chunk, case.batch_size))
    x = to_tensor(xs, case.vocab_size is not None, memory_format=torch.channels_last)
    _, records = record_layers(model, x, torch.from_numpy(ys))
    names = {id(m): n for n, m in model.named_modules()}
    rows = []
    with torch.no_grad():
        for module, a, g in records:
            rule = FAST_RULES.get(type(module))
            norms = rule.norms(module, a, g, "l2")
            factors = torch.full((len(a),), 0.5)
            plain = None
            try:
                rule.weight_gradients(module, a, g)
                plain = _best_ms(partial(rule.weight_gradients, module, a, g))
            except NotImplementedError:
                pass
            rows.append(_row(
                names[id(module)], module, rule.dims(module, a, g), norms.kept is None,
                _best_ms(partial(rule.norms, module, a, g, "l2")),
                _best_ms(partial(rule.weighted_sum, module, a, g, factors, norms.kept)),
                plain))
    return rows


def tf_layer_costs(case: ModelCase, chunk: int = CHUNK) -> list[dict[str, Any]]:
    """One row per TF layer with trainable weights (NHWC), forward order; each op timed as
    a ``tf.function`` graph."""
    import tensorflow as tf

    from tfpipe.fast import FAST_RULES, record_layers
    from tfpipe.models import build_model

    model = build_model(ModelSpec(name=case.model), case.shape, case.n_classes, seed=0,
                        vocab_size=case.vocab_size)
    xs, ys = _inputs(case, min(chunk, case.batch_size))
    _, records = record_layers(model, tf.constant(xs), tf.constant(ys))
    rows = []
    for layer, a, g in records:
        rule = FAST_RULES.get(type(layer))
        norms = rule.norms(layer, a, g, "l2")
        factors = tf.fill([a.shape[0]], 0.5)

        def graph(body: Callable[[], Any]) -> Callable[[], Any]:
            compiled = tf.function(body)
            return lambda: [t.numpy() for t in tf.nest.flatten(compiled())]

        norm_op = graph(lambda r=rule, la=layer, a=a, g=g: r.norms(la, a, g, "l2").sums)
        sum_op = graph(lambda r=rule, la=layer, a=a, g=g, k=norms.kept, c=factors: [
            t for _, t in r.weighted_sum(la, a, g, c, k)])
        plain = None
        try:
            rule.weight_gradients(layer, a, g)
            plain = _best_ms(graph(lambda r=rule, la=layer, a=a, g=g: [
                t for _, t in r.weight_gradients(la, a, g)]))
        except NotImplementedError:
            pass
        rows.append(_row(layer.name, layer, rule.dims(layer, a, g), norms.kept is None,
                         _best_ms(norm_op), _best_ms(sum_op), plain))
    return rows


#: The per-layer tables of a case by framework view, and the tier each explains.
LAYER_TABLES: dict[str, tuple[str, Callable[[ModelCase, int], list[dict[str, Any]]]]] = {
    "tf": ("tf_dp_fast", tf_layer_costs),
    "torch_cl": ("torch_dp_fast_cl", torch_layer_costs),
}


def layer_costs(case: ModelCase, tiers: tuple[str, ...]) -> dict[str, Any]:
    """Every per-layer table of :data:`LAYER_TABLES` whose tier the case runs; a table that
    fails records why instead (the benchmark goes on)."""
    out: dict[str, Any] = {}
    for key, (tier, build) in LAYER_TABLES.items():
        if tier not in tiers:
            continue
        try:
            out[key] = build(case, CHUNK)
        except Exception as exc:  # noqa: BLE001 - recorded, the benchmark goes on
            out[key] = {"skipped": f"failed: {type(exc).__name__}: {exc}"[:300]}
    return out
