"""The order in which an executor takes a grid's runs when other processes share the store.

Every executor (local, Ray) goes through :class:`GridClaims`: :meth:`GridClaims.next` claims
the next run nobody holds (:mod:`dpcore.claims`) and hands it over to be trained; a run another
live process holds is put aside and looked at again later; a run whose record another process
stored since this grid was listed is not trained again (reported as done elsewhere). When no
run is left to claim, :meth:`GridClaims.wait` waits for the runs others hold (a progress line
now and then), takes over those whose holder died, and gives up after ``policy.wait_s``
(the runs left are reported as still claimed). The claims are held by the process that
schedules the runs (the Ray driver for Ray tasks), whose heartbeat keeps them alive.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from compare.executors.base import RunTracker, duration_text
from dpcore.claims import Claim, ClaimBoard, ClaimInfo, ClaimPolicy, Heartbeat, heartbeat
from dpcore.results import (
    FINAL_STATUSES,
    RESULT_FILE,
    ResultsStore,
    RunResult,
    read_result,
    run_id,
)

if TYPE_CHECKING:
    from compare.grid import GridCell

#: Seconds between two progress lines while waiting for runs held by other processes.
WAIT_LINE_S = 60.0

Run = tuple["GridCell", str]


def record_state(path: Path) -> tuple[int, int] | None:
    """(modification time in ns, size) of a record file, None if absent."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return stat.st_mtime_ns, stat.st_size


class GridClaims:
    """Claims of one grid invocation (see the module docstring).

    Args:
        out_dir: the results store.
        pending: the runs not finished when the grid was listed, in grid order.
        tracker: told about runs done elsewhere or still claimed at the end.
        log: progress lines.
        policy: stale time, wait limit, clock and sleep.
        board: the claim files (default: the store's, this host and process).
    """

    def __init__(self, out_dir: Path, pending: Sequence[Run], tracker: RunTracker,
                 log: Callable[[str], None], policy: ClaimPolicy,
                 board: ClaimBoard | None = None) -> None:
        self.store = ResultsStore(out_dir)
        self.board = board or ClaimBoard(out_dir, policy)
        self.policy = self.board.policy
        self.tracker = tracker
        self.log = log
        self.queue: deque[Run] = deque(pending)
        self.deferred: dict[str, tuple[Run, ClaimInfo]] = {}
        self._listed = {self._rid(run): record_state(self._record(run)) for run in pending}
        self._beat: Heartbeat | None = None
        self._wait_started: float | None = None
        self._last_line = -float("inf")
        self._last_look = -float("inf")

    @staticmethod
    def _rid(run: Run) -> str:
        return run_id(run[0].config.config_hash, run[1])

    def _record(self, run: Run) -> Path:
        return self.store.run_dir(run[0].config.config_hash, run[1]) / RESULT_FILE

    @contextlib.contextmanager
    def active(self) -> Iterator[GridClaims]:
        """The heartbeat runs inside; claims still held on exit (Ctrl-C, an error) are
        released."""
        with heartbeat(self.board) as beat:
            self._beat = beat
            try:
                yield self
            finally:
                self._beat = None

    # ------------------------------------------------------------------ taking runs
    def next(self) -> tuple[GridCell, str, Claim] | None:
        """Claim the next run to train here, or None when none is free now (runs held by
        others may remain: see :meth:`wait`)."""
        assert self._beat is not None, "use GridClaims inside active()"
        if not self.queue and self.deferred:
            now = self.policy.clock()
            if now - self._last_look >= self.policy.poll_s:
                self._last_look = now
                self._look_again()
        while self.queue:
            run = self.queue.popleft()
            rid = self._rid(run)
            got = self.board.try_claim(rid)
            if isinstance(got, ClaimInfo):
                self.deferred[rid] = (run, got)
                continue
            self._beat.add(got)  # from here on released on exit, whatever happens
            done = self._done_elsewhere(run)
            if done is not None:
                self._beat.remove(got)
                self.board.release(got)
                self.tracker.elsewhere(rid, done)
                continue
            if got.taken_over_from is not None:
                dead = got.taken_over_from
                who = (f"the claim of pid {dead['pid']} on {dead['host']}" if dead["host"]
                       else "an unreadable claim")
                self.log(f"  {rid}: took over {who} ({dead['reason']})")
            return run[0], run[1], got
        return None

    def _done_elsewhere(self, run: Run) -> RunResult | None:
        """The record another process stored for ``run`` since the grid was listed: final,
        or failed (not retried in this invocation); None when the run is to be trained.

        A final record already there when the grid was listed is not one: the run was listed
        to train because that record lacks an evaluation the grid asks for
        (:mod:`compare.runplan`)."""
        path = self._record(run)
        state = record_state(path)
        if state is None:
            return None
        result = read_result(path)
        if result is None:
            return None
        changed = state != self._listed.get(self._rid(run))
        if result.status in FINAL_STATUSES:
            return result if changed else None
        return result if changed and result.status == "failed" else None

    def finished(self, claim: Claim, result: RunResult) -> RunResult:
        """Book ``result`` (already stored) of a claimed run: its record gets ``perf.claim``
        (who trained it, and whose dead claim it took over), then the claim is released."""
        if self._beat is not None:
            self._beat.remove(claim)
        result.perf["claim"] = claim.record()
        with contextlib.suppress(OSError):  # the record without perf.claim is still valid
            self.store.save(result)
        if claim.lost:
            self.log(f"  {claim.info.run_id}: warning: another process took this run's claim "
                     "over while it trained (no heartbeat seen); it may have trained it too")
        self.board.release(claim)
        return result

    # ------------------------------------------------------------------ runs held by others
    def _look_again(self) -> None:
        """Re-examine the runs others held: a claim released or dead puts its run back in the
        queue, where :meth:`next` claims it (or takes it over), then reports it as done
        elsewhere if the other process stored it, or trains it."""
        for rid, (run, _seen) in list(self.deferred.items()):
            holder = self.board.read(rid)
            if holder is not None and self.board.dead_reason(holder) is None:
                self.deferred[rid] = (run, holder)
                continue
            del self.deferred[rid]
            self.queue.append(run)

    def wait(self) -> bool:
        """Nothing to claim now: wait for the runs others hold. Returns True when the caller
        should try :meth:`next` again, False when nothing is left to wait for (or the wait
        limit passed: the runs still held are reported to the tracker and logged)."""
        if self.queue:
            return True
        if not self.deferred:
            return False
        self._last_look = self.policy.clock()
        self._look_again()  # most runs put aside earlier are done by now: claim-checked next
        if self.queue:
            return True
        now = self.policy.clock()
        if self._wait_started is None:
            self._wait_started = now
        waited = now - self._wait_started
        if self.policy.wait_s is not None and waited >= self.policy.wait_s:
            held = [f"{rid} ({info.describe()})" for rid, (_r, info) in self.deferred.items()]
            self.log(f"{len(held)} run(s) still claimed by other processes after waiting "
                     f"{duration_text(waited)} (--claim-wait): {', '.join(held)}; they are "
                     "not trained here. Re-run the command (or dpcompare report) once those "
                     "processes end")
            for rid in list(self.deferred):
                self.tracker.still_claimed(rid)
            self.deferred.clear()
            return False
        if now - self._last_line >= WAIT_LINE_S:
            self._last_line = now
            holders = sorted({info.describe() for _run, info in self.deferred.values()})
            self.log(f"waiting for {len(self.deferred)} run(s) claimed by other processes "
                     f"({', '.join(holders)}); {duration_text(waited)} so far")
        self.policy.sleep(self.policy.poll_s)
        return True
