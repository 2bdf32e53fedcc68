"""The bench's cost model (hand-computed multiply-adds, bytes and roofline times of a
convolution and a dense layer), its roofline micro-benchmark, and the choice between a tier
and its compiled twin (kept only where faster, a failure recorded)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import pytest

from benchmarks import bench, costmodel, render
from benchmarks.variants import Variant

#: cnn4's conv2 on a chunk of 256 28x28 images: 13x13x16 input, 4x4 kernel, stride 2, 32
#: channels out: T = 5 x 5, p = 4 x 4 x 16, d = 32.
CONV2 = costmodel.LayerShape("product", 256, 25, 256, 32, 13 * 13 * 16)
#: cnn4's fc1 on the same chunk: 512 inputs, 32 outputs.
FC1 = costmodel.LayerShape("product", 256, 1, 512, 32, 512)


def test_a_convolution_costs_what_hand_arithmetic_says() -> None:
    # forward = input gradient = weight gradient: n T p d multiply-adds; bytes 4 (n a_in
    # [input] + n T d [output / its gradient] + p d [weight])
    one = costmodel.Cost(256 * 25 * 256 * 32, 4 * (256 * 2704 + 256 * 25 * 32 + 256 * 32))
    assert one == costmodel.Cost(52_428_800, 3_620_864)
    assert costmodel.forward(CONV2) == costmodel.weight_gradient(CONV2) == one
    assert costmodel.plain_step(CONV2) == costmodel.Cost(157_286_400, 10_862_592)
    # ghost: n (T^2 (p + d) + T^2) = 256 x 180625; bytes: a, patches twice, g twice, the two
    # Gram matrices written and read; then the weight gradient of c g for the clipped sum
    ghost_norm = costmodel.Cost(46_240_000, 2_768_896 + 2 * 6_553_600 + 2 * 819_200
                                + 4 * 640_000)
    assert costmodel.route(CONV2, "ghost") == ghost_norm + one
    assert costmodel.route(CONV2, "ghost") == costmodel.Cost(98_668_800, 23_695_360)
    # per example: n (T p d + 2 p d); bytes: a and g twice (the grouped layout's copies),
    # the [n, p, d] per-example gradients written, read by the norm, read by the sum
    assert costmodel.route(CONV2, "per_example") == costmodel.Cost(
        56_623_104, 2 * (2_768_896 + 819_200) + 3 * 8_388_608)
    assert costmodel.dp_step(CONV2, "per_example") == (
        one + one + costmodel.route(CONV2, "per_example"))
    # unfold: the same multiply-adds; the patches written and read instead of the copies
    assert costmodel.route(CONV2, "unfold").macs == 56_623_104
    assert costmodel.route(CONV2, "unfold").bytes == (2_768_896 + 2 * 6_553_600 + 819_200
                                                      + 3 * 8_388_608)
    # roofline at 100 GFLOP/s and 10 GB/s: the weight gradient is arithmetic-bound (1.05 ms
    # of FLOPs, 0.36 ms of bytes), the per-example route memory-bound (3.23 ms of bytes)
    assert one.seconds(1e11, 1e10) == pytest.approx(2 * 52_428_800 / 1e11)
    assert one.bound(1e11, 1e10) == "arithmetic"
    per_example = costmodel.route(CONV2, "per_example")
    assert per_example.seconds(1e11, 1e10) == pytest.approx(32_342_016 / 1e10)
    assert per_example.bound(1e11, 1e10) == "memory"


def test_a_dense_layer_costs_what_hand_arithmetic_says() -> None:
    one = costmodel.Cost(256 * 512 * 32, 4 * (256 * 512 + 256 * 32 + 512 * 32))
    assert one == costmodel.Cost(4_194_304, 622_592)
    assert costmodel.plain_step(FC1) == costmodel.Cost(3 * 4_194_304, 3 * 622_592)
    # the ghost norm of a vector: ||a||^2 ||g||^2, n (p + d) multiply-adds reading a and g
    assert costmodel.route(FC1, "ghost") == costmodel.Cost(256 * 544, 4 * 256 * 544) + one
    first = costmodel.LayerShape("product", 256, 1, 512, 32, 512, first=True)
    assert costmodel.plain_step(first) == costmodel.Cost(2 * 4_194_304, 2 * 622_592)
    with pytest.raises(ValueError, match="route 'fast' is not known"):
        costmodel.route(FC1, "fast")


def test_the_roofline_micro_benchmark_measures_both_sides() -> None:
    from benchmarks import roofline

    measured = roofline.measure()
    assert measured["peak_flops"] > 1e8 and measured["bandwidth_bytes_per_s"] > 1e7
    assert "torch.mm" in measured["method"] and "copy_" in measured["method"]


def _sleeping(seconds: float, calls: list[str], label: str) -> Any:
    def run(batches: Sequence[Any]) -> None:
        calls.append(label)
        for _ in batches:
            time.sleep(seconds)
    return run


@pytest.mark.parametrize("compiled_faster", [True, False])
def test_a_compiled_twin_is_kept_only_where_faster(compiled_faster: bool) -> None:
    calls: list[str] = []
    closed: list[str] = []
    slow, fast = 0.03, 0.003
    v = Variant("torch_plain_cl", "torch", False,
                _sleeping(slow if compiled_faster else fast, calls, "eager"),
                close=lambda: closed.append("eager"), engine="eager engine")
    v.compiled = Variant("torch_plain_cl", "torch", False,
                         _sleeping(fast if compiled_faster else slow, calls, "compiled"),
                         close=lambda: closed.append("compiled"), engine="compiled engine")
    bench.choose_compiled(v, ["warm"], ["b1", "b2"])
    note = v.compile
    assert note["kept"] is compiled_faster and v.compiled is None
    assert note["compile_seconds"] > 0 and "torch.compile" in note["tried"]
    assert "not bit for bit" in note["determinism"]
    assert (note["compiled_s_per_step"] < note["uncompiled_s_per_step"]) is compiled_faster
    assert closed == ["eager" if compiled_faster else "compiled"]  # the loser is released
    assert v.engine == ("compiled engine" if compiled_faster else "eager engine")
    v.run(["b3"])
    assert calls[-1] == ("compiled" if compiled_faster else "eager")


def test_a_compiled_twin_that_fails_is_recorded_and_not_kept() -> None:
    def broken(batches: Sequence[Any]) -> None:
        raise RuntimeError("XLA cannot compile tf.unique")

    closed: list[str] = []
    v = Variant("tf_dp_fast", "tf", True, _sleeping(0.001, [], "eager"))
    v.compiled = Variant("tf_dp_fast", "tf", True, broken, close=lambda: closed.append("x"))
    eager = v.run
    bench.choose_compiled(v, ["warm"], ["b1"])
    assert v.compile["kept"] is False and "XLA cannot compile" in v.compile["failed"]
    assert "op determinism off" in v.compile["determinism"]
    assert v.run is eager and closed == ["x"]


def test_a_much_slower_compiled_twin_is_not_compiled_again_for_the_same_model(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A twin measured at least COMPILE_GIVE_UP_RATIO times slower in one case is not compiled
    in a later case of the same model (its note says where it was measured); another model's
    twin is still tried."""
    # the step times as measured (1.48 s uncompiled, 65.8 s compiled): no clock involved
    monkeypatch.setattr(bench, "_step_seconds", lambda runs, batches: [1.48, 65.8])
    history: bench.CompileHistory = {}

    def variant(compiled_calls: list[str]) -> Variant:
        v = Variant("tf_dp_fast", "tf", True, _sleeping(0.0, [], "eager"))
        v.compiled = Variant("tf_dp_fast", "tf", True,
                             _sleeping(0.0, compiled_calls, "compiled"))
        return v

    first_calls: list[str] = []
    first = variant(first_calls)
    bench.choose_compiled(first, ["warm"], ["b1"], model="resnet18", case="resnet18_b64",
                          history=history)
    assert first.compile["kept"] is False and first_calls  # tried, slower, not kept
    assert history[("tf", "tf_dp_fast", "resnet18")][0] == "resnet18_b64"

    later_calls: list[str] = []
    later = variant(later_calls)
    bench.choose_compiled(later, ["warm"], ["b1"], model="resnet18", case="resnet18_b256",
                          history=history)
    assert later_calls == [] and later.compile["kept"] is False  # never compiled
    assert "resnet18_b64" in later.compile["given_up"]
    assert "resnet18_b64" in render.compile_note({"compile": later.compile})

    other_calls: list[str] = []
    bench.choose_compiled(variant(other_calls), ["warm"], ["b1"], model="cnn4",
                          case="cnn4_b256", history=history)
    assert other_calls  # another model: tried
