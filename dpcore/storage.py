"""Storage faults: a write refused by the storage, named in one line.

A *storage fault* is an :class:`OSError` whose ``errno`` is in :data:`STORAGE_ERRNOS`: no space
left (``ENOSPC``), a disk quota (``EDQUOT``), a read-only file system (``EROFS``) or a folder
this process may not write (``EACCES``, ``EPERM``). :func:`storage_error` turns one into a
:class:`~dpcore.errors.StorageError` whose message names the folder, the file, the bytes the
write needed (when known) and the bytes free there; :mod:`dpcore.io`'s atomic writers raise it
for every fault, and the CLI exits with its own status for it. A run trained when the storage
refuses its files is kept in the rescue folder (:func:`rescue_root`) by
:func:`dpcore.runstore.save_run`.

Imports nothing of the bench but :mod:`dpcore.errors` (the writers of :mod:`dpcore.io` use it).
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from dpcore.errors import StorageError

#: errno -> how the storage refused: the faults of storage, not of the program.
STORAGE_ERRNOS: dict[int, str] = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
}
#: The storage faults only a write can meet (a refused read, EACCES, is no storage fault).
WRITE_ONLY_ERRNOS: tuple[int, ...] = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)
#: Environment variable naming the folder trained runs are kept in when their store refuses
#: them (default: ``dpcompare-rescue`` in the system's temporary folder).
RESCUE_ENV = "DPCOMPARE_RESCUE_DIR"


def is_storage_fault(exc: BaseException) -> bool:
    """Whether ``exc`` is a write refused by the storage (see the module docstring)."""
    return isinstance(exc, OSError) and exc.errno in STORAGE_ERRNOS


def is_write_fault(exc: BaseException) -> bool:
    """Whether ``exc`` is known to be a write the storage refused: a :class:`StorageError`
    (raised by the bench's writers), or an OSError only a write can meet
    (:data:`WRITE_ONLY_ERRNOS`, e.g. from a library writing a file itself)."""
    return isinstance(exc, StorageError) or (
        isinstance(exc, OSError) and exc.errno in WRITE_ONLY_ERRNOS)


def free_bytes(folder: str | Path) -> int | None:
    """Bytes free to this process on the file system of ``folder`` (its nearest existing
    ancestor), or None when that cannot be read."""
    here = Path(folder).absolute()
    while not here.exists() and here != here.parent:
        here = here.parent
    try:
        return shutil.disk_usage(here).free
    except OSError:
        return None


def byte_text(n: int) -> str:
    """``812 bytes``, ``81,234 bytes (79.3 KiB)``: exact, with a binary unit from 1 KiB."""
    text = f"{n:,} byte{'s' if n != 1 else ''}"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{text} ({n / size:.1f} {unit})"
    return text


def storage_error(exc: OSError, path: str | Path | None = None, *,
                  needed: int | None = None) -> StorageError:
    """The one-line :class:`StorageError` of the storage fault ``exc`` met writing ``path``
    (a file; default the file ``exc`` names): how the storage refused, the folder, the file,
    the bytes needed (``needed``, when known) and the bytes free there. A StorageError is
    returned as it is."""
    if isinstance(exc, StorageError):
        return exc
    reason = STORAGE_ERRNOS.get(exc.errno or 0) or exc.strerror or type(exc).__name__
    target = Path(path) if path is not None else (
        Path(exc.filename) if isinstance(exc.filename, str | os.PathLike) else None)
    folder = target.parent if target is not None else None
    what = f"writing {target.name} into {folder}" if target is not None else "a write"
    need = f" needed {byte_text(needed)}" if needed is not None else " was refused"
    free = free_bytes(folder) if folder is not None else None
    room = f", {byte_text(free)} free there" if free is not None else ""
    return StorageError(f"{reason}: {what}{need}{room}", errno=exc.errno,
                        folder=None if folder is None else str(folder), needed=needed)


def rescue_root() -> Path:
    """The folder trained runs are kept in when their store refuses them (see the module
    docstring)."""
    given = os.environ.get(RESCUE_ENV)
    return Path(given).expanduser() if given else Path(tempfile.gettempdir()) / "dpcompare-rescue"


def file_sha256(path: str | Path) -> str:
    """Hex SHA-256 of the file's bytes (read in 1 MiB blocks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


__all__ = ["RESCUE_ENV", "STORAGE_ERRNOS", "WRITE_ONLY_ERRNOS", "byte_text", "file_sha256",
           "free_bytes", "is_storage_fault", "is_write_fault", "rescue_root", "storage_error"]
