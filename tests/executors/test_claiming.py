"""Run claims in a grid (compare/executors/claiming.py with the local executor): two processes
on one store train each run exactly once and split the work; a process killed with SIGKILL
while it holds a claim does not block the grid (this host: taken over at once; another host:
after the stale time, on an injected clock); a stale claim file from a crashed run is taken
over; runs another process stored meanwhile are not trained again; Ctrl-C releases the claim.

Training is faked (tests/executors/claim_worker.py counts each training and stores a valid
record at once); processes meet through files, never through timing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from compare import cellrun
from compare.executors import LocalExecutor
from compare.grid import Grid, expand_grid, load_preset
from compare.runner import GridOutcome, run_grid
from dpcore.claims import Claim, ClaimBoard, ClaimPolicy
from dpcore.results import ResultsStore, RunResult, run_id
from tests.executors.claim_worker import fake_run_one, start_worker, trained, wait_for


class FakeTime:
    """A wall clock that only ``sleep`` moves (claims are judged on this clock)."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.slept = 0.0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.slept += seconds


def smoke(seeds: int = 1) -> Grid:
    return expand_grid(load_preset("smoke"), seeds=seeds)


def rids(grid: Grid) -> list[str]:
    return [run_id(cell.config.config_hash, backend) for cell, backend in grid.runs()]


@pytest.fixture
def control(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fake trainer's folder, and the fake in place of run_one in this process."""
    folder = tmp_path / "control"
    folder.mkdir()
    monkeypatch.setenv("CLAIM_TEST_CONTROL", str(folder))
    monkeypatch.setenv("CLAIM_TEST_MODE", "plain")
    monkeypatch.setattr(cellrun, "run_one", fake_run_one)
    return folder


def run_here(grid: Grid, out: Path, policy: ClaimPolicy | None = None,
             log: list[str] | None = None) -> GridOutcome:
    lines = [] if log is None else log
    return run_grid(grid, out, progress=False, log=lines.append,
                    executor=LocalExecutor(policy or ClaimPolicy(wait_s=0)))


def claim_of(out: Path, rid: str) -> dict:
    result = ResultsStore(out).load(*rid.rsplit("-", 1))
    assert result is not None and result.status == "finished"
    return result.perf["claim"]


def test_two_processes_train_each_run_exactly_once_and_split_the_work(
    control: Path, tmp_path: Path, processes: list[subprocess.Popen[str]],
) -> None:
    out = tmp_path / "out"
    grid = smoke(seeds=3)  # 12 runs
    for _ in range(2):
        processes.append(start_worker(control, "meet", out, "--seeds", "3"))
    outputs = [proc.communicate(timeout=600)[0] for proc in processes]
    assert [proc.returncode for proc in processes] == [0, 0], outputs
    counted = trained(control)
    assert sorted(rid for _pid, rid in counted) == sorted(rids(grid))  # each exactly once
    by_pid = {pid: [rid for p, rid in counted if p == pid] for pid, _rid in counted}
    assert set(by_pid) == {proc.pid for proc in processes}  # both trained (at the same time:
    assert all(by_pid.values())                             # they met inside a training)
    for proc, text in zip(processes, outputs, strict=True):
        ran, other = len(by_pid[proc.pid]), 12 - len(by_pid[proc.pid])
        assert (f"smoke: {ran} run(s) done, 0 already finished, 0 failed, 0 diverged, "
                f"{other} done by another process sharing {out}") in text, text
    for rid in rids(grid):
        assert claim_of(out, rid)["pid"] in by_pid and "taken_over_from" not in claim_of(
            out, rid)
    assert not list((out / "claims").iterdir())  # every claim released


def test_a_process_killed_holding_a_claim_is_taken_over_at_once_on_this_host(
    control: Path, tmp_path: Path, processes: list[subprocess.Popen[str]],
) -> None:
    out = tmp_path / "out"
    grid = smoke()
    holder = start_worker(control, "hold", out)
    processes.append(holder)
    holding = control / f"holding-{holder.pid}"
    wait_for(holding.is_file, "the worker to hold a claim")
    held = holding.read_text()
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    assert json.loads((out / "claims" / f"{held}.json").read_text())["pid"] == holder.pid
    log: list[str] = []
    # wait_s=0: a claim not taken over would be reported as still claimed, not waited for.
    outcome = run_here(grid, out, ClaimPolicy(wait_s=0), log)
    assert not outcome.still_claimed and sorted(outcome.ran) == sorted(rids(grid))
    here = [rid for pid, rid in trained(control) if pid == os.getpid()]
    assert sorted(here) == sorted(rids(grid))  # each once here (the killed try did not store)
    taken = claim_of(out, held)["taken_over_from"]
    assert taken["pid"] == holder.pid
    assert taken["reason"] == f"process {holder.pid} no longer exists on {taken['host']}"
    assert any(f"{held}: took over the claim of pid {holder.pid} on {taken['host']} "
               "(process" in line for line in log), log
    assert not list((out / "claims").iterdir())


def test_another_hosts_claim_is_waited_for_then_taken_over_after_the_stale_time(
    control: Path, tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    grid = smoke()
    held = rids(grid)[0]
    path = out / "claims" / f"{held}.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"run_id": held, "host": "node-b", "pid": 4242,
                                "started": "2026-01-01T00:00:00Z", "token": "t0"}))
    beat = path.stat().st_mtime  # node-b's last heartbeat (it was SIGKILLed just after)
    fake = FakeTime(beat + 5)
    log: list[str] = []
    outcome = run_here(grid, out, ClaimPolicy(stale_after_s=600, heartbeat_s=30, poll_s=60,
                                              clock=fake.clock, sleep=fake.sleep), log)
    assert sorted(outcome.ran) == sorted(rids(grid)) and not outcome.still_claimed
    order = [rid for _pid, rid in trained(control)]
    assert sorted(order) == sorted(rids(grid)) and order[-1] == held  # the others first
    assert 600 - 5 <= fake.slept <= 600 - 5 + 60  # waited for the stale time, one poll more
    taken = claim_of(out, held)["taken_over_from"]
    assert (taken["host"], taken["pid"], taken["token"]) == ("node-b", 4242, "t0")
    assert taken["reason"].startswith("no heartbeat for ")
    assert any(line.startswith("waiting for 1 run(s) claimed by other processes "
                               "(pid 4242 on node-b)") for line in log), log


def test_a_live_claim_past_the_wait_limit_is_reported_not_trained(
    control: Path, tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    grid = smoke()
    held = rids(grid)[1]
    other = ClaimBoard(out, ClaimPolicy(), host="node-b", pid=4242).try_claim(held)
    beat = other.info.heartbeat  # type: ignore[union-attr]
    fake = FakeTime(beat + 5)
    log: list[str] = []
    outcome = run_here(grid, out, ClaimPolicy(wait_s=120, poll_s=60, clock=fake.clock,
                                              sleep=fake.sleep), log)
    assert outcome.still_claimed == [held] and held not in outcome.ran
    assert held not in [rid for _pid, rid in trained(control)]
    assert len(outcome.ran) == 3 and fake.slept == 120
    assert (out / "claims" / f"{held}.json").is_file()  # still node-b's
    assert any("1 run(s) still claimed by other processes after waiting 2 min" in line
               and f"{held} (pid 4242 on node-b)" in line for line in log), log


@pytest.mark.parametrize("crash", ["dead process", "cut-short file"])
def test_a_stale_claim_file_from_a_crashed_run_is_taken_over(
    control: Path, tmp_path: Path, crash: str,
) -> None:
    out = tmp_path / "out"
    grid = smoke()
    held = rids(grid)[2]
    path = out / "claims" / f"{held}.json"
    path.parent.mkdir(parents=True)
    if crash == "dead process":  # this host, a process that has exited (and was reaped)
        gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True)
        path.write_text(json.dumps({"run_id": held, "host": ClaimBoard(out).host,
                                    "pid": int(gone.stdout), "started": "x", "token": "t1"}))
    else:  # a crash while the claim was written, two hours ago
        path.write_text('{"run_id": "')
        old = path.stat().st_mtime - 7200
        os.utime(path, (old, old))
    outcome = run_here(grid, out)
    assert sorted(outcome.ran) == sorted(rids(grid)) and not outcome.still_claimed
    assert sorted(rid for _pid, rid in trained(control)) == sorted(rids(grid))
    reason = claim_of(out, held)["taken_over_from"]["reason"]
    assert ("no longer exists" if crash == "dead process" else "no heartbeat") in reason


def test_a_run_another_process_stored_meanwhile_is_not_trained_again(
    control: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = tmp_path / "out"
    grid = smoke()
    first, second = grid.runs()[0], grid.runs()[1]

    def first_also_stores_second(cell, backend, grid_, store, *args, **kwargs) -> RunResult:
        if (cell, backend) == first:  # meanwhile "another process" finishes the second run
            fake_run_one(second[0], second[1], grid_, ResultsStore(out), None)
        return fake_run_one(cell, backend, grid_, store, *args, **kwargs)

    monkeypatch.setattr(cellrun, "run_one", first_also_stores_second)
    outcome = run_here(grid, out)
    second_id = run_id(second[0].config.config_hash, second[1])
    assert outcome.elsewhere == [second_id] and second_id not in outcome.ran
    assert [rid for _pid, rid in trained(control)].count(second_id) == 1


def test_a_run_another_process_finished_while_put_aside_is_not_waited_for(
    control: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = tmp_path / "out"
    grid = smoke()
    last = grid.runs()[-1]
    last_id = run_id(last[0].config.config_hash, last[1])
    node_b = ClaimBoard(out, ClaimPolicy(), host="node-b", pid=4242)
    held = node_b.try_claim(last_id)
    try_claim = ClaimBoard.try_claim

    def node_b_finishes_just_after_we_look(board: ClaimBoard, rid: str) -> object:
        got = try_claim(board, rid)
        if rid == last_id and board is not node_b and not isinstance(got, Claim):
            fake_run_one(last[0], last[1], grid, ResultsStore(out), None)  # node-b stores
            node_b.release(held)  # type: ignore[arg-type]
        return got

    monkeypatch.setattr(ClaimBoard, "try_claim", node_b_finishes_just_after_we_look)
    fake = FakeTime(0.0)
    log: list[str] = []
    outcome = run_here(grid, out, ClaimPolicy(clock=fake.clock, sleep=fake.sleep), log)
    assert outcome.elsewhere == [last_id] and len(outcome.ran) == 3
    assert fake.slept == 0 and not [line for line in log if "waiting" in line], log


def test_ctrl_c_releases_the_claim(control: Path, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*_args: object, **_kwargs: object) -> RunResult:
        raise KeyboardInterrupt

    monkeypatch.setattr(cellrun, "run_one", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_here(smoke(), tmp_path / "out")
    assert not list((tmp_path / "out" / "claims").iterdir())


def test_bad_claim_options_are_one_line_errors_and_write_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    from compare.cli.main import main

    out = tmp_path / "out"
    code = main(["compare", "--preset", "smoke", "--out", str(out), "--no-report",
                 "--claim-stale-after", "0"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--claim-stale-after=0" in err
    assert not out.exists()
