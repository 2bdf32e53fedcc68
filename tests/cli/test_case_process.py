"""benchmarks/case_process.py: a benchmark case runs in a fresh process (what it allocates is
given back before the next case), its figures come back whole, its progress is forwarded, and
a failed worker is one clear error naming the case."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from benchmarks import bench  # noqa: E402
from benchmarks.case_process import run_case_in_process  # noqa: E402
from dpcore.errors import DpCompareError  # noqa: E402

TINY = bench.Case("tiny_torch", "cnn4", 8, data="pneumoniamnist", rounds=1, steps=1, warmup=1,
                  tiers=("torch_plain",))


def test_a_case_runs_in_another_process_and_returns_its_figures(
        monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # noqa: ANN001
    def not_here(*_args, **_kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("the case ran in the calling process")

    monkeypatch.setattr(bench, "run_case", not_here)  # the child does not see this patch
    lines: list[str] = []
    history: dict = {}
    figures, described = run_case_in_process(
        TINY, quick=True, data_dir=str(tmp_path / "no-data"), compile_steps=False,
        roofline=None, history=history, log=lines.append)
    variant = figures["variants"]["torch_plain"]
    assert variant["steps_timed"] == 1 and variant["seconds_per_step"] > 0
    assert figures["batch_size"] == 8 and figures["model"] == "cnn4"
    assert "random uint8 images of pneumoniamnist's shape" in described
    assert any("[tiny_torch] round 1/1 torch_plain" in line for line in lines)
    assert history == {}


def test_a_failed_case_is_one_error_naming_it() -> None:
    broken = bench.Case("broken", "cnn4", 8, data="no-such-data", rounds=1, steps=1, warmup=1,
                        tiers=("torch_plain",))
    with pytest.raises(DpCompareError, match=r"benchmark case broken failed in its own "
                                             r"process: exit 1; last lines: .*no-such-data"):
        run_case_in_process(broken, quick=True, data_dir=None, compile_steps=False,
                            roofline=None, history={})


def test_full_runs_isolate_their_cases_and_single_cases_do_not(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def in_process(case, data, log, **_kwargs):  # noqa: ANN001, ANN003, ANN202
        calls.append(f"here {case.name}")
        return {"variants": {}}

    def elsewhere(case, **_kwargs):  # noqa: ANN001, ANN003, ANN202
        calls.append(f"child {case.name}")
        return {"variants": {}}, "described"

    monkeypatch.setattr(bench, "run_case", in_process)
    monkeypatch.setattr(bench, "run_case_in_process", elsewhere)
    monkeypatch.setattr(bench, "load_data", lambda *_a: bench.CaseData(
        None, None, "image", 2, 1, "described"))  # type: ignore[arg-type]
    monkeypatch.setattr("benchmarks.roofline.measure", lambda: None)
    monkeypatch.setattr(bench, "target_rows", lambda _out: [])
    two = ["cnn4_b256", "cnn4_b1024"]
    out = bench.run_benchmark(case_names=two, sweep=False, compile_steps=False)
    assert calls == ["child cnn4_b256", "child cnn4_b1024"] and out["cases_isolated"] is True
    calls.clear()
    out = bench.run_benchmark(case_names=two[:1], sweep=False, compile_steps=False)
    assert calls == ["here cnn4_b256"] and out["cases_isolated"] is False


def test_a_worker_whose_result_outgrows_the_pipe_does_not_hang() -> None:
    """Stdout is drained while stderr is read: 4 MB of result before the last log line."""
    import os
    import sys
    import threading

    from benchmarks.case_process import LOG_PREFIX, run_worker

    script = ("import sys; sys.stdout.write('x' * 4_000_000 + '\\n'); sys.stdout.flush(); "
              f"print({LOG_PREFIX!r} + 'done', file=sys.stderr); print('noise', file=sys.stderr)")
    lines: list[str] = []
    outcome: list[tuple[int, str, list[str]]] = []
    worker = threading.Thread(target=lambda: outcome.append(run_worker(
        [sys.executable, "-c", script], dict(os.environ), ".", lines.append)), daemon=True)
    worker.start()
    worker.join(timeout=60)
    assert outcome, "run_worker hung: the worker blocked writing its stdout"
    code, out, tail = outcome[0]
    assert code == 0 and len(out) == 4_000_001 and lines == ["done"] and tail == ["noise"]


def test_each_layer_table_runs_in_its_own_process_and_a_killed_one_is_recorded(
        monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # noqa: ANN001
    import benchmarks.case_process as case_process

    case = bench.Case("tiny_layers", "cnn4", 8, data="pneumoniamnist", rounds=1, steps=1,
                      warmup=1, tiers=("torch_plain_cl", "torch_dp_fast_cl"))
    lines: list[str] = []
    figures, _ = run_case_in_process(
        case, quick=True, data_dir=str(tmp_path / "no-data"), compile_steps=False,
        roofline=None, history={}, log=lines.append)
    rows = figures["layers"]["torch_cl"]
    assert [r["layer"] for r in rows][:1] and all("route" in r for r in rows)
    assert "[tiny_layers] per-layer costs of the fast DP step (torch_cl)" in lines
    # the layer table's process killed (as the kernel's OOM killer does): recorded, the
    # case's timings kept
    real = case_process.run_worker

    def killed_layers(argv, env, cwd, log):  # noqa: ANN001, ANN202
        if '"layers": "torch_cl"' in argv[-1]:
            return -9, "", ["MemoryError-ish last line"]
        return real(argv, env, cwd, log)

    monkeypatch.setattr(case_process, "run_worker", killed_layers)
    figures, _ = run_case_in_process(
        case, quick=True, data_dir=str(tmp_path / "no-data"), compile_steps=False,
        roofline=None, history={})
    assert figures["variants"]["torch_dp_fast_cl"]["steps_timed"] == 1
    assert figures["layers"]["torch_cl"] == {"skipped": (
        "failed in its own process: exit -9 (killed by signal 9: most likely the kernel's "
        "out-of-memory killer); last lines: MemoryError-ish last line")}
