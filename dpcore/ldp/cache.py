"""The on-disk cache of privatised data sets: cache keys and file names.

A privatised copy is keyed by everything that defines its bytes: the source data set's
fingerprint, the mechanism and its parameters, the seed, which splits are noised, and the
format version. The file itself is the bench's one npz+metadata format, written atomically and
byte-reproducibly by :func:`dpcore.io.write_npz` and read by :func:`dpcore.io.read_npz` (a
damaged file reads as absent and is rebuilt).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: Bump when the layout of the cached file or the noise derivation changes.
CACHE_FORMAT_VERSION = 1


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
