"""Routes of the fast engines chosen by measurement, recorded, and replayed. Framework-neutral.

Each trainable layer's per-example norm and clipped sum can take one of several exact routes
(:data:`dpcore.fastrules.ROUTES`); which is fastest depends on the layer's shapes, the chunk
size and the CPU, not only on Book-Keeping's ``2 T^2 < p d``. At the first chunk of each chunk
*size class* (:func:`size_class`), an engine hands every layer's applicable routes to a
:class:`RouteBook`, which

* **replays** the routes given in ``perf.routes`` (a reproduced run takes the recorded routes:
  a route changes the order of float sums, so only the same route gives the same bits), or
* takes **Book-Keeping's rule** (``perf.route_choice: rule``, the default: no timing, the
  same routes in every run, so that the same config and seed give the same bits), or
* **measures** (``perf.route_choice: measure``): times each candidate route on the layer's
  real input and output gradient (wall clock, the best of :attr:`TimingPolicy.repeats` runs
  after one untimed run, so that a passing load on the machine does not decide) and keeps
  the fastest; a route displaces the rule's default only when it is faster by
  :attr:`TimingPolicy.margin`. A route whose multiply-adds
  (:func:`dpcore.fastrules.route_macs`) exceed :attr:`TimingPolicy.prune_factor` times the
  fewest of the layer's routes is not timed (a ghost norm over 784 positions, ~14x a
  per-example gradient, would cost a second to time); layers of the same kind and shapes are
  timed once (a ResNet's repeated blocks).

What it chose, and the timings it chose by, are recorded in the run's ``perf``
(:meth:`RouteBook.record`): ``routes`` (size class -> layer -> route: what ``perf.routes``
takes back) and ``routes_chosen_by`` (a key of its own: ``perf.route_choice`` is the
setting).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dpcore.errors import ConfigError
from dpcore.fastrules import ROUTES, default_route, route_macs

#: A physical chunk size is split into this many size classes (chunks are padded or timed by
#: class: at most this many compiled shapes or route timings per chunk size).
SIZE_CLASSES = 8


def size_class(n: int, physical: int | None) -> int:
    """The size class of a chunk of ``n`` examples: ``n`` rounded up to a multiple of
    ``physical / 8`` (at least 1; ``physical`` None: multiples of 32). A chunk of the full
    physical size is its own class; a smaller chunk (a Poisson batch's remainder) shares a
    class with chunks at most ``physical / 8 - 1`` examples larger."""
    quantum = max(1, (physical or 32 * SIZE_CLASSES) // SIZE_CLASSES)
    return max(quantum, -(-n // quantum) * quantum)


@dataclass(frozen=True)
class TimingPolicy:
    """How routes are timed at warm-up.

    Attributes:
        repeats: timed runs per route (the fastest counts), after one untimed run.
        margin: a route replaces the rule's default only if faster by this fraction.
        prune_factor: routes with more than this many times the fewest multiply-adds of the
            layer's routes are not timed.
        max_examples: time on at most this many examples of the chunk (None: all, the
            default: the routes' costs are not linear in the examples, e.g. cnn4's conv2 on
            a grouped convolution of 64 examples was timed faster than its unfold, of 256
            examples 2.3x slower).
        budget_seconds: timing stops once it has taken this long for a model (the remaining
            layers take their default route, recorded as not measured); the pass that
            records the layers' inputs and output gradients is not counted.
    """

    repeats: int = 2
    margin: float = 0.1
    prune_factor: float = 4.0
    max_examples: int | None = None
    budget_seconds: float = 2.0


#: A route whose first run takes longer than this many seconds is timed once more only
#: (its first run's allocations are small beside its work; timing it thrice would cost more
#: than it tells).
SLOW_ROUTE_SECONDS = 0.05


def best_seconds(run: Callable[[], Any], repeats: int) -> float:
    """Wall-clock seconds of the fastest of ``repeats`` calls of ``run`` after one untimed
    call; a route slower than :data:`SLOW_ROUTE_SECONDS` the fastest of its first two calls.
    ``run`` must return only once its work is done (TF: a ``.numpy()``)."""
    start = time.perf_counter()
    run()
    first = time.perf_counter() - start
    best = first if first > SLOW_ROUTE_SECONDS else float("inf")
    for _ in range(1 if first > SLOW_ROUTE_SECONDS else repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


@dataclass(frozen=True)
class LayerRoutes:
    """What a backend's rule says of one layer at one chunk: its name, the routes it
    implements for this norm kind (preference order), the rule's default, BK's (T, p, d),
    a key shared by layers that cost the same (same kind, shapes and geometry; None: not
    shared), and a way to run each route on the chunk (a thunk per route)."""

    name: str
    available: tuple[str, ...]
    dims: tuple[int, int, int] | None
    kind: str
    run: Callable[[str], Callable[[], Any]]
    share: Hashable | None = None

    @property
    def default(self) -> str:
        """Book-Keeping's route of the layer (:func:`dpcore.fastrules.default_route`)."""
        if self.dims is None:
            return self.available[0]
        return default_route(*self.dims, self.kind, self.available)


@dataclass
class RouteBook:
    """The route of every (size class, layer): replayed from ``given`` or measured once.

    Args:
        given: ``perf.routes`` (size class -> layer name -> route) to replay, or None.
        measure: without ``given``: time the routes (True) or take Book-Keeping's rule
            (False: no timing, the same routes every run).
        policy: how to measure.
    """

    given: Mapping[str, Mapping[str, str]] | None = None
    measure: bool = True
    policy: TimingPolicy = field(default_factory=TimingPolicy)
    chosen: dict[str, dict[str, str]] = field(default_factory=dict)
    timings_ms: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    notes: dict[str, dict[str, str]] = field(default_factory=dict)
    seconds: float = 0.0
    timing_seconds: float = 0.0
    _shared: dict[Hashable, tuple[str, dict[str, float]]] = field(default_factory=dict)

    def has(self, size: int) -> bool:
        """True when the routes of chunk size class ``size`` are settled."""
        return str(size) in self.chosen

    def routes(self, size: int) -> dict[str, str]:
        """Layer name -> route of size class ``size`` (settled by :meth:`settle`)."""
        return self.chosen[str(size)]

    def settle(self, size: int, layers: Callable[[], Sequence[LayerRoutes]]
               ) -> dict[str, str]:
        """The routes of size class ``size``: replayed if given, else measured layer by
        layer (each layer's candidates timed by :func:`best_seconds`). ``layers`` makes the
        layers' routes (e.g. by a forward and backward pass: counted in the warm-up time)."""
        key = str(size)
        if key in self.chosen:
            return self.chosen[key]
        began = time.perf_counter()
        made = layers()
        start = time.perf_counter()  # the timing budget counts the timing only
        out: dict[str, str] = {}
        timings: dict[str, dict[str, float]] = {}
        notes: dict[str, str] = {}
        for layer in made:
            if self.given is not None:
                out[layer.name] = self._replayed(key, layer, notes)
                continue
            if not self.measure:
                out[layer.name] = layer.default
                continue
            route, ms, note = self._measured(layer, start)
            out[layer.name] = route
            if ms:
                timings[layer.name] = ms
            if note:
                notes[layer.name] = note
        self.chosen[key] = out
        self.timings_ms[key] = timings
        self.notes[key] = notes
        self.timing_seconds += time.perf_counter() - start
        self.seconds += time.perf_counter() - began
        return out

    def _replayed(self, key: str, layer: LayerRoutes, notes: dict[str, str]) -> str:
        given = (self.given or {}).get(key)
        if given is None or layer.name not in given:
            notes[layer.name] = "not in perf.routes: the rule's default"
            return layer.default
        route = given[layer.name]
        if route not in layer.available:
            raise ConfigError(
                f"perf.routes[{key!r}][{layer.name!r}]={route!r} is not a route of this layer "
                f"for {layer.kind} norms; valid: {', '.join(layer.available)}")
        return route

    def _measured(self, layer: LayerRoutes, start: float
                  ) -> tuple[str, dict[str, float], str | None]:
        """(route, its candidates' milliseconds, a note) of one layer."""
        default = layer.default
        candidates = list(layer.available)
        if layer.dims is not None and len(candidates) > 1:
            macs = {r: route_macs(r, *layer.dims) for r in candidates}
            fewest = min(macs.values())
            candidates = [r for r in candidates
                          if macs[r] <= self.policy.prune_factor * fewest or r == default]
            if default not in candidates:
                candidates.append(default)
        if len(candidates) == 1:
            return candidates[0], {}, None
        if layer.share is not None and layer.share in self._shared:
            route, ms = self._shared[layer.share]
            return route, ms, "timed on an identical layer"
        if time.perf_counter() - start + self.timing_seconds > self.policy.budget_seconds:
            return default, {}, "not timed (timing budget spent): the rule's default"
        ms = {r: 1000.0 * best_seconds(layer.run(r), self.policy.repeats) for r in candidates}
        fastest = min(ms, key=ms.__getitem__)
        route = (fastest if ms[fastest] < (1.0 - self.policy.margin) * ms[default]
                 else default)
        if layer.share is not None:
            self._shared[layer.share] = (route, ms)
        return route, ms, None

    def record(self) -> dict[str, Any]:
        """The ``perf`` entries of the routes: ``routes`` (what ``perf.routes`` replays) and
        ``routes_chosen_by`` (how: measured or replayed, the timings, notes, the warm-up seconds:
        all of settling the routes, and of that the timing alone)."""
        policy = self.policy
        return {
            "routes": {k: dict(v) for k, v in self.chosen.items()},
            "routes_chosen_by": {
                "how": "replayed from perf.routes" if self.given is not None else
                "Book-Keeping's rule (perf.route_choice: rule), not timed"
                if not self.measure else
                f"measured: best of {policy.repeats} wall-clock runs per route on at most "
                f"{policy.max_examples or 'all'} examples of the chunk, a route must be "
                f"{100 * policy.margin:.0f}% faster to replace the rule's default, routes "
                f"with over {policy.prune_factor:g}x the fewest multiply-adds not timed",
                "timings_ms": {k: v for k, v in self.timings_ms.items() if v},
                "notes": {k: v for k, v in self.notes.items() if v},
                "warmup_seconds": self.seconds,
                "timing_seconds": self.timing_seconds,
            }}


def check_routes(routes: Any) -> None:
    """Refuse a ``perf.routes`` value that is not size class -> layer name -> known route.

    Raises:
        ConfigError: naming the bad entry and the valid routes.
    """
    if routes is None:
        return
    if not isinstance(routes, Mapping):
        raise ConfigError(f"perf.routes={routes!r} is not valid; valid: a mapping of chunk "
                          "size class -> layer name -> route, or null (measure)")
    for size, layers in routes.items():
        if not str(size).isdigit() or not isinstance(layers, Mapping):
            raise ConfigError(f"perf.routes[{size!r}] is not valid; valid: a chunk size class "
                              "(an integer) mapping layer names to routes")
        for name, route in layers.items():
            if route not in ROUTES:
                raise ConfigError(f"perf.routes[{size!r}][{name!r}]={route!r} is not known; "
                                  f"valid: {', '.join(ROUTES)}")

