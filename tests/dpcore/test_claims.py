"""Run claims (dpcore/claims.py) on one folder, with injected clocks, hosts and process ids:
exclusive claims, release, takeover of dead claims (gone process on this host, no heartbeat on
any host, a file cut short by a crash), two takers of one dead claim (exactly one wins), the
heartbeat, zombies, and the policy's one-line errors. No sleeps: staleness is a clock value."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dpcore.claims import (
    Claim,
    ClaimBoard,
    ClaimInfo,
    ClaimPolicy,
    Heartbeat,
    heartbeat,
    pid_alive,
)
from dpcore.errors import ConfigError

RID = "abc123-torch"


class FakeClock:
    """Wall-clock seconds that move only when told to."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def board(root: Path, *, host: str = "node-a", pid: int = 100, clock: FakeClock | None = None,
          alive: set[int] | None = None, stale: float = 600.0) -> ClaimBoard:
    policy = ClaimPolicy(stale_after_s=stale, heartbeat_s=stale / 4,
                         clock=clock or FakeClock(os.path.getmtime(root) + 1))
    living = {100, 200} if alive is None else alive
    return ClaimBoard(root, policy, host=host, pid=pid, alive=lambda p: p in living)


def test_only_one_process_claims_a_run_until_it_releases_it(tmp_path: Path) -> None:
    first, second = board(tmp_path, pid=100), board(tmp_path, pid=200)
    held = first.try_claim(RID)
    assert isinstance(held, Claim) and held.taken_over_from is None
    other = second.try_claim(RID)
    assert isinstance(other, ClaimInfo)
    assert (other.host, other.pid, other.token) == ("node-a", 100, held.info.token)
    first.release(held)
    assert not held.path.exists()
    assert isinstance(second.try_claim(RID), Claim)


def test_a_claim_of_a_gone_process_on_this_host_is_taken_over_at_once(tmp_path: Path) -> None:
    dead = board(tmp_path, pid=300).try_claim(RID)
    assert isinstance(dead, Claim)
    taker = board(tmp_path, pid=200, alive={200})  # pid 300 no longer exists
    got = taker.try_claim(RID)
    assert isinstance(got, Claim) and got.taken_over_from is not None
    assert got.taken_over_from["pid"] == 300 and got.taken_over_from["host"] == "node-a"
    assert got.taken_over_from["token"] == dead.info.token
    assert "process 300 no longer exists on node-a" in got.taken_over_from["reason"]
    assert taker.read(RID).token == got.info.token  # type: ignore[union-attr]
    assert not list(tmp_path.glob("claims/*.dead-*"))  # the dead claim's file is gone
    board(tmp_path, pid=300).release(dead)  # a late release of the dead claim is a no-op
    assert taker.holds(got)


def test_another_hosts_claim_is_dead_only_after_the_stale_time(tmp_path: Path) -> None:
    held = board(tmp_path, host="node-b", pid=100).try_claim(RID)
    assert isinstance(held, Claim)
    beat = held.info.heartbeat
    clock = FakeClock(beat + 599)
    taker = board(tmp_path, host="node-a", pid=100, clock=clock, alive=set())
    assert isinstance(taker.try_claim(RID), ClaimInfo)  # pid not checked across hosts
    clock.now = beat + 601
    got = taker.try_claim(RID)
    assert isinstance(got, Claim) and got.taken_over_from is not None
    assert got.taken_over_from["host"] == "node-b"
    assert got.taken_over_from["reason"].startswith("no heartbeat for 601 s")


def test_a_claim_file_cut_short_by_a_crash_is_live_until_stale(tmp_path: Path) -> None:
    path = tmp_path / "claims" / f"{RID}.json"
    path.parent.mkdir()
    path.write_bytes(b'{"host": "no')  # the holder crashed while writing it
    mtime = path.stat().st_mtime
    clock = FakeClock(mtime + 10)
    taker = board(tmp_path, clock=clock)
    seen = taker.try_claim(RID)
    assert isinstance(seen, ClaimInfo) and seen.host is None  # may be being written
    assert seen.describe() == "an unreadable claim"
    clock.now = mtime + 3600
    got = taker.try_claim(RID)
    assert isinstance(got, Claim) and got.taken_over_from is not None
    assert got.taken_over_from["token"] is None


def test_two_takers_of_one_dead_claim_cannot_both_win(tmp_path: Path) -> None:
    dead = board(tmp_path, pid=300).try_claim(RID)
    assert isinstance(dead, Claim)
    a = board(tmp_path, pid=100, alive={100, 200})
    b = board(tmp_path, pid=200, alive={100, 200})
    seen_by_a, seen_by_b = a.read(RID), b.read(RID)  # both judged it dead
    assert seen_by_a is not None and seen_by_b is not None
    assert a.dead_reason(seen_by_a) and b.dead_reason(seen_by_b)
    assert a._remove_dead(seen_by_a)  # a's rename wins...
    won = a._create(RID)
    assert won is not None
    assert not b._remove_dead(seen_by_b)  # ...b's moves a's fresh claim, sees it, puts it back
    assert a.holds(won)
    assert isinstance(b.try_claim(RID), ClaimInfo)  # and b now finds a live claim
    assert [p.name for p in (tmp_path / "claims").iterdir()] == [f"{RID}.json"]


def test_a_rename_lost_to_another_taker_is_not_a_win(tmp_path: Path) -> None:
    dead = board(tmp_path, pid=300).try_claim(RID)
    assert isinstance(dead, Claim)
    a, b = board(tmp_path, pid=100), board(tmp_path, pid=200)
    seen = b.read(RID)
    assert seen is not None
    assert a._remove_dead(seen)  # a moved it away; a has not created its own claim yet
    assert not b._remove_dead(seen)  # b finds no file: not a win
    assert isinstance(b.try_claim(RID), Claim)  # and then claims the free run normally


def test_heartbeat_refreshes_held_claims_and_notices_a_lost_one(tmp_path: Path) -> None:
    holder = board(tmp_path, pid=100)
    held = holder.try_claim(RID)
    assert isinstance(held, Claim)
    os.utime(held.path, (1_000_000.0, 1_000_000.0))
    beat = Heartbeat(holder)
    beat.add(held)
    beat.beat()
    assert held.path.stat().st_mtime > 1_000_000.0 and not held.lost
    # Another process judged it dead and took it over: the next beat notices, leaves it alone.
    clock = FakeClock(held.path.stat().st_mtime + 3600)
    stolen = board(tmp_path, pid=200, clock=clock).try_claim(RID)
    assert isinstance(stolen, Claim) and stolen.taken_over_from is not None
    mtime = held.path.stat().st_mtime_ns
    beat.beat()
    assert held.lost and held.record()["lost"] is True
    assert held.path.stat().st_mtime_ns == mtime
    holder.release(held)  # not ours any more: stays
    assert board(tmp_path, pid=200).holds(stolen)


def test_claims_still_held_when_the_heartbeat_stops_are_released(tmp_path: Path) -> None:
    holder = board(tmp_path)
    with pytest.raises(KeyboardInterrupt), heartbeat(holder) as beat:
        held = holder.try_claim(RID)
        assert isinstance(held, Claim)
        beat.add(held)
        raise KeyboardInterrupt
    assert not list((tmp_path / "claims").iterdir())


def test_pid_alive_sees_exited_and_zombie_processes_as_gone() -> None:
    assert pid_alive(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    # Wait for the exit without reaping it: the child is a zombie until child.wait().
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
    assert not pid_alive(child.pid)
    child.wait()
    assert not pid_alive(child.pid)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"stale_after_s": 0}, "--claim-stale-after=0 must be > 0 seconds"),
    ({"wait_s": -1}, "--claim-wait=-1 must be >= 0 seconds"),
    ({"stale_after_s": 10, "heartbeat_s": 10}, "heartbeat 10 s must be > 0 and below"),
])
def test_bad_policy_is_a_one_line_error(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")) as info:
        ClaimPolicy(**kwargs)
    assert "\n" not in str(info.value)
