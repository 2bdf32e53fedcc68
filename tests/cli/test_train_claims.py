"""``dpcompare train`` takes the same run claim as ``compare``: two real ``train`` processes on
one ``--out`` train the run once. The second says which process is training it, when it claimed
it and where its result will be; by default it waits and returns that result (nothing trained
or written), with ``--claim-wait 0`` it stops at once (exit 2).

The processes meet through files and output lines (tests/cli/train_claim_worker.py holds the
first one inside its training until the test releases it), never through timing.
"""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from dpcore.results import read_result
from tests.end_to_end.helpers import REPO, cli_env
from tests.executors.claim_worker import wait_for

ARGS = ["--backend", "torch", "--dataset", "digits", "--model", "cnn4", "--set",
        "data.image_size=16", "--steps", "3", "--batch-size", "64", "--noise-multiplier", "1.0",
        "--faithfulness-subset", "0"]
#: Bound on waiting for a process's file or line (a hang guard; the waits end on events).
WAIT_S = 600.0


@pytest.fixture()
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:  # a failed test leaves no worker behind
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def start(tmp_path: Path, control: Path, mode: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.cli.train_claim_worker", str(control), mode, "--",
         *ARGS, "--out", str(tmp_path / "out"), *extra],
        cwd=REPO, env=cli_env(tmp_path / "cache"), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)


def lines_of(stream: object) -> queue.Queue[str | None]:
    """The stream's lines as a reader thread sees them (None at its end)."""
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        for line in stream:  # type: ignore[attr-defined]
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    return lines


def wait_for_line(lines: queue.Queue[str | None], fragment: str) -> tuple[str, list[str]]:
    """The first line holding ``fragment``, and every line read so far."""
    seen: list[str] = []
    while True:
        line = lines.get(timeout=WAIT_S)
        if line is None:
            pytest.fail(f"the process ended without a line holding {fragment!r}: {seen}")
        seen.append(line)
        if fragment in line:
            return line, seen


def first_training(tmp_path: Path, control: Path,
                   processes: list[subprocess.Popen[str]]) -> subprocess.Popen[str]:
    """The first process, held inside its training (it holds the run's claim)."""
    first = start(tmp_path, control, "gate")
    processes.append(first)
    lines_of(first.stderr)  # drained, so that the process never blocks on a full pipe
    marker = control / f"training-{first.pid}"
    wait_for(lambda: marker.exists() or first.poll() is not None, "the first to train")
    if not marker.exists():
        pytest.fail(f"the first process ended before training (status {first.returncode})")
    return first


def trainings(control: Path) -> list[int]:
    return [int(pid) for pid in (control / "trained.log").read_text().split()]


def test_a_second_train_waits_for_the_first_and_trains_nothing(
        tmp_path: Path, processes: list[subprocess.Popen[str]]) -> None:
    control = tmp_path / "control"
    control.mkdir()
    first = first_training(tmp_path, control, processes)
    (claim,) = (tmp_path / "out" / "claims").glob("*.json")
    rid = claim.stem
    record = tmp_path / "out" / "runs" / rid / "result.json"
    second = start(tmp_path, control, "plain")
    processes.append(second)
    line, _seen = wait_for_line(lines_of(second.stderr), "is being trained by")
    assert (f"run {rid} is being trained by pid {first.pid} on " in line
            and "(claimed at " in line and f"its result will be at {record}" in line
            and "waiting for it" in line), line
    (control / "release").touch()
    assert first.wait(timeout=WAIT_S) == 0
    assert second.wait(timeout=WAIT_S) == 0
    out = second.stdout.read() if second.stdout else ""
    assert trainings(control) == [first.pid]  # trained once, by the first process
    result = read_result(record)
    assert result is not None and result.status == "finished"
    assert result.perf["claim"]["pid"] == first.pid  # not overwritten by the second
    assert f"pid {first.pid} on" in out and "nothing trained here" in out
    assert not list((tmp_path / "out" / "claims").iterdir())  # released


def test_with_claim_wait_0_the_second_stops_at_once_in_one_line(
        tmp_path: Path, processes: list[subprocess.Popen[str]]) -> None:
    control = tmp_path / "control"
    control.mkdir()
    first = first_training(tmp_path, control, processes)
    second = start(tmp_path, control, "plain", "--claim-wait", "0")
    processes.append(second)
    _out, err = second.communicate(timeout=WAIT_S)  # ends without waiting for the first
    assert second.returncode == 2, err
    (line,) = (row for row in err.splitlines() if ": error: " in row)
    assert line.startswith("dpcompare train: error: run ") and "Traceback" not in err
    assert f"is being trained by pid {first.pid} on " in line
    assert "result.json; not trained here (--claim-wait 0: no wait)" in line
    (control / "release").touch()
    assert first.wait(timeout=WAIT_S) == 0
    assert trainings(control) == [first.pid]
