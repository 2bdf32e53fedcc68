"""The bench's one way to write files: atomic writes, one npz+metadata format, one JSON sanitiser.

* **Atomic writes** (:func:`atomic_path`, :func:`atomic_write_bytes`, :func:`atomic_write_text`,
  :func:`atomic_write_json`): the bytes go to a temporary file in the destination's folder,
  which is fsynced and moved onto the destination with ``os.replace`` (atomic on POSIX and
  Windows). A process killed at any moment leaves either the previous file or the new one,
  never half a file; on an error the temporary file is removed and the destination untouched.
  A write the storage refuses (no space, a quota, a read-only or forbidden folder) raises
  :class:`~dpcore.errors.StorageError`, one line naming the folder and the bytes needed
  (:mod:`dpcore.storage`).
* **One permission rule** (:func:`default_file_mode`): every file written here gets the mode a
  plain ``open(path, "w")`` would give, ``0o666`` minus the process umask (``mkstemp`` alone
  would leave ``0o600``, unreadable to the other users of a shared cache or results folder).
* **One npz+metadata format** (:func:`write_npz` / :func:`read_npz`): an uncompressed npz whose
  arrays load with plain ``numpy.load(..., allow_pickle=False)``, plus the JSON metadata as a
  0-d unicode array under :data:`META_KEY`. Members are written in name order with a fixed
  timestamp, so the same arrays and metadata give a byte-identical file (hand-written:
  ``numpy.savez`` stamps the current time and offers no option). :func:`read_npz` also reads
  files whose metadata member is ``meta`` (:data:`LEGACY_META_KEY`).
* **One JSON sanitiser** (:func:`json_safe`): NaN/inf become ``None`` (JSON ``null``), numpy
  scalars and arrays become Python values, named tuples (e.g. dp_accounting's DpEvent form)
  become objects, tuples become lists, keys become strings.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import tempfile
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

#: Name of the npz member holding the JSON metadata.
META_KEY = "__meta__"
#: Metadata member name of the older layout, still read by :func:`read_npz`.
LEGACY_META_KEY = "meta"

_FIXED_DATE_TIME = (1980, 1, 1, 0, 0, 0)


def json_safe(value: Any) -> Any:
    """``value`` made JSON-able, recursively (see the module docstring for the rules).

    Guarantees: the result serialises with ``json.dumps(..., allow_nan=False)`` whenever the
    leaves are str, int, float, bool, None or numpy values.
    """
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if hasattr(value, "_asdict") and isinstance(value, tuple):  # a named tuple
        return {str(k): json_safe(v) for k, v in value._asdict().items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if hasattr(value, "tolist") and not isinstance(value, str | bytes):
        return json_safe(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def json_text(obj: Any) -> str:
    """``obj`` as indented, key-sorted JSON text ending with a newline (via :func:`json_safe`)."""
    return json.dumps(json_safe(obj), indent=2, sort_keys=True, allow_nan=False) + "\n"


def default_file_mode() -> int:
    """The permission bits of every file this module writes: ``0o666`` minus the umask."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


@contextlib.contextmanager
def atomic_path(path: str | Path, *, size: int | None = None) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; when the block succeeds, move it onto ``path``.

    The caller writes the temporary file by name (e.g. a library that takes a path). On
    success the file gets :func:`default_file_mode`, is fsynced and replaces ``path``
    atomically; on any error (including KeyboardInterrupt) it is removed and ``path`` is left
    as it was. The destination's folder is created if missing.

    A write the storage refuses (no space, a quota, a read-only or forbidden folder:
    :func:`dpcore.storage.is_storage_fault`) raises :class:`~dpcore.errors.StorageError`
    naming the folder, the file and ``size`` (the bytes the caller writes, when it knows).
    """
    from dpcore.storage import is_storage_fault, storage_error

    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp",
                                        dir=path.parent)
    except OSError as exc:
        if is_storage_fault(exc):
            raise storage_error(exc, path, needed=size) from exc
        raise
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.chmod(tmp, default_file_mode())
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if is_storage_fault(exc):
            raise storage_error(exc, path, needed=size) from exc
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_path`; a storage fault names
    ``len(data)`` as the bytes needed)."""
    with atomic_path(path, size=len(data)) as tmp:
        tmp.write_bytes(data)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` as UTF-8 to ``path`` atomically (see :func:`atomic_path`)."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON atomically (non-finite floats become null)."""
    atomic_write_text(path, json_text(obj))


def write_npz(path: str | Path, arrays: Mapping[str, np.ndarray],
              meta: Mapping[str, Any], *, compressed: bool = False) -> None:
    """Write ``arrays`` plus ``meta`` (JSON) as one npz, atomically, reproducibly.

    Args:
        path: destination; its folder is created if missing.
        arrays: name -> array (numeric or unicode dtypes: saved without pickle). The name
            :data:`META_KEY` is reserved.
        meta: JSON-able metadata (passed through :func:`json_safe`).
        compressed: deflate the members (for small files committed to the repository, e.g.
            a report's montage arrays); default stored uncompressed (fast to read).

    Raises:
        ValueError: if an array is named :data:`META_KEY`.
    """
    if META_KEY in arrays:  # before a temporary file exists
        raise ValueError(f"array name {META_KEY!r} is reserved for the metadata; rename it")
    with atomic_path(path) as tmp:
        _write_npz_members(tmp, arrays, meta, compressed=compressed)


def npz_bytes(arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any], *,
              compressed: bool = False) -> bytes:
    """The bytes :func:`write_npz` would write (same arrays and metadata: the same bytes),
    built in memory: for a file whose size or digest is wanted before it is written (e.g. a
    checkpoint). Raises ValueError for an array named :data:`META_KEY`."""
    buffer = io.BytesIO()
    _write_npz_members(buffer, arrays, meta, compressed=compressed)
    return buffer.getvalue()


def _write_npz_members(target: Path | io.BytesIO, arrays: Mapping[str, np.ndarray],
                       meta: Mapping[str, Any], *, compressed: bool) -> None:
    """The npz of :func:`write_npz` written to ``target`` (a path or a buffer)."""
    if META_KEY in arrays:
        raise ValueError(f"array name {META_KEY!r} is reserved for the metadata; rename it")
    members = dict(arrays)
    members[META_KEY] = np.array(json.dumps(json_safe(dict(meta)), sort_keys=True,
                                            allow_nan=False))
    method = zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED
    with zipfile.ZipFile(target, mode="w", compression=method, allowZip64=True) as archive:
        for name in sorted(members):
            info = zipfile.ZipInfo(f"{name}.npy", date_time=_FIXED_DATE_TIME)
            info.compress_type = method
            info.external_attr = 0o644 << 16
            with archive.open(info, mode="w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(members[name]),
                                          allow_pickle=False)


def read_npz(path: str | Path) -> tuple[dict[str, np.ndarray], dict[str, Any]] | None:
    """Read a file of :func:`write_npz` (or of the older layout with a ``meta`` member).

    Returns:
        ``(arrays, meta)``, or ``None`` if the file is missing, truncated, fails its zip CRC
        check, or has no metadata object: a damaged file is treated as absent, never trusted.
    """
    path = Path(path)
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
        key = META_KEY if META_KEY in arrays else LEGACY_META_KEY
        meta = json.loads(str(arrays.pop(key)[()]))
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile,
            json.JSONDecodeError):
        return None
    if not isinstance(meta, dict):
        return None
    return arrays, meta
