"""The on-disk cache of privatised data sets: cache keys and deterministic, atomic npz files.

A privatised copy is keyed by everything that defines its bytes: the source data set's
fingerprint, the mechanism and its parameters, the seed, which splits are noised, and the
format version. The npz is written to a temporary file in the same folder and moved into place
with ``os.replace`` (atomic on POSIX and Windows), so a reader never sees half a file.

``numpy.savez`` stamps each zip member with the current time, so two writes of the same arrays
differ in a few bytes; :func:`write_npz_atomic` writes the members with a fixed timestamp
instead (hand-written: numpy offers no such option), so the same arrays give a byte-identical
file. The result loads with plain ``numpy.load(..., allow_pickle=False)``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

#: Bump when the layout of the cached file or the noise derivation changes.
CACHE_FORMAT_VERSION = 1

#: Name of the member holding the JSON metadata (a 0-d unicode array: no pickle needed).
META_KEY = "__meta__"

_FIXED_DATE_TIME = (1980, 1, 1, 0, 0, 0)


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success move it onto ``path`` atomically.

    The temporary file gets the usual permissions (0666 minus the umask; ``mkstemp`` would
    leave 0600) and is fsynced before ``os.replace``; on any error it is removed and ``path``
    is left untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def cache_key(
    source_fingerprint: str,
    mechanism_name: str,
    params: Mapping[str, Any],
    seed: int,
    splits: tuple[str, ...],
) -> str:
    """First 16 hex digits of the SHA-256 of the canonical JSON of all that sets the bytes."""
    canonical = json.dumps(
        {
            "version": CACHE_FORMAT_VERSION,
            "source": source_fingerprint,
            "mechanism": mechanism_name,
            "params": dict(params),
            "seed": int(seed),
            "splits": list(splits),
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def safe_name(text: str) -> str:
    """``text`` with every character outside ``[A-Za-z0-9._-]`` replaced by ``_``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "data"


def cache_file(cache_dir: str | Path, dataset_name: str, label: str, seed: int, key: str) -> Path:
    """``<cache_dir>/<dataset>-<mechanism label>-seed<seed>-<key>.npz``."""
    name = f"{safe_name(dataset_name)}-{safe_name(label)}-seed{int(seed)}-{key}.npz"
    return Path(cache_dir) / name


def write_npz_atomic(path: str | Path, arrays: Mapping[str, np.ndarray],
                     meta: Mapping[str, Any]) -> None:
    """Write ``arrays`` (+ ``meta`` as JSON) to an uncompressed npz, atomically and reproducibly.

    Args:
        path: destination; its folder is created if missing.
        arrays: name -> array (numeric dtypes; saved without pickle).
        meta: JSON-able metadata, stored under :data:`META_KEY`.
    """
    members = dict(arrays)
    members[META_KEY] = np.array(json.dumps(dict(meta), sort_keys=True))
    with atomic_path(path) as tmp, zipfile.ZipFile(
        tmp, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True
    ) as archive:
        for name in sorted(members):
            info = zipfile.ZipInfo(f"{name}.npy", date_time=_FIXED_DATE_TIME)
            info.compress_type = zipfile.ZIP_STORED
            info.external_attr = 0o644 << 16
            with archive.open(info, mode="w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(members[name]),
                                          allow_pickle=False)


def read_npz(path: str | Path) -> tuple[dict[str, np.ndarray], dict[str, Any]] | None:
    """Read a file written by :func:`write_npz_atomic`.

    Returns:
        ``(arrays, meta)``, or ``None`` if the file is missing, truncated, fails its zip CRC
        check or lacks the metadata: a corrupt cache entry is treated as absent (and rebuilt).
    """
    path = Path(path)
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
        meta = json.loads(str(arrays.pop(META_KEY)))
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile,
            json.JSONDecodeError):
        return None
    if not isinstance(meta, dict):
        return None
    return arrays, meta


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write a UTF-8 text file atomically (see :func:`atomic_path`)."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
