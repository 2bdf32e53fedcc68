"""Faults lose nothing: a grid killed (SIGKILL) or interrupted (SIGINT) mid-way resumes without
recomputing or touching a finished run; a diverged run is recorded and the grid goes on; a
half-written (truncated) result.json is never taken as finished.

The kill tests run the real CLI in a subprocess on a tiny grid (digits at 16x16, cnn4, 5 steps,
torch only, 4 cells), wait for the first stored result, then send the signal.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from compare.grid import expand_grid
from compare.runner import run_grid
from dpcore.results import ResultsStore, read_result
from tests.reliability.helpers import TINY_GRID, cli_env, popen_cli, write_grid

N_RUNS = 4  # TINY_GRID: 4 privacy settings x 1 seed x torch
WAIT_SECONDS = 240


def finished_results(out: Path) -> dict[Path, tuple[bytes, int]]:
    """Bytes and mtime (ns) of every stored result.json whose record is final."""
    found = {}
    for path in sorted(out.glob("runs/*/result.json")):
        result = read_result(path)
        if result is not None and result.status in ("finished", "diverged"):
            found[path] = (path.read_bytes(), path.stat().st_mtime_ns)
    return found


def start_grid_and_wait_for_first_result(tmp_path: Path) -> tuple[subprocess.Popen[str], Path,
                                                                   Path]:
    grid = write_grid(tmp_path / "tiny.yaml")
    out = tmp_path / "out"
    proc = popen_cli(["compare", "--config", grid, "--out", out, "--no-report", "--quiet"],
                     cache=tmp_path / "cache", cwd=tmp_path)
    deadline = time.monotonic() + WAIT_SECONDS
    while not finished_results(out):
        if proc.poll() is not None:
            pytest.fail(f"the grid ended before it could be interrupted: {proc.communicate()}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("no result.json appeared in time")
        time.sleep(0.05)
    return proc, grid, out


def rerun(grid: Path, out: Path, tmp_path: Path) -> tuple[int, int, str]:
    """Run the same command again to the end; returns (runs done, runs skipped, stdout)."""
    done = subprocess.run(
        [sys.executable, "-m", "compare.cli.main", "compare", "--config", str(grid),
         "--out", str(out), "--no-report"],
        cwd=tmp_path, env=cli_env(tmp_path / "cache"), capture_output=True, text=True,
        timeout=WAIT_SECONDS,
    )
    assert done.returncode == 0, done.stderr
    match = re.search(r"(\d+) run\(s\) done, (\d+) already finished, 0 failed", done.stdout)
    assert match, done.stdout
    return int(match[1]), int(match[2]), done.stdout


def assert_resumed(before: dict[Path, tuple[bytes, int]], grid: Path, out: Path,
                   tmp_path: Path) -> None:
    assert 1 <= len(before) < N_RUNS, "the signal must land mid-grid"
    ran, skipped, _ = rerun(grid, out, tmp_path)
    assert skipped == len(before) and ran == N_RUNS - len(before)
    after = finished_results(out)
    assert len(after) == N_RUNS
    for path, (content, mtime) in before.items():  # not recomputed, not even rewritten
        assert after[path] == (content, mtime), f"{path} changed on resume"


@pytest.mark.slow
def test_sigkill_mid_grid_then_resume(tmp_path: Path) -> None:
    proc, grid, out = start_grid_and_wait_for_first_result(tmp_path)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    before = finished_results(out)
    # Atomic writes: whatever the kill interrupted, every file present is a valid record.
    for path in out.glob("runs/*/result.json"):
        assert read_result(path) is not None, f"half-written {path}"
    assert_resumed(before, grid, out, tmp_path)


@pytest.mark.slow
def test_sigint_stops_after_writing_state_and_the_next_run_resumes(tmp_path: Path) -> None:
    proc, grid, out = start_grid_and_wait_for_first_result(tmp_path)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "dpcompare compare: interrupted" in err and "Traceback" not in err
    before = finished_results(out)
    records = [read_result(p) for p in out.glob("runs/*/result.json")]
    assert all(r is not None for r in records)  # nothing half-written
    # The run in progress (if the signal landed in one) says so; it is not final.
    assert {r.status for r in records} <= {"finished", "interrupted"}
    assert_resumed(before, grid, out, tmp_path)


def test_interrupted_run_is_recorded_and_redone(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Deterministic version of the SIGINT test: Ctrl-C lands inside the second run."""
    import compare.runner as runner

    grid = expand_grid({**TINY_GRID, "axes": {"privacy": TINY_GRID["axes"]["privacy"][:2]}})
    real_backend_module = runner.backend_module
    calls = {"n": 0}

    class InterruptOnSecondRun:
        def __init__(self, module: Any) -> None:
            self.module = module

        def __getattr__(self, name: str) -> Any:
            return getattr(self.module, name)

        def train(self, *args: Any, **kwargs: Any) -> Any:
            calls["n"] += 1
            if calls["n"] == 2:
                raise KeyboardInterrupt
            return self.module.train(*args, **kwargs)

    def patched(backend: str, part: str) -> Any:
        module = real_backend_module(backend, part)
        return InterruptOnSecondRun(module) if part == "train" else module

    monkeypatch.setattr(runner, "backend_module", patched)
    with pytest.raises(KeyboardInterrupt):
        run_grid(grid, tmp_path, progress=False, log=lambda _m: None)
    store = ResultsStore(tmp_path)
    first, second = (cell.config.config_hash for cell in grid.cells)
    assert store.load(first, "torch").status == "finished"
    interrupted = store.load(second, "torch")
    assert interrupted is not None and interrupted.status == "interrupted"
    assert not store.is_finished(second, "torch")

    monkeypatch.setattr(runner, "backend_module", real_backend_module)
    kept = (store.run_dir(first, "torch") / "result.json").read_bytes()
    outcome = run_grid(grid, tmp_path, progress=False, log=lambda _m: None)
    assert outcome.skipped == [f"{first}-torch"] and outcome.ran == [f"{second}-torch"]
    assert store.load(second, "torch").status == "finished"
    assert (store.run_dir(first, "torch") / "result.json").read_bytes() == kept


def test_diverged_run_is_recorded_the_grid_goes_on_and_truncated_results_are_redone(
    tmp_path: Path,
) -> None:
    grid = expand_grid({
        **TINY_GRID,
        "base": {**TINY_GRID["base"], "privacy": {"mechanism": "none"}},
        "axes": {"lr": [{"label": "lr=1e6", "train": {"lr": 1e6}},
                        {"label": "lr=0.5", "train": {"lr": 0.5}}]},
    })
    outcome = run_grid(grid, tmp_path, progress=False, log=lambda _m: None)
    store = ResultsStore(tmp_path)
    huge, normal = (cell.config.config_hash for cell in grid.cells)
    assert outcome.diverged == [f"{huge}-torch"] and not outcome.failed
    assert len(outcome.ran) == 2
    diverged = store.load(huge, "torch")
    assert diverged.status == "diverged" and diverged.metrics.get("diverged_at_step")
    assert store.load(normal, "torch").status == "finished"  # the grid went on

    # A result.json cut short (as by a crash of a non-atomic writer): not finished, redone.
    path = store.run_dir(normal, "torch") / "result.json"
    text = path.read_text()
    path.write_text(text[: len(text) // 2])
    messages: list[str] = []
    with pytest.warns(UserWarning, match="unreadable run record .*result.json"):
        again = run_grid(grid, tmp_path, progress=False, log=messages.append)
    assert again.ran == [f"{normal}-torch"]
    assert again.skipped == [f"{huge}-torch"]  # a diverged run is final: not retried
    assert any("unreadable, not final; redoing" in m for m in messages)
    redone = read_result(path)
    assert redone is not None and redone.status == "finished"
