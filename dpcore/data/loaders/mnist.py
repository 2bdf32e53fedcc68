"""MNIST from its native IDX files (gzipped or plain) or from a Keras ``mnist.npz``.

The IDX reader is written by hand: no dependency of the core reads IDX (torchvision does, but
the core never imports torch). IDX layout (big-endian): two zero bytes, a type code (0x08 =
uint8), the number of dimensions, one uint32 per dimension, then the data. MNIST images have
magic 0x00000803 (2051: uint8, 3-D) and labels 0x00000801 (2049: uint8, 1-D).
"""

from __future__ import annotations

import gzip
import struct
import zlib
from pathlib import Path

import numpy as np

from dpcore.data.images import ensure_nhwc, one_line, to_pixel_dtype
from dpcore.data.loaders.base import Decoded, DecodeRequest, as_labels, check_split
from dpcore.data.loaders.npzfile import npz_shapes, read_npz
from dpcore.datasets import DatasetInfo
from dpcore.errors import DataError

#: Array name -> (IDX file stem, expected magic number).
IDX_FILES: dict[str, tuple[str, int]] = {
    "x_train": ("train-images-idx3-ubyte", 2051),
    "y_train": ("train-labels-idx1-ubyte", 2049),
    "x_test": ("t10k-images-idx3-ubyte", 2051),
    "y_test": ("t10k-labels-idx1-ubyte", 2049),
}
KERAS_NPZ = "mnist.npz"
_GZIP_MAGIC = b"\x1f\x8b"
_IDX_DTYPES = {0x08: np.dtype(np.uint8)}


def _locate(path: Path) -> dict[str, Path] | Path:
    """The four IDX files of a folder (``.gz`` preferred), or the npz to read instead."""
    if path.is_file():
        if path.suffix == ".npz":
            return path
        raise DataError(f"{path}: not a folder of IDX files nor a Keras mnist.npz")
    found: dict[str, Path] = {}
    for key, (stem, _) in IDX_FILES.items():
        for name in (f"{stem}.gz", stem):
            if (path / name).is_file():
                found[key] = path / name
                break
    if len(found) == len(IDX_FILES):
        return found
    if not found and (path / KERAS_NPZ).is_file():
        return path / KERAS_NPZ
    missing = [IDX_FILES[k][0] + "[.gz]" for k in IDX_FILES if k not in found]
    raise DataError(
        f"{path}: MNIST files missing: {', '.join(missing)}; need all four IDX files "
        f"(gzipped or not) or a Keras {KERAS_NPZ} there"
    )


def _read_bytes(path: Path, limit: int | None = None) -> bytes:
    """File content, gunzipped if it starts with the gzip magic (``limit``: first bytes only)."""
    try:
        with path.open("rb") as raw:
            gzipped = raw.read(2) == _GZIP_MAGIC
        opener = gzip.open if gzipped else open
        with opener(path, "rb") as fh:
            return fh.read() if limit is None else fh.read(limit)
    except (OSError, EOFError, zlib.error) as exc:
        raise DataError(
            f"{path}: corrupt or truncated {'gzip' if path.suffix == '.gz' else ''} file "
            f"({one_line(exc)}); valid: an intact IDX file, gzipped or not"
        ) from exc


def _parse_header(path: Path, data: bytes, expected_magic: int) -> tuple[np.dtype, tuple[int, ...]]:
    if len(data) < 4:
        raise DataError(f"{path}: {len(data)} bytes is too short for an IDX header")
    magic = struct.unpack(">I", data[:4])[0]
    if magic != expected_magic:
        raise DataError(
            f"{path}: IDX magic number {magic} (0x{magic:08x}) is not {expected_magic} "
            f"(0x{expected_magic:08x}, uint8 {'images' if expected_magic == 2051 else 'labels'})"
        )
    ndim = data[3]
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DataError(f"{path}: IDX header truncated ({len(data)} of {header} bytes)")
    dims = struct.unpack(f">{ndim}I", data[4:header])
    return _IDX_DTYPES[data[2]], dims


def read_idx(path: Path, expected_magic: int) -> np.ndarray:
    """Decode one IDX file (gzipped or plain) to an array shaped by its header.

    Raises:
        DataError: naming the file for bad gzip data, a wrong magic number, or a size that
            does not match the header (truncated file or trailing bytes).
    """
    data = _read_bytes(path)
    dtype, dims = _parse_header(path, data, expected_magic)
    header = 4 + 4 * len(dims)
    expected = header + int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    if len(data) != expected:
        state = "truncated" if len(data) < expected else "longer than its header says"
        raise DataError(
            f"{path}: IDX file is {state}: {len(data)} bytes, header {dims} needs {expected}"
        )
    return np.frombuffer(data, dtype=dtype, offset=header).reshape(dims).copy()


def source_files(path: Path | None, info: DatasetInfo) -> list[Path]:
    located = _locate(_need(path))
    return [located] if isinstance(located, Path) else list(located.values())


def decode(path: Path | None, request: DecodeRequest) -> Decoded:
    located = _locate(_need(path))
    n_classes = request.info.n_classes
    if isinstance(located, Path):
        arrays = read_npz(located, ("x_train", "y_train", "x_test", "y_test"))
        where = {k: f"{located} [{k}]" for k in arrays}
    else:
        arrays = {k: read_idx(p, IDX_FILES[k][1]) for k, p in located.items()}
        where = {k: str(p) for k, p in located.items()}
    out = {}
    for split in ("train", "test"):
        xk, yk = f"x_{split}", f"y_{split}"
        x = to_pixel_dtype(ensure_nhwc(arrays[xk], where[xk]), where[xk])
        y = as_labels(arrays[yk], n_classes, where[yk])
        check_split(x, y, f"{where[xk]} / {where[yk]}", split)
        out[xk], out[yk] = x, y
    return Decoded(**out)


def split_sizes(path: Path, info: DatasetInfo) -> dict[str, int]:
    located = _locate(path)
    if isinstance(located, Path):
        shapes = npz_shapes(located)
        return {"train": shapes.get("y_train", (0,))[0], "test": shapes.get("y_test", (0,))[0]}
    sizes = {}
    for key, split in (("y_train", "train"), ("y_test", "test")):
        head = _read_bytes(located[key], limit=8)
        _, dims = _parse_header(located[key], head, IDX_FILES[key][1])
        sizes[split] = dims[0]
    return sizes


def _need(path: Path | None) -> Path:
    if path is None:
        raise DataError("mnist needs a data folder; none was located")
    return path
