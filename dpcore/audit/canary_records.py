"""Gradient canaries as per-example records, so that a backend's own clipping processes them.

A gradient canary is one more "example" of a step: a per-example gradient vector that the
step engine appends to the real examples' per-example records *before* its clipping, so the
calls that clip, sum and noise the real examples do the same to it (a missing or wrong clip
then lets its 100-fold norm through). Two forms of one canary, both built here once for both
backends:

* its **gradient**: the per-example gradient vector itself, sparse in the neutral weight
  layout (:mod:`dpcore.weights`): what the reference engines (whose records are per-example
  gradients) and the library recipes append;
* its **layer route**: one row of the activations ``a`` (the layer's input) and one row of the
  output gradients ``g = dL/dz`` of the layer that owns the canary's coordinate (zeros in
  every other layer), which the fast engines append to that layer's ``(a, g)`` pair, so their
  per-layer ghost-norm and per-example routes compute the canary's norm and clipped sum. The
  gradient above is exactly what the layer's own gradient formula makes of that row:

  =============  ================================  ==========================================
  layer          row (``a``; ``g``)                gradient
  =============  ================================  ==========================================
  dense kernel   ``a[p] = 1``; ``g[d] = v``        kernel ``[p, d] = v``, bias ``[d] = v``
  conv kernel    one input pixel ``(y, x, c_in) =  kernel ``[i, j, c_in, c_out] = v``, bias
                 1`` seen at kernel offset (i, j)  ``[c_out] = v`` (one output position)
                 by output position (oy, ox);
                 ``g[oy, ox, c_out] = v``
  bias           ``a = 0``; ``g[.., d] = v``        bias ``[d] = v``
  embedding      token ``t`` at position 0;        embeddings ``[t, d] = v``
                 ``g[0, d] = v``
  groupnorm      input ``s`` at (position 0, c),   gamma ``[c] = h v``, beta ``[c] = v``, with
  gamma          ``s = G / sqrt(G - 1)`` (G: the   ``h = (s - s/G) / sqrt(1 + eps)``, the
                 group's size); ``g[0.., c] = v``  normalised input there
  groupnorm      ``a = 0``; ``g[0.., c] = v``       beta ``[c] = v``
  beta
  =============  ================================  ==========================================

  (a weight coordinate's row also touches its output unit's bias: the gradient says so, and
  its norm counts it). ``v`` is scaled so that the gradient's norm, in the step's clip norm
  (L2 or L1), is :data:`CANARY_NORM_MULTIPLE` C. Conv positions are in the neutral
  channels-last per-example layout of the *unpadded* layer input, with the TensorFlow
  ``same`` padding before it (``pad_before``): a backend whose recorded ``a`` is padded shifts
  by it.

A layer type without a route here (:data:`CANARY_ROUTES`) gets a gradient of one coordinate
and no layer route: the reference engines and the library recipes take it, a fast engine
refuses it (naming the layer).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from dpcore.architectures import Architecture, same_padding
from dpcore.errors import ConfigError
from dpcore.layers import Conv1D, Conv2D, Dense, Embedding, GroupNorm, Layer
from dpcore.registry import Registry

#: A gradient canary's norm in units of the clip norm C: well above C, so that clipping is
#: what bounds it (a step that forgets to clip lets it through 100-fold).
CANARY_NORM_MULTIPLE = 100.0

#: One sparse entry of a per-example row: (index in the per-example layout, value).
Entry = tuple[tuple[int, ...], float]


@dataclass(frozen=True)
class CanaryRecord:
    """One gradient canary as a per-example record (see the module docstring).

    Attributes:
        key, flat: the canary's own coordinate: neutral weight key and flat index in it.
        layer: the neutral name of the layer owning it.
        gradient: its per-example gradient, ``(neutral key, flat index, value)`` entries.
        activation, output_gradient: its layer route: the nonzero entries of its row of the
            layer's input and output gradient (per-example neutral layout; a token id as the
            value for an embedding), or None when the layer type has no route.
        pad_before: a convolution's TensorFlow ``same`` padding before each spatial axis
            (zeros for ``valid``); ``()`` for other layers.
    """

    key: str
    flat: int
    layer: str
    gradient: tuple[tuple[str, int, float], ...]
    activation: tuple[Entry, ...] | None
    output_gradient: tuple[Entry, ...] | None
    pad_before: tuple[int, ...] = ()

    def norm(self, kind: str) -> float:
        """The gradient's norm: ``"l2"`` or ``"l1"`` (flat over all its entries)."""
        values = np.array([v for _, _, v in self.gradient], np.float64)
        return float(np.sqrt((values ** 2).sum()) if kind == "l2" else np.abs(values).sum())

    def scaled(self, factor: float) -> CanaryRecord:
        """The same canary with its gradient and output-gradient row times ``factor`` (the
        gradient is linear in ``g``; the activation row stays)."""
        out = None if self.output_gradient is None else tuple(
            (i, v * factor) for i, v in self.output_gradient)
        return CanaryRecord(self.key, self.flat, self.layer,
                            tuple((k, f, v * factor) for k, f, v in self.gradient),
                            self.activation, out, self.pad_before)


@dataclass(frozen=True)
class LayerGeometry:
    """What a route needs of the layer owning a coordinate.

    Attributes:
        layer: the dpcore layer description.
        in_shape, out_shape: its per-example input and output shapes (channels last).
        shapes: its weights' neutral shapes, by parameter name (``kernel``, ``bias``...).
    """

    layer: Layer
    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    shapes: Mapping[str, tuple[int, ...]]


#: What a route makes of one coordinate: the gradient's entries ``(param, multi-index,
#: value)`` at output gradient 1, the activation row's entries, the output-gradient row's
#: entries, and the convolution's padding before each spatial axis (``()`` otherwise).
RouteResult = tuple[list[tuple[str, tuple[int, ...], float]], list[Entry], list[Entry],
                    tuple[int, ...]]

#: A route: (geometry, parameter, multi-index in it) -> its :data:`RouteResult`.
Route = Callable[[LayerGeometry, str, tuple[int, ...]], RouteResult]

#: dpcore layer type -> how a canary on one of its coordinates becomes an (a, g) row
#: (``@CANARY_ROUTES.register(LayerType)`` on a :data:`Route`).
CANARY_ROUTES: Registry[type, Route] = Registry("gradient canary layer routes",
                                                 key="layer type")


def _with_bias(geo: LayerGeometry, unit: int, kernel_entry: tuple[str, tuple[int, ...], float]
               ) -> list[tuple[str, tuple[int, ...], float]]:
    out = [kernel_entry]
    if "bias" in geo.shapes:
        out.append(("bias", (unit,), 1.0))
    return out


@CANARY_ROUTES.register(Dense)
def _dense_route(geo: LayerGeometry, param: str, index: tuple[int, ...]) -> RouteResult:
    """A dense kernel [p, d]: input p, output d; the bias [d]: output d alone."""
    if param == "bias":
        return [("bias", index, 1.0)], [], [((index[0],), 1.0)], ()
    p, d = index
    return _with_bias(geo, d, ("kernel", index, 1.0)), [((p,), 1.0)], [((d,), 1.0)], ()


def _conv_position(size: int, out_size: int, kernel: int, offset: int, stride: int,
                   before: int) -> tuple[int, int]:
    """(output position, input position) along one axis: the first output position whose
    kernel offset ``offset`` falls on a real input pixel (``before``: the padding)."""
    for out in range(out_size):
        pixel = out * stride + offset - before
        if 0 <= pixel < size:
            return out, pixel
    raise ConfigError(f"kernel offset {offset} never falls on the input of size {size}; "
                      "no gradient canary row exists for it")


@CANARY_ROUTES.register(Conv2D, Conv1D)
def _conv_route(geo: LayerGeometry, param: str, index: tuple[int, ...]) -> RouteResult:
    """A convolution kernel [*offsets, c_in, c_out]: one input pixel seen at those offsets
    from one output position; the bias [c_out]: output position 0 alone."""
    layer = geo.layer
    assert isinstance(layer, Conv2D | Conv1D)
    spatial = len(geo.in_shape) - 1
    pads = tuple(same_padding(geo.in_shape[axis], layer.kernel, layer.stride)[0]
                 if layer.padding == "same" else 0 for axis in range(spatial))
    if param == "bias":
        return [("bias", index, 1.0)], [], [((0,) * spatial + (index[0],), 1.0)], pads
    *offsets, c_in, c_out = index
    outs, pixels = [], []
    for axis, offset in enumerate(offsets):
        out, pixel = _conv_position(geo.in_shape[axis], geo.out_shape[axis], layer.kernel,
                                    offset, layer.stride, pads[axis])
        outs.append(out)
        pixels.append(pixel)
    return (_with_bias(geo, c_out, ("kernel", index, 1.0)), [((*pixels, c_in), 1.0)],
            [((*outs, c_out), 1.0)], pads)


@CANARY_ROUTES.register(Embedding)
def _embedding_route(geo: LayerGeometry, param: str, index: tuple[int, ...]) -> RouteResult:
    """An embedding row [token, d]: the token at position 0, output d there."""
    token, d = index
    return [("embeddings", index, 1.0)], [((0,), float(token))], [((0, d), 1.0)], ()


@CANARY_ROUTES.register(GroupNorm)
def _groupnorm_route(geo: LayerGeometry, param: str, index: tuple[int, ...]) -> RouteResult:
    """gamma [c]: one input value in channel c at position 0 whose group then has variance
    1 (gamma's gradient is the normalised input h there, beta's 1); beta [c]: a zero input
    (its normalised value is 0), output c alone."""
    layer = geo.layer
    assert isinstance(layer, GroupNorm)
    c = index[0]
    spatial = len(geo.in_shape) - 1
    origin = (0,) * spatial
    if param == "beta":
        return [("beta", index, 1.0)], [], [((*origin, c), 1.0)], ()
    size = int(np.prod(geo.in_shape[:-1])) * (geo.in_shape[-1] // layer.groups)
    if size < 2:
        raise ConfigError(f"layer {layer.name!r} normalises groups of one value; no gradient "
                          "canary row exists for its gamma")
    s = size / math.sqrt(size - 1)  # the group's variance is then exactly 1
    h = (s - s / size) / math.sqrt(1.0 + layer.epsilon)
    return ([("gamma", index, h), ("beta", index, 1.0)], [((*origin, c), s)],
            [((*origin, c), 1.0)], ())


def canary_record(arch: Architecture, key: str, flat: int) -> CanaryRecord:
    """The unit record (output gradient 1) of a canary at neutral ``key``, flat index ``flat``.

    Raises:
        ConfigError: ``key`` is no weight of ``arch``.
    """
    layer_name, param = key.rsplit(".", 1)
    trace = arch.trace()
    layer = next((lay for lay in arch.walk() if lay.name == layer_name), None)
    if layer is None or layer_name not in trace:
        raise ConfigError(f"weight key {key!r} is not one of model {arch.name!r}'s")
    in_shape, out_shape = trace[layer_name]
    shapes = layer.weight_shapes(in_shape)
    if param not in shapes:
        raise ConfigError(f"weight key {key!r} is not one of model {arch.name!r}'s; valid "
                          f"parameters of {layer_name!r}: {', '.join(shapes)}")
    index = tuple(int(i) for i in np.unravel_index(int(flat), shapes[param]))
    route = CANARY_ROUTES.get(type(layer))
    if route is None:
        return CanaryRecord(key, int(flat), layer_name, ((key, int(flat), 1.0),), None, None)
    geo = LayerGeometry(layer, tuple(in_shape), tuple(out_shape), shapes)
    grads, activation, output, pads = route(geo, param, index)
    gradient = tuple((f"{layer_name}.{p}", int(np.ravel_multi_index(i, shapes[p])), float(v))
                     for p, i, v in grads)
    return CanaryRecord(key, int(flat), layer_name, gradient, tuple(activation),
                        tuple(output), tuple(pads))


def canary_records(arch: Architecture, keys: Sequence[str], flats: Sequence[int], norm: float,
                   kind: str) -> list[CanaryRecord]:
    """The records of canaries at ``(keys[i], flats[i])``, each scaled to ``norm`` in the
    clip norm ``kind`` (``"l2"`` or ``"l1"``)."""
    out = []
    for key, flat in zip(keys, flats, strict=True):
        unit = canary_record(arch, key, int(flat))
        out.append(unit.scaled(norm / unit.norm(kind)))
    return out


# ------------------------------------------------------------------ a step's canaries
@dataclass(frozen=True)
class SparseRows:
    """Sparse entries of ``count`` per-example rows.

    Attributes:
        rows: int64 [k], the row (canary) of each entry, in ``0..count-1``.
        index: int64 [k, r], its index within the row (r = 1 for a flat weight index).
        values: float64 [k].
    """

    rows: np.ndarray
    index: np.ndarray
    values: np.ndarray

    @classmethod
    def of(cls, entries: Sequence[tuple[int, tuple[int, ...], float]], rank: int) -> SparseRows:
        """From ``(row, index, value)`` triples."""
        return cls(np.array([r for r, _, _ in entries], np.int64).reshape(-1),
                   np.array([i for _, i, _ in entries], np.int64).reshape(-1, rank),
                   np.array([v for _, _, v in entries], np.float64).reshape(-1))

    def dense(self, count: int, shape: Sequence[int]) -> np.ndarray:
        """The rows as a dense float64 array ``[count, *shape]`` (entries summed); an index
        of one column is a flat index into ``shape``."""
        out = np.zeros((count, int(np.prod(shape, dtype=np.int64))), np.float64)
        if not len(self.rows):
            flat = np.zeros(0, np.int64)
        elif self.index.shape[1] == 1:
            flat = self.index[:, 0]
        else:
            flat = np.ravel_multi_index(tuple(self.index.T), tuple(shape))
        np.add.at(out, (self.rows, flat), self.values)
        return out.reshape(count, *shape)


@dataclass(frozen=True)
class CanaryRecords:
    """The gradient canaries of one step (or one chunk of it), as ``count`` per-example
    records for the step engine to clip with its real examples
    (:meth:`dpcore.stepengine.StepEngine.train_step`).

    Attributes:
        count: m, the records.
        gradient: neutral weight key -> the records' per-example gradients there (flat
            index); keys no record touches are absent (zeros).
        activations, output_gradients: layer name -> the records' rows of that layer's input
            and output gradient (per-example neutral layout); layers no record routes through
            are absent (zero rows).
        pad_before: layer name -> its TensorFlow ``same`` padding before each spatial axis
            (convolutions with a routed record).
        unrouted: layers of records without a layer route (a fast engine refuses them).
    """

    count: int
    gradient: Mapping[str, SparseRows]
    activations: Mapping[str, SparseRows]
    output_gradients: Mapping[str, SparseRows]
    pad_before: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    unrouted: tuple[str, ...] = ()

    @classmethod
    def of(cls, records: Sequence[CanaryRecord]) -> CanaryRecords:
        """The records, in order (row i is ``records[i]``)."""
        grads: dict[str, list[tuple[int, tuple[int, ...], float]]] = {}
        acts: dict[str, list[tuple[int, tuple[int, ...], float]]] = {}
        outs: dict[str, list[tuple[int, tuple[int, ...], float]]] = {}
        pads: dict[str, tuple[int, ...]] = {}
        unrouted: list[str] = []
        for row, record in enumerate(records):
            for key, flat, value in record.gradient:
                grads.setdefault(key, []).append((row, (flat,), value))
            if record.activation is None or record.output_gradient is None:
                unrouted.append(record.layer)
                continue
            acts.setdefault(record.layer, []).extend(
                (row, i, v) for i, v in record.activation)
            outs.setdefault(record.layer, []).extend(
                (row, i, v) for i, v in record.output_gradient)
            if record.pad_before:
                pads[record.layer] = record.pad_before
        return cls(
            count=len(records),
            gradient={k: SparseRows.of(v, 1) for k, v in grads.items()},
            activations={k: SparseRows.of(v, _rank(v)) for k, v in acts.items()},
            output_gradients={k: SparseRows.of(v, _rank(v)) for k, v in outs.items()},
            pad_before=pads, unrouted=tuple(sorted(set(unrouted))))

    def dense_gradient(self, shapes: Mapping[str, Sequence[int]]) -> dict[str, np.ndarray]:
        """The per-example gradients, dense: key -> float64 ``[count, *shape]`` (every key
        of ``shapes``)."""
        return {k: (self.gradient[k].dense(self.count, s) if k in self.gradient
                    else np.zeros((self.count, *s), np.float64)) for k, s in shapes.items()}

    def split(self, sizes: Sequence[int]) -> list[CanaryRecords]:
        """Consecutive parts of ``sizes[i]`` records each (they sum to ``count``)."""
        if sum(sizes) != self.count:
            raise ValueError(f"parts {list(sizes)} do not sum to {self.count} canary records")
        out, start = [], 0
        for size in sizes:
            out.append(self._rows(start, start + size))
            start += size
        return out

    def _rows(self, start: int, stop: int) -> CanaryRecords:
        def part(rows: Mapping[str, SparseRows]) -> dict[str, SparseRows]:
            out = {}
            for key, sparse in rows.items():
                keep = (sparse.rows >= start) & (sparse.rows < stop)
                if keep.any():
                    out[key] = SparseRows(sparse.rows[keep] - start, sparse.index[keep],
                                          sparse.values[keep])
            return out

        acts = part(self.activations)
        outs = part(self.output_gradients)
        return CanaryRecords(stop - start, part(self.gradient), acts, outs,
                             {k: v for k, v in self.pad_before.items() if k in outs},
                             self.unrouted)


def _rank(entries: Sequence[tuple[int, tuple[int, ...], float]]) -> int:
    return len(entries[0][1]) if entries else 1


def clipped_sum(records: Sequence[CanaryRecord], clip_norm: float, kind: str
                ) -> dict[str, dict[int, float]]:
    """What an honest step adds for ``records``: the sum of each gradient scaled by
    ``C / max(norm, C)`` (C = ``clip_norm``, the norm in ``kind``); key -> flat -> value."""
    out: dict[str, dict[int, float]] = {}
    for record in records:
        norm = record.norm(kind)
        factor = clip_norm / max(norm, clip_norm)
        for key, flat, value in record.gradient:
            slot = out.setdefault(key, {})
            slot[flat] = slot.get(flat, 0.0) + factor * value
    return out


def with_canaries(n_chunks: int, canaries: CanaryRecords | None, per_chunk: int
                  ) -> list[tuple[int | None, CanaryRecords | None]]:
    """How a step's canary records ride along its ``n_chunks`` physical chunks: pairs of
    (chunk number, or None for a chunk of canaries alone; the chunk's records, or None).

    Records are handed out in order, at most ``per_chunk`` (>= 1) with each chunk, first
    chunks first; those left after the last chunk go in chunks of their own (no real
    example), at most ``per_chunk`` each. So a chunk's memory is at most twice its own."""
    per_chunk = max(1, int(per_chunk))
    count = 0 if canaries is None else canaries.count
    groups = [min(per_chunk, count - start) for start in range(0, count, per_chunk)]
    parts = canaries.split(groups) if canaries is not None and groups else []
    out: list[tuple[int | None, CanaryRecords | None]] = [
        (i, parts[i] if i < len(parts) else None) for i in range(n_chunks)]
    out += [(None, part) for part in parts[n_chunks:]]
    return out
