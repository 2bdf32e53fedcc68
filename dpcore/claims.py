"""Run claims: at most one process trains a run of a shared results store at a time.

Before a process trains run ``RID`` it creates ``STORE/claims/RID.json`` with an atomic
exclusive create (``os.open(O_CREAT | O_EXCL)``): exactly one process succeeds. The file
holds the holder's host, process id, start time and a random token; a heartbeat thread
(:class:`Heartbeat`) touches its modification time every ``heartbeat_s`` seconds while the run
trains, and the holder removes it when the run's record is stored (:meth:`ClaimBoard.release`).

A claim is **dead**, and may be taken over, when

* its modification time is more than ``stale_after_s`` seconds old by the reader's clock (no
  heartbeat: the holder, its host or the heartbeat thread is gone; any host), or
* it names this host and its process no longer exists (or is a zombie): taken over at once.

Takeover is rename-based so that two takers cannot both win: a taker renames the dead claim
file to a name of its own; only one rename of that file succeeds (the others find no file).
The winner checks that the file it moved is the one it judged dead (same inode and token; if a
fresh claim appeared in between it is put back with an exclusive ``link``) and then creates
its own claim with the same exclusive create as a first claim. The previous holder is kept in
:attr:`Claim.taken_over_from`, which the grid runner stores in the run's record.

What this needs from the file system (the results store on a shared disk): atomic exclusive
create (local file systems; NFSv3 and later), atomic ``rename`` and ``link`` within one folder
(POSIX, NFS), and clocks of the hosts that agree to well within ``stale_after_s`` (NTP);
NFS attribute caching delays a reader's view of a heartbeat by up to ``actimeo`` (60 s by
default), far below the default 10 minutes. Nothing here imports a framework.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpcore.errors import ConfigError
from dpcore.storage import is_storage_fault, storage_error

#: Folder of the claim files inside a results store.
CLAIMS_FOLDER = "claims"
#: Seconds without a heartbeat after which a claim of any host is dead (default).
STALE_AFTER_S = 600.0
#: Seconds between two heartbeats of a held claim (default).
HEARTBEAT_S = 30.0
#: Seconds between two looks at runs claimed by other processes while waiting for them.
POLL_S = 5.0

Clock = Callable[[], float]


@dataclass(frozen=True)
class ClaimPolicy:
    """How claims are kept and judged.

    Attributes:
        stale_after_s: seconds without a heartbeat after which a claim is dead (> 0).
        heartbeat_s: seconds between heartbeats of a held claim (> 0, below stale_after_s).
        wait_s: seconds a grid waits at its end for runs other processes still hold; None
            waits until they end (finished, released, or dead and then taken over).
        poll_s: seconds between two looks at the runs held by others (> 0).
        clock: wall-clock seconds since the epoch, compared with claim files' modification
            times (injectable for tests).
        sleep: waits a number of seconds (injectable for tests: a fake advances ``clock``).
    """

    stale_after_s: float = STALE_AFTER_S
    heartbeat_s: float = HEARTBEAT_S
    wait_s: float | None = None
    poll_s: float = POLL_S
    clock: Clock = field(default=time.time, compare=False)
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)

    def __post_init__(self) -> None:
        if not self.stale_after_s > 0:
            raise ConfigError(f"--claim-stale-after={self.stale_after_s:g} must be > 0 seconds "
                              f"(default {STALE_AFTER_S:g})")
        if not 0 < self.heartbeat_s < self.stale_after_s:
            raise ConfigError(f"claim heartbeat {self.heartbeat_s:g} s must be > 0 and below "
                              f"the stale time {self.stale_after_s:g} s")
        if self.wait_s is not None and self.wait_s < 0:
            raise ConfigError(f"--claim-wait={self.wait_s:g} must be >= 0 seconds (0: do not "
                              "wait for runs other processes hold; omit it to wait until they "
                              "end)")
        if not self.poll_s > 0:
            raise ConfigError(f"claim poll interval {self.poll_s:g} s must be > 0")

    @classmethod
    def from_options(cls, wait_s: float | None = None,
                     stale_after_s: float | None = None) -> ClaimPolicy:
        """The policy of the ``--claim-wait`` / ``--claim-stale-after`` options (None: the
        default of each); the heartbeat is a quarter of the stale time, at most
        :data:`HEARTBEAT_S`."""
        stale = STALE_AFTER_S if stale_after_s is None else stale_after_s
        return cls(stale_after_s=stale, heartbeat_s=min(HEARTBEAT_S, stale / 4), wait_s=wait_s)


@dataclass(frozen=True)
class ClaimInfo:
    """What a claim file says, and its modification time (the last heartbeat).

    A file being written (empty or cut short) has ``token`` None and no host / pid: it is
    judged by its heartbeat alone.
    """

    run_id: str
    host: str | None
    pid: int | None
    started: str | None
    token: str | None
    heartbeat: float
    inode: int

    def describe(self) -> str:
        """``pid 123 on node-a`` (or ``an unreadable claim``)."""
        if self.host is None:
            return "an unreadable claim"
        return f"pid {self.pid} on {self.host}"

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "pid": self.pid, "started": self.started,
                "token": self.token, "heartbeat": self.heartbeat}


@dataclass
class Claim:
    """A claim this process holds.

    Attributes:
        info: its file's content as written.
        path: the claim file.
        taken_over_from: the dead claim it replaced (its content and why it was dead), or None.
        lost: set by a heartbeat that found another token in the file (another process took
            the claim over, judging this one dead): the run may then be trained twice.
    """

    info: ClaimInfo
    path: Path
    taken_over_from: dict[str, Any] | None = None
    lost: bool = False

    def record(self) -> dict[str, Any]:
        """What the run's record keeps (``perf.claim``)."""
        out: dict[str, Any] = {"host": self.info.host, "pid": self.info.pid,
                               "claimed_at": self.info.started}
        if self.taken_over_from is not None:
            out["taken_over_from"] = self.taken_over_from
        if self.lost:
            out["lost"] = True
        return out


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host and is not a zombie (Linux ``/proc``)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    with contextlib.suppress(OSError, IndexError):
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
        # The state follows the parenthesised command name, which may contain spaces.
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def utc_text(seconds: float) -> str:
    """ISO 8601 UTC time of ``seconds`` since the epoch."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


class ClaimBoard:
    """The claim files of one results store, seen from this process.

    Args:
        store_root: the results store folder; claims live in ``store_root/claims``.
        policy: stale time and clock (see :class:`ClaimPolicy`).
        host: this host's name (default ``socket.gethostname()``).
        pid: this process's id (default ``os.getpid()``).
        alive: whether a process of this host exists (default :func:`pid_alive`).
    """

    def __init__(self, store_root: str | Path, policy: ClaimPolicy | None = None, *,
                 host: str | None = None, pid: int | None = None,
                 alive: Callable[[int], bool] = pid_alive) -> None:
        self.folder = Path(store_root) / CLAIMS_FOLDER
        self.policy = policy or ClaimPolicy()
        self.host = host or socket.gethostname()
        self.pid = os.getpid() if pid is None else pid
        self.alive = alive

    def path(self, rid: str) -> Path:
        return self.folder / f"{rid}.json"

    def read(self, rid: str) -> ClaimInfo | None:
        """The claim on ``rid``, or None when there is none."""
        return self._read_path(self.path(rid), rid)

    @staticmethod
    def _read_path(path: Path, rid: str) -> ClaimInfo | None:
        try:
            with path.open("rb") as handle:
                stat = os.fstat(handle.fileno())
                raw = handle.read()
        except FileNotFoundError:
            return None
        try:
            content = json.loads(raw)
            host, pid = str(content["host"]), int(content["pid"])
            started, token = str(content["started"]), str(content["token"])
        except (ValueError, KeyError, TypeError):  # being written, or cut short by a crash
            host = pid = started = token = None
        return ClaimInfo(rid, host, pid, started, token, stat.st_mtime, stat.st_ino)

    def dead_reason(self, info: ClaimInfo) -> str | None:
        """Why the claim ``info`` is dead, or None while its holder may still be alive."""
        age = self.policy.clock() - info.heartbeat
        if age > self.policy.stale_after_s:
            return (f"no heartbeat for {age:.0f} s (a claim is dead after "
                    f"{self.policy.stale_after_s:g} s)")
        if info.host == self.host and info.pid is not None and not self.alive(info.pid):
            return f"process {info.pid} no longer exists on {info.host}"
        return None

    def try_claim(self, rid: str) -> Claim | ClaimInfo:
        """Claim ``rid``: the held :class:`Claim`, or the live claim of another process.

        A dead claim is taken over (the returned Claim's ``taken_over_from`` says whose and
        why). Never blocks.
        """
        self.folder.mkdir(parents=True, exist_ok=True)
        while True:  # ends: each pass creates, finds a live claim, or removed a dead one
            claim = self._create(rid)
            if claim is not None:
                return claim
            holder = self.read(rid)
            if holder is None:
                continue  # released in between: try again
            reason = self.dead_reason(holder)
            if reason is None:
                return holder
            if not self._remove_dead(holder):
                continue  # another taker was first, or a fresh claim appeared: look again
            claim = self._create(rid)
            if claim is None:  # a process that found no claim created one first
                continue
            claim.taken_over_from = {**holder.to_dict(), "reason": reason,
                                     "heartbeat": utc_text(holder.heartbeat)}
            return claim

    def _create(self, rid: str) -> Claim | None:
        """Create the claim file exclusively; None if it exists. A claim file the storage
        refuses to fill (disk full) is removed before the StorageError is raised: an empty
        claim would hold the run until it went stale."""
        path = self.path(rid)
        now = self.policy.clock()
        content = {"run_id": rid, "host": self.host, "pid": self.pid,
                   "started": utc_text(now), "token": uuid.uuid4().hex}
        data = json.dumps(content).encode("utf-8")
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return None
        except OSError as exc:
            if is_storage_fault(exc):
                raise storage_error(exc, path, needed=len(data)) from exc
            raise
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
                stat = os.fstat(handle.fileno())
        except BaseException as exc:  # a claim cut short (disk full) would block the run
            path.unlink(missing_ok=True)
            if isinstance(exc, OSError) and is_storage_fault(exc):
                raise storage_error(exc, path, needed=len(data)) from exc
            raise
        info = ClaimInfo(rid, self.host, self.pid, content["started"], content["token"],
                         stat.st_mtime, stat.st_ino)
        return Claim(info, path)

    def _remove_dead(self, holder: ClaimInfo) -> bool:
        """Move the dead claim ``holder`` out of the way; False if another process did (or
        the file is no longer that claim). Only one rename of the file can succeed."""
        path = self.path(holder.run_id)
        grave = path.with_name(f"{path.name}.dead-{uuid.uuid4().hex}")
        try:
            os.rename(path, grave)
        except FileNotFoundError:
            return False
        moved = self._read_path(grave, holder.run_id)
        if moved is None or (moved.inode, moved.token) != (holder.inode, holder.token):
            # A fresh claim was made between our read and the rename: put it back (exclusive:
            # if yet another claim appeared meanwhile, that one stays and this one is lost).
            with contextlib.suppress(FileExistsError, FileNotFoundError):
                os.link(grave, path)
            grave.unlink(missing_ok=True)
            return False
        grave.unlink(missing_ok=True)
        return True

    def holds(self, claim: Claim) -> bool:
        """Whether the claim file still holds ``claim`` (same token)."""
        current = self.read(claim.info.run_id)
        return current is not None and current.token == claim.info.token

    def refresh(self, claim: Claim) -> None:
        """One heartbeat: touch the claim file if it is still ours, else mark it lost."""
        if claim.lost:
            return
        if not self.holds(claim):
            claim.lost = True
            return
        with contextlib.suppress(FileNotFoundError):
            os.utime(claim.path)

    def release(self, claim: Claim) -> None:
        """Remove the claim file if it is still ours (a claim taken over is left alone)."""
        if self.holds(claim):
            claim.path.unlink(missing_ok=True)


class Heartbeat:
    """A daemon thread that refreshes the claims in :attr:`held` every ``heartbeat_s``.

    Use as a context manager; the thread stops on exit. Claims are added and removed by the
    caller (``held`` is guarded by a lock).
    """

    def __init__(self, board: ClaimBoard) -> None:
        self.board = board
        self._held: dict[str, Claim] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dpcompare-claims",
                                        daemon=True)

    def add(self, claim: Claim) -> None:
        with self._lock:
            self._held[claim.info.run_id] = claim

    def remove(self, claim: Claim) -> None:
        with self._lock:
            self._held.pop(claim.info.run_id, None)

    def held(self) -> list[Claim]:
        with self._lock:
            return list(self._held.values())

    def beat(self) -> None:
        """Refresh every held claim once."""
        for claim in self.held():
            with contextlib.suppress(OSError):  # a missed beat is caught up by the next one
                self.board.refresh(claim)

    def _loop(self) -> None:
        while not self._stop.wait(self.board.policy.heartbeat_s):
            self.beat()

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()


@contextlib.contextmanager
def heartbeat(board: ClaimBoard) -> Iterator[Heartbeat]:
    """A running :class:`Heartbeat` for ``board``; on exit the claims still held (a run cut
    short by Ctrl-C or an error) are released, so that another process can take them at
    once."""
    with Heartbeat(board) as beat:
        try:
            yield beat
        finally:
            for claim in beat.held():
                with contextlib.suppress(OSError):
                    board.release(claim)
