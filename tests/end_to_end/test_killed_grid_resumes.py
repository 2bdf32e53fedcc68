"""Faults lose nothing: a grid killed (SIGKILL) or interrupted (SIGINT) mid-run resumes without
recomputing or touching a finished run; Ctrl-C during ``dpcompare train`` is never swallowed
(exit 130, an ``interrupted`` record, the next invocation trains it to the end); a diverged run
is recorded and the grid goes on; a half-written (truncated) result.json is never taken as
finished.

The signal tests run the real CLI in a subprocess through :mod:`tests.end_to_end.pausing_cli`,
which pauses one chosen run inside its training loop (after its first epoch) and creates a
marker file; the test sends the signal only once the marker exists. The signal therefore always
lands while that run is in progress, whatever the machine's speed (no timing race).
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
from tests.end_to_end.helpers import TINY_GRID, cli_env, write_grid

N_RUNS = 4  # TINY_GRID: 4 privacy settings x 1 seed x torch
WAIT_SECONDS = 900  # only bounds a hang: every wait below ends on an event, not a clock
#: TINY_GRID with batches of 512: each run is 2 epochs (so the pause after epoch 1 is mid-run).
PAUSE_GRID: dict[str, Any] = {
    **TINY_GRID, "base": {**TINY_GRID["base"],
                          "train": {**TINY_GRID["base"]["train"], "batch_size": 512}},
}
TRAIN_ARGS = ["train", "--backend", "torch", "--dataset", "digits", "--model", "cnn4",
              "--set", "data.image_size=16", "--steps", "5", "--batch-size", "512",
              "--noise-multiplier", "1.0", "--faithfulness-subset", "0", "--quiet"]


def finished_results(out: Path) -> dict[Path, tuple[bytes, int]]:
    """Bytes and mtime (ns) of every stored result.json whose record is final."""
    found = {}
    for path in sorted(out.glob("runs/*/result.json")):
        result = read_result(path)
        if result is not None and result.status in ("finished", "diverged"):
            found[path] = (path.read_bytes(), path.stat().st_mtime_ns)
    return found


def _sigint_as_from_a_terminal() -> None:
    """Child set-up: SIGINT back to its default disposition. A suite started in the background
    by a shell without job control (``cmd &``, nohup, CI wrappers) hands its children SIGINT
    *ignored*, and Python then never installs its KeyboardInterrupt handler, so the command
    would sleep through the test's Ctrl-C. These tests are about what ``dpcompare`` does with
    a Ctrl-C from a terminal, where SIGINT has its default disposition."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_paused(tmp_path: Path, argv: list[str], pause_on: int) -> subprocess.Popen[str]:
    """Start ``dpcompare ARGV`` whose ``pause_on``-th run pauses mid-training; return once it
    has paused (its marker file exists)."""
    marker = tmp_path / "paused"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.end_to_end.pausing_cli", str(marker), str(pause_on),
         *map(str, argv)],
        cwd=tmp_path, env=cli_env(tmp_path / "cache"), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, preexec_fn=_sigint_as_from_a_terminal,
    )
    deadline = time.monotonic() + WAIT_SECONDS
    while not marker.exists():
        if proc.poll() is not None:
            pytest.fail(f"the command ended before its run paused: {proc.communicate()}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"run {pause_on} did not reach its first epoch in {WAIT_SECONDS} s")
        time.sleep(0.05)
    return proc


def start_grid_paused_in_second_run(tmp_path: Path) -> tuple[subprocess.Popen[str], Path, Path]:
    grid = write_grid(tmp_path / "tiny.yaml", PAUSE_GRID)
    out = tmp_path / "out"
    proc = start_paused(tmp_path, ["compare", "--config", grid, "--out", out, "--no-report",
                                   "--quiet"], pause_on=2)
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
    """The first run (finished before the signal) is kept byte for byte; the rest are done."""
    assert len(before) == 1, "exactly the first run finished before the signal"
    ran, skipped, _ = rerun(grid, out, tmp_path)
    assert (skipped, ran) == (1, N_RUNS - 1)
    after = finished_results(out)
    assert len(after) == N_RUNS
    for path, (content, mtime) in before.items():  # not recomputed, not even rewritten
        assert after[path] == (content, mtime), f"{path} changed on resume"


@pytest.mark.slow
def test_sigkill_mid_run_then_resume(tmp_path: Path) -> None:
    proc, grid, out = start_grid_paused_in_second_run(tmp_path)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=WAIT_SECONDS)
    assert proc.returncode == -signal.SIGKILL
    before = finished_results(out)
    # Atomic writes: whatever the kill interrupted, every file present is a valid record.
    records = [read_result(p) for p in out.glob("runs/*/result.json")]
    assert len(records) == 1 and all(r is not None for r in records)
    assert_resumed(before, grid, out, tmp_path)


@pytest.mark.slow
def test_sigint_mid_run_writes_state_exits_130_and_the_next_run_resumes(tmp_path: Path) -> None:
    proc, grid, out = start_grid_paused_in_second_run(tmp_path)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=WAIT_SECONDS)
    assert proc.returncode == 130, err
    assert "dpcompare compare: interrupted" in err and "Traceback" not in err
    before = finished_results(out)
    records = [read_result(p) for p in out.glob("runs/*/result.json")]
    assert all(r is not None for r in records)  # nothing half-written
    # The run in progress says so (not final); the one before it finished; none other began.
    assert sorted(r.status for r in records) == ["finished", "interrupted"]
    assert_resumed(before, grid, out, tmp_path)


@pytest.mark.slow
def test_ctrl_c_during_train_is_never_swallowed(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = start_paused(tmp_path, [*TRAIN_ARGS, "--out", out], pause_on=1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=WAIT_SECONDS)
    assert proc.returncode == 130, err
    assert "dpcompare train: interrupted" in err and "Traceback" not in err
    (path,) = out.glob("runs/*/result.json")
    record = read_result(path)
    assert record is not None and record.status == "interrupted"
    assert record.checkpoint is None and "KeyboardInterrupt" in (record.error or "")

    # The next invocation trains the same run to the end and replaces the marker.
    done = subprocess.run(
        [sys.executable, "-m", "compare.cli.main", *TRAIN_ARGS, "--out", str(out)],
        cwd=tmp_path, env=cli_env(tmp_path / "cache"), capture_output=True, text=True,
        timeout=WAIT_SECONDS,
    )
    assert done.returncode == 0, done.stderr
    (again,) = out.glob("runs/*/result.json")
    assert again == path
    final = read_result(path)
    assert final is not None and final.status == "finished" and final.checkpoint
    assert (out / final.checkpoint).is_file()
    assert final.privacy["steps_completed"] == 5


def test_interrupted_run_is_recorded_and_redone(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Deterministic version of the SIGINT test: Ctrl-C lands inside the second run."""
    import compare.training as training

    grid = expand_grid({**TINY_GRID, "axes": {"privacy": TINY_GRID["axes"]["privacy"][:2]}})
    real_load_backend = training.load_backend
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

    def patched(backend: str) -> Any:
        return InterruptOnSecondRun(real_load_backend(backend))

    monkeypatch.setattr(training, "load_backend", patched)
    with pytest.raises(KeyboardInterrupt):
        run_grid(grid, tmp_path, progress=False, log=lambda _m: None)
    store = ResultsStore(tmp_path)
    first, second = (cell.config.config_hash for cell in grid.cells)
    assert store.load(first, "torch").status == "finished"
    interrupted = store.load(second, "torch")
    assert interrupted is not None and interrupted.status == "interrupted"
    assert not store.is_finished(second, "torch")

    monkeypatch.setattr(training, "load_backend", real_load_backend)
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
        # relu and plain SGD, given in full: lr 1e6 then overflows to NaN (with the defaults'
        # tanh the activations stay bounded)
        "base": {**TINY_GRID["base"], "privacy": {"mechanism": "none"},
                 "model": {"name": "cnn4", "activation": "relu"},
                 "train": {**TINY_GRID["base"]["train"], "momentum": 0.0}},
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
