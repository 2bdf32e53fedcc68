"""On-disk cache of decoded data sets (npz), keyed by the source files' stat and the options.

* Location: ``$DPCOMPARE_CACHE_DIR`` if set, else ``<data_root>/.cache`` when the data root
  exists and is writable, else ``~/.dpcompare/cache``.
* Key: SHA-256 over the cache format version, the data set name, every source file's resolved
  path, size and modification time (ns), and every option that changes the arrays (image
  size, channels, split seed when the split is drawn, loader options). Editing, replacing or
  touching a source file therefore changes the key.
* Files are the bench's one npz+metadata format, written atomically by
  :func:`dpcore.io.write_npz` (a reader never sees half a file); entries of the older layout
  (metadata member ``meta``) still read. A cache write that fails (read-only disk, full
  disk) only logs a warning: the data set is still returned.
* Reads never trust the file: anything unreadable, of another format or key, failing the
  Dataset checks, or whose arrays do not hash to the fingerprint stored next to them is
  ignored (logged) and rebuilt by the caller.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from dpcore.data.dataset import Dataset
from dpcore.errors import DataError
from dpcore.io import read_npz, write_npz

log = logging.getLogger(__name__)

#: Bump when the stored layout or any decoder's output changes: old entries are then unused.
CACHE_FORMAT = 2
CACHE_ENV = "DPCOMPARE_CACHE_DIR"
_ARRAYS = ("x_train", "y_train", "x_test", "y_test", "groups_train", "groups_test", "x_val",
           "y_val")


def cache_dir(data_root: Path | None) -> Path:
    """Folder of the cache files (see the module docstring for the order of choices)."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    if data_root is not None and data_root.is_dir() and os.access(data_root, os.W_OK):
        return data_root / ".cache"
    return Path.home() / ".dpcompare" / "cache"


def source_fingerprint(paths: Iterable[Path]) -> str:
    """SHA-256 over (resolved path, size, mtime in ns) of each file, in the given order.

    Raises:
        DataError: if a file cannot be stat-ed.
    """
    digest = hashlib.sha256()
    for path in paths:
        try:
            st = path.stat()
        except OSError as exc:
            raise DataError(f"{path}: cannot read file status ({exc.strerror})") from exc
        digest.update(f"{path.resolve()}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def cache_key(parts: Mapping[str, Any]) -> str:
    """First 24 hex digits of the SHA-256 of ``parts`` (with the format version) as JSON."""
    canonical = json.dumps({"format": CACHE_FORMAT, **parts}, sort_keys=True, default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:24]


def cache_file(directory: Path, name: str, key: str) -> Path:
    """``<directory>/<safe name>-<key>.npz``."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:40]
    return directory / f"{safe}-{key}.npz"


def read_cached(path: Path, key: str) -> Dataset | None:
    """The Dataset stored at ``path`` under ``key``, or ``None`` if absent or not trustworthy."""
    stored = read_npz(path)
    if stored is None:
        if path.is_file():
            log.warning("ignoring unreadable cache file %s; rebuilding it", path)
        return None
    arrays, meta = stored
    try:
        if meta.get("format") != CACHE_FORMAT or meta.get("key") != key:
            log.warning("ignoring cache file %s: written for another key or format", path)
            return None
        ds = Dataset(
            name=meta["name"],
            task=meta["task"],
            class_names=tuple(meta["class_names"]),
            group_names=None if meta["group_names"] is None else tuple(meta["group_names"]),
            source=meta["source"],
            vocabulary_size=meta["vocabulary_size"],
            extra=dict(meta["extra"]),
            groups_train=arrays.get("groups_train"),
            groups_test=arrays.get("groups_test"),
            x_train=arrays["x_train"],
            y_train=arrays["y_train"],
            x_test=arrays["x_test"],
            y_test=arrays["y_test"],
            x_val=arrays.get("x_val"),
            y_val=arrays.get("y_val"),
        )
        if ds.fingerprint != meta["fingerprint"]:
            log.warning("ignoring cache file %s: its arrays do not match their fingerprint", path)
            return None
        return ds
    except Exception as exc:  # noqa: BLE001 - any damage means "rebuild", never "trust"
        log.warning("ignoring unreadable cache file %s (%s); rebuilding it", path, exc)
        return None


def write_cached(path: Path, ds: Dataset, key: str) -> bool:
    """Store ``ds`` at ``path`` atomically; returns False (and logs) if the write failed."""
    meta = {
        "format": CACHE_FORMAT,
        "key": key,
        "name": ds.name,
        "task": ds.task,
        "class_names": list(ds.class_names),
        "group_names": None if ds.group_names is None else list(ds.group_names),
        "source": ds.source,
        "vocabulary_size": ds.vocabulary_size,
        "extra": dict(ds.extra),
        "fingerprint": ds.fingerprint,
    }
    arrays = {k: getattr(ds, k) for k in _ARRAYS if getattr(ds, k) is not None}
    try:
        write_npz(path, arrays, meta)
        return True
    except OSError as exc:
        log.warning("could not write cache file %s (%s); continuing without cache", path, exc)
        return False
