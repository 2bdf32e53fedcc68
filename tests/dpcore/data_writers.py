"""Writers of SMALL real data files in their native formats, for the data-loader tests.

Every file is written byte by byte (IDX via struct) or with the library that defines the
format (Pillow for PNG/JPEG, numpy for npz, csv for CSV), never through the loaders under test.
"""

from __future__ import annotations

import csv
import gzip
import json
import os
import struct
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

SHARED_ENV = "DPCOMPARE_DATA_DIR"
_shared = os.environ.get(SHARED_ENV)
SHARED_DATA = Path(_shared) if _shared and Path(_shared).is_dir() else None

_skip_without_shared = pytest.mark.skipif(
    SHARED_DATA is None,
    reason=f"${SHARED_ENV} is not set to the bundled data folder "
           "(e.g. ../shared/data beside the project)",
)


def needs_shared_data(func: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a test that reads the bundled data named by $DPCOMPARE_DATA_DIR (else skipped)."""
    return pytest.mark.shared_data(_skip_without_shared(func))


def isolate(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Point the data cache at a fresh temp folder; return it."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("DPCOMPARE_CACHE_DIR", str(cache))
    return cache


def idx_bytes(arr: np.ndarray, magic: int) -> bytes:
    """The IDX encoding of a uint8 array: big-endian magic, one uint32 per dim, then data."""
    header = struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in arr.shape)
    return header + arr.astype(np.uint8).tobytes()


def write_idx(path: Path, arr: np.ndarray, magic: int, gz: bool = True) -> Path:
    data = idx_bytes(arr, magic)
    path.parent.mkdir(parents=True, exist_ok=True)
    if gz:
        path.write_bytes(gzip.compress(data, mtime=0))
    else:
        path.write_bytes(data)
    return path


def tiny_mnist(n_train: int = 20, n_test: int = 10, seed: int = 0) -> dict[str, np.ndarray]:
    """Random 28x28 uint8 digits with labels cycling 0..9."""
    rng = np.random.default_rng(seed)
    return {
        "x_train": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "y_train": (np.arange(n_train) % 10).astype(np.uint8),
        "x_test": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "y_test": ((np.arange(n_test) + 3) % 10).astype(np.uint8),
    }


def write_mnist_idx(folder: Path, arrays: dict[str, np.ndarray], gz: bool = True) -> None:
    suffix = ".gz" if gz else ""
    write_idx(folder / f"train-images-idx3-ubyte{suffix}", arrays["x_train"], 2051, gz)
    write_idx(folder / f"train-labels-idx1-ubyte{suffix}", arrays["y_train"], 2049, gz)
    write_idx(folder / f"t10k-images-idx3-ubyte{suffix}", arrays["x_test"], 2051, gz)
    write_idx(folder / f"t10k-labels-idx1-ubyte{suffix}", arrays["y_test"], 2049, gz)


def write_image(path: Path, pixels: np.ndarray, fmt: str | None = None) -> Path:
    """Write an (H, W) gray or (H, W, 3) RGB uint8 array as PNG/JPEG (by suffix)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    kwargs = {"quality": 95} if path.suffix.lower() in (".jpg", ".jpeg") else {}
    Image.fromarray(pixels).save(path, fmt, **kwargs)
    return path


def flat_image(value: int, size: tuple[int, int], rgb: bool) -> np.ndarray:
    """A constant image (exact through JPEG), ``size`` = (width, height)."""
    w, h = size
    return np.full((h, w, 3) if rgb else (h, w), value, dtype=np.uint8)


def write_csv(path: Path, header: Sequence[str], rows: Sequence[Sequence[object]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def write_jsonl_gz(path: Path, rows: Sequence[dict[str, object]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r) + "\n" for r in rows)
    path.write_bytes(gzip.compress(text.encode("utf-8"), mtime=0))
    return path


def write_medmnist(
    path: Path, n: tuple[int, int, int] = (12, 4, 6), rgb: bool = False, n_classes: int = 2,
    label_shape: str = "col", seed: int = 0,
) -> dict[str, np.ndarray]:
    """A MedMNIST-format npz (train/val/test images and labels); returns the arrays."""
    rng = np.random.default_rng(seed)
    arrays: dict[str, np.ndarray] = {}
    for split, count in zip(("train", "val", "test"), n, strict=True):
        shape = (count, 28, 28, 3) if rgb else (count, 28, 28)
        arrays[f"{split}_images"] = rng.integers(0, 256, shape, dtype=np.uint8)
        labels = (np.arange(count) % n_classes).astype(np.uint8)
        arrays[f"{split}_labels"] = labels[:, None] if label_shape == "col" else labels
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **arrays)
    return arrays
