"""``dpcompare train`` takes the same run claim as a grid (:mod:`dpcore.claims`), so two
``train`` processes (or a ``train`` and a ``compare``) on one ``--out`` train a run once.

:func:`train_claimed` claims the run before it trains. When another live process holds the
claim, one line says so: ``run RID is being trained by pid P on HOST (claimed at T); its
result will be at OUT/runs/RID/result.json``; then

* by default this process waits (a look every ``policy.poll_s``) until the claim is released
  or dead. If the other process stored a final record meanwhile (finished or diverged), that
  record is returned and nothing is trained or written here; otherwise (it failed, was
  interrupted or died) the run is trained here;
* with a wait limit (``--claim-wait SECONDS``; 0: do not wait), reaching it raises
  :class:`RunClaimedError` with that line: nothing is trained or written.

A claim is held with a heartbeat while the run trains, released when its record is stored (or
on any error, Ctrl-C included), and the record keeps ``perf.claim`` (who trained it, and whose
dead claim it took over) as a grid's records do. A run trained again on purpose, after the
first process ended, is trained and overwritten as before: only concurrent processes share.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

from compare.executors.base import duration_text
from compare.executors.claiming import record_state
from dpcore.claims import Claim, ClaimBoard, ClaimInfo, ClaimPolicy, heartbeat
from dpcore.errors import ConfigError, DpCompareError
from dpcore.results import FINAL_STATUSES, RESULT_FILE, ResultsStore, RunResult, read_result

Log = Callable[[str], None]

__all__ = ["RunClaimedError", "claim_policy", "held_line", "train_claimed"]


class RunClaimedError(DpCompareError):
    """Another live process holds the run's claim, and this one was not to wait (longer)."""


def claim_policy(wait_s: float | None = None, stale_after_s: float | None = None
                 ) -> ClaimPolicy:
    """The claim policy of ``train``'s ``--claim-wait`` and ``--claim-stale-after``."""
    return ClaimPolicy.from_options(wait_s, stale_after_s)


def held_line(holder: ClaimInfo, record: Path) -> str:
    """``run RID is being trained by pid P on HOST (claimed at T); its result will be at
    RECORD``."""
    who = (f"pid {holder.pid} on {holder.host} (claimed at {holder.started})"
           if holder.host is not None else "another process (its claim is being written)")
    return (f"run {holder.run_id} is being trained by {who}; its result will be at {record}")


def _claim(board: ClaimBoard, rid: str, record: Path, log: Log) -> Claim:
    """Claim ``rid``, waiting for another live holder as the policy says."""
    policy = board.policy
    started: float | None = None
    while True:
        got = board.try_claim(rid)
        if isinstance(got, Claim):
            return got
        line = held_line(got, record)
        now = policy.clock()
        if policy.wait_s == 0:
            raise RunClaimedError(f"{line}; not trained here (--claim-wait 0: no wait)")
        if started is None:
            started = now
            limit = ("until it ends" if policy.wait_s is None
                     else f"at most {duration_text(policy.wait_s)}")
            log(f"{line}; waiting for it ({limit}; --claim-wait)")
        elif policy.wait_s is not None and now - started >= policy.wait_s:
            raise RunClaimedError(f"{line}; not trained here: still held after waiting "
                                  f"{duration_text(now - started)} (--claim-wait)")
        policy.sleep(policy.poll_s)


def train_claimed(store: ResultsStore, rid: str, train: Callable[[], RunResult], *,
                  policy: ClaimPolicy | None = None, log: Log | None = None) -> RunResult:
    """Run ``train`` (which stores the run ``rid`` in ``store`` and returns its record) under
    the run's claim; returns the stored record (see the module docstring).

    Raises:
        RunClaimedError: another live process holds the claim past ``policy.wait_s``.
        StorageError: the claim file could not be written (no space, read-only folder).
        ConfigError: ``train`` refused the run before training it; the folders that taking
            the claim created are removed again when they hold no file.
    """
    say: Log = log or (lambda _line: None)
    policy = policy or claim_policy()
    created = missing_folders(store.root)
    try:
        return _train_under_claim(store, rid, train, policy, say)
    except ConfigError:  # refused before training: leave no folder the claim alone created
        remove_if_empty(created)
        raise


def missing_folders(root: Path) -> list[Path]:
    """``root`` and its ancestors that do not exist yet, deepest first (what taking a claim
    under ``root`` creates)."""
    out: list[Path] = []
    path = Path(root)
    while not path.exists() and path != path.parent:
        out.append(path)
        path = path.parent
    return out


def remove_if_empty(folders: list[Path]) -> None:
    """Remove each of ``folders`` (deepest first) whose tree holds no file: what a released
    claim leaves behind; a folder with any file in it (another writer's) is kept."""
    for folder in folders:
        if folder.is_dir() and not any(p.is_file() for p in folder.rglob("*")):
            for sub in sorted(folder.rglob("*"), key=lambda p: len(p.parts), reverse=True):
                with contextlib.suppress(OSError):
                    sub.rmdir()
            with contextlib.suppress(OSError):
                folder.rmdir()


def _train_under_claim(store: ResultsStore, rid: str, train: Callable[[], RunResult],
                       policy: ClaimPolicy, say: Log) -> RunResult:
    """:func:`train_claimed`'s body: the claim taken, the record checked, ``train`` run."""
    board = ClaimBoard(store.root, policy)
    record = store.runs_dir / rid / RESULT_FILE
    before = record_state(record)
    claim = _claim(board, rid, record, say)
    with heartbeat(board) as beat:  # the claim is released on leaving, whatever happens
        beat.add(claim)
        if claim.taken_over_from is not None:
            dead = claim.taken_over_from
            say(f"run {rid}: took over the claim of pid {dead['pid']} on {dead['host']} "
                f"({dead['reason']})")
        if record_state(record) != before:
            stored = read_result(record)
            if stored is not None and stored.status in FINAL_STATUSES:
                who = (stored.perf.get("claim") or {})
                say(f"run {rid} was trained meanwhile by pid {who.get('pid', '?')} on "
                    f"{who.get('host', '?')}: its record {record} is the result; nothing "
                    "trained or written here")
                return stored
        result = train()
        result.perf["claim"] = claim.record()
        with contextlib.suppress(OSError):  # the record without perf.claim is still valid
            store.save(result)
        if claim.lost:
            say(f"run {rid}: warning: another process took this run's claim over while it "
                "trained (no heartbeat seen); it may have trained it too")
        return result
