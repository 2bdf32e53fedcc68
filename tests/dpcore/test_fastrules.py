"""The fast engines' shared part: Book-Keeping's cost rule, the routes' arithmetic, and
the route book (routes timed, kept by a margin, recorded, replayed)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from dpcore.fastrules import use_ghost_norm


@pytest.mark.parametrize(("t", "p", "d", "kind", "ghost"), [
    (1, 512, 32, "l2", True),      # a dense layer on a vector: 2 < p d
    (196, 64, 16, "l2", False),    # cnn4's conv1 on 28x28: 2 * 196^2 > 1024
    (25, 256, 32, "l2", True),     # cnn4's conv2: 1250 < 8192
    (32, 32, 64, "l2", False),     # the boundary: 2 T^2 = p d is not cheaper
    (31, 32, 64, "l2", True),
    (1, 512, 32, "l1", False),     # L1 norms have no ghost form
])
def test_the_ghost_norm_exactly_where_two_t_squared_is_below_p_d(
        t: int, p: int, d: int, kind: str, ghost: bool) -> None:
    assert use_ghost_norm(t, p, d, kind) is ghost


def test_each_route_has_the_multiply_adds_of_its_norm_and_clipped_sum() -> None:
    from dpcore.fastrules import route_macs

    # cnn4's conv2 on 28x28: T = 25, p = 256, d = 32
    assert route_macs("ghost", 25, 256, 32) == 625 * 288 + 625 + 25 * 256 * 32
    assert route_macs("per_example", 25, 256, 32) == 25 * 256 * 32 + 2 * 256 * 32
    assert route_macs("unfold", 25, 256, 32) == route_macs("per_example", 25, 256, 32)
    with pytest.raises(ValueError, match="route 'fast' is not known; valid: ghost"):
        route_macs("fast", 1, 1, 1)


def test_the_default_route_follows_the_rule_among_the_layers_routes() -> None:
    from dpcore.fastrules import default_route

    assert default_route(25, 256, 32, "l2", ("per_example", "unfold", "ghost")) == "ghost"
    assert default_route(196, 64, 16, "l2", ("per_example", "unfold", "ghost")) == \
        "per_example"
    assert default_route(25, 256, 32, "l1", ("per_example", "unfold")) == "per_example"
    assert default_route(256, 10000, 64, "l1", ("ghost",)) == "ghost"  # an embedding


def test_size_classes_round_up_to_an_eighth_of_the_physical_chunk() -> None:
    from dpcore.fastroutes import size_class

    assert [size_class(n, 256) for n in (1, 32, 33, 200, 256)] == [32, 32, 64, 224, 256]
    assert size_class(3, 16) == 4 and size_class(16, 16) == 16
    assert size_class(70, None) == 96  # no physical chunk: multiples of 32


def _layer(name: str, dims: tuple[int, int, int], seconds: dict[str, float],
           calls: list[str], share: object = None) -> Any:
    from dpcore.fastroutes import LayerRoutes

    def run(route: str) -> Any:
        def once() -> None:
            calls.append(route)
        once.seconds = seconds[route]  # type: ignore[attr-defined]
        return once

    return LayerRoutes(name, ("per_example", "unfold", "ghost"), dims, "l2", run, share)


@pytest.fixture
def fake_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """best_seconds reads the thunk's ``seconds`` instead of timing it (the calls are still
    made, so that the test sees which routes were timed)."""
    from dpcore import fastroutes

    def best(run: Any, repeats: int) -> float:
        run()
        return run.seconds

    monkeypatch.setattr(fastroutes, "best_seconds", best)


def test_the_fastest_route_wins_only_by_the_margin_and_slow_routes_are_not_timed(
        fake_clock: None) -> None:
    from dpcore.fastroutes import RouteBook, TimingPolicy

    calls: list[str] = []
    conv2 = (25, 256, 32)  # default ghost; per-example within 4x of the fewest MACs
    conv1 = (196, 64, 16)  # default per_example; ghost ~14x the MACs: never timed
    book = RouteBook(policy=TimingPolicy(margin=0.1))
    routes = book.settle(256, lambda: [
        _layer("a", conv2, {"ghost": 1.0, "per_example": 0.95, "unfold": 2.0}, calls),
        _layer("b", conv2, {"ghost": 1.0, "per_example": 0.85, "unfold": 2.0}, calls),
        _layer("c", conv1, {"ghost": 0.1, "per_example": 1.0, "unfold": 0.5}, calls)])
    assert routes == {"a": "ghost", "b": "per_example", "c": "unfold"}
    assert calls.count("ghost") == 2  # timed for a and b, not for c (pruned)
    record = book.record()
    assert record["routes"] == {"256": routes}
    assert set(record["routes_chosen_by"]["timings_ms"]["256"]["c"]) == {"per_example", "unfold"}
    assert record["routes_chosen_by"]["timings_ms"]["256"]["b"]["per_example"] == 850.0


def test_identical_layers_are_timed_once_and_the_budget_bounds_the_timing(
        fake_clock: None) -> None:
    from dpcore.fastroutes import RouteBook, TimingPolicy

    calls: list[str] = []
    seconds = {"ghost": 1.0, "per_example": 0.5, "unfold": 2.0}
    book = RouteBook()
    book.settle(64, lambda: [_layer(n, (25, 256, 32), seconds, calls, share="same")
                     for n in ("a", "b", "c")])
    assert book.routes(64) == {"a": "per_example", "b": "per_example", "c": "per_example"}
    assert len(calls) == 3 and book.notes["64"] == {"b": "timed on an identical layer",
                                                   "c": "timed on an identical layer"}
    spent = RouteBook(policy=TimingPolicy(budget_seconds=0.0))
    assert spent.settle(64, lambda: [_layer("a", (25, 256, 32), seconds, calls)]) == {"a": "ghost"}
    assert "budget" in spent.notes["64"]["a"]


def test_a_recorded_perf_reads_back_as_the_perfspec_that_replays_its_routes(
        fake_clock: None) -> None:
    """A run's ``perf`` is its PerfSpec's fields updated by the engine's entries
    (:func:`dpcore.runrecord.build_run_result`); read back field by field
    (:func:`compare.reproduce.perf_of`) it is the same PerfSpec with the chosen routes: no
    entry of the route book takes a PerfSpec field's name with another meaning."""
    from types import SimpleNamespace

    from compare.reproduce import perf_of
    from dpcore.config import PerfSpec
    from dpcore.fastroutes import RouteBook

    calls: list[str] = []
    seconds = {"ghost": 1.0, "per_example": 0.5, "unfold": 2.0}
    perf = PerfSpec(engine="fast", physical_batch_size=16, route_choice="measure")
    book = RouteBook(perf.routes, measure=True)
    book.settle(16, lambda: [_layer("a", (25, 256, 32), seconds, calls)])
    recorded = {**dataclasses.asdict(perf), **book.record()}
    back = perf_of(SimpleNamespace(perf=recorded))  # type: ignore[arg-type]
    assert back == dataclasses.replace(perf, routes={"16": {"a": "per_example"}})


def test_given_routes_are_replayed_without_timing(fake_clock: None) -> None:
    from dpcore.errors import ConfigError
    from dpcore.fastroutes import RouteBook

    calls: list[str] = []
    seconds = {"ghost": 1.0, "per_example": 0.5, "unfold": 2.0}
    book = RouteBook(given={"64": {"a": "unfold"}})
    assert book.settle(64, lambda: [_layer("a", (25, 256, 32), seconds, calls),
                            _layer("b", (25, 256, 32), seconds, calls)]) == {
        "a": "unfold", "b": "ghost"}  # b not given: the rule's default, noted
    assert book.settle(32, lambda: [_layer("a", (25, 256, 32), seconds, calls)]) == {"a": "ghost"}
    assert calls == [] and book.record()["routes_chosen_by"]["how"] == "replayed from perf.routes"
    assert "not in perf.routes" in book.notes["64"]["b"]
    bad = RouteBook(given={"64": {"a": "unfold"}})
    layer = _layer("a", (25, 256, 32), seconds, calls)
    with pytest.raises(ConfigError, match=r"perf.routes\['64'\]\['a'\]='unfold' is not a "
                                          r"route of this layer for l2 norms; valid: ghost"):
        bad.settle(64, lambda: [dataclasses.replace(layer, available=("ghost",))])


@pytest.mark.parametrize(("routes", "message"), [
    ("ghost", r"perf.routes='ghost' is not valid; valid: a mapping"),
    ({"big": {"a": "ghost"}}, r"perf.routes\['big'\] is not valid; valid: a chunk size class"),
    ({"64": {"a": "fast"}}, r"perf.routes\['64'\]\['a'\]='fast' is not known; valid: ghost, "
                            r"per_example, unfold"),
])
def test_a_bad_perf_routes_is_refused_naming_what_is_valid(routes: Any, message: str) -> None:
    from dpcore.config import PerfSpec
    from dpcore.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        PerfSpec(routes=routes)
    assert PerfSpec(routes={"64": {"a": "ghost"}}).routes == {"64": {"a": "ghost"}}


def test_the_rule_takes_each_layers_default_without_timing(fake_clock: None) -> None:
    from dpcore.fastroutes import RouteBook

    calls: list[str] = []
    seconds = {"ghost": 1.0, "per_example": 0.1, "unfold": 2.0}
    book = RouteBook(measure=False)
    assert book.settle(64, lambda: [_layer("a", (25, 256, 32), seconds, calls),
                                    _layer("b", (196, 64, 16), seconds, calls)]) == {
        "a": "ghost", "b": "per_example"}
    assert calls == [] and book.record()["routes_chosen_by"]["how"].startswith(
        "Book-Keeping's rule")


def test_route_choice_is_rule_by_default_and_checked() -> None:
    from dpcore.config import PerfSpec
    from dpcore.errors import ConfigError

    assert PerfSpec().route_choice == "rule"  # the same routes, the same bits, every run
    assert PerfSpec(route_choice="measure").route_choice == "measure"
    with pytest.raises(ConfigError, match=r"perf.route_choice='fastest'.*rule, measure"):
        PerfSpec(route_choice="fastest")

