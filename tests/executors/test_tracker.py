"""The progress of a grid, whichever executor runs it: runs done / running / left, and the
runner's counts fed from each finished result."""

from __future__ import annotations

from compare.executors import RunTracker
from compare.grid import expand_grid, load_preset
from dpcore.results import RunResult, run_id


def result(status: str) -> RunResult:
    return RunResult(run_id="x", config={}, config_hash="x", backend="tf", seed=0, status=status)


def test_tracker_counts_done_running_left_and_reports_each_result() -> None:
    grid = expand_grid(load_preset("smoke"))
    _, (c2, b2), (c3, b3), _ = grid.runs()
    lines: list[str] = []
    seen: list[tuple[str, str]] = []
    tracker = RunTracker(total=4, desc="smoke", show=False, log=lines.append,
                         on_result=lambda rid, r: seen.append((rid, r.status)))
    tracker.skipped()
    tracker.started(c2, b2)
    tracker.started(c3, b3)
    assert (tracker.done, len(tracker.running)) == (1, 2)
    assert tracker._bar.postfix.startswith("running 2, left 1")
    rid3 = run_id(c3.config.config_hash, b3)
    tracker.finished(rid3, result("failed"))
    assert (tracker.done, len(tracker.running)) == (2, 1) and seen == [(rid3, "failed")]
    assert tracker._bar.postfix == "running 1, left 1"
    tracker.close()
    # Without a bar, one "[i/N]" line per started run (i counts done + running).
    assert lines == [f"[2/4] {b2} {c2.setting} seed 0 ({run_id(c2.config.config_hash, b2)})",
                     f"[3/4] {b3} {c3.setting} seed 0 ({rid3})"]
