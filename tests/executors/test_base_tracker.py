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


def test_without_a_bar_each_run_line_says_the_time_so_far_and_left() -> None:
    """A 108-run preset logging to a file says how long it has left; runs already in the store
    (skipped in no time) do not shorten the estimate."""
    from compare.executors.base import duration_text

    grid = expand_grid(load_preset("smoke"))
    runs = list(grid.runs())
    now = [100.0]
    lines: list[str] = []
    tracker = RunTracker(total=4, desc="smoke", show=False, log=lines.append,
                         on_result=lambda rid, r: None, clock=lambda: now[0])
    tracker.skipped()
    (c1, b1), (c2, b2), (c3, b3) = runs[1:]
    tracker.started(c1, b1)
    now[0] += 600.0
    tracker.finished(run_id(c1.config.config_hash, b1), result("finished"))
    tracker.started(c2, b2)
    now[0] += 900.0
    tracker.finished(run_id(c2.config.config_hash, b2), result("finished"))
    tracker.started(c3, b3)
    tracker.close()
    assert lines[0].endswith(f"({run_id(c1.config.config_hash, b1)})")  # nothing ended yet
    assert lines[1].endswith("; 1 run in 10 min, about 20 min left")  # 2 to end, 600 s each
    assert lines[2].endswith("; 2 runs in 25 min, about 12 min left")  # 1 to end, 750 s
    assert [duration_text(s) for s in (-1, 59.4, 60, 3599, 3600, 9900)] == [
        "0 s", "59 s", "1 min", "59 min", "1 h 00 min", "2 h 45 min"]
