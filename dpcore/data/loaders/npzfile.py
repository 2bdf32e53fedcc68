"""Reading npz files safely: no pickle, errors that name the file and key, header-only shapes."""

from __future__ import annotations

import zipfile
import zlib
from pathlib import Path

import numpy as np

from dpcore.data.images import one_line
from dpcore.errors import DataError

_READ_ERRORS = (zipfile.BadZipFile, zlib.error, OSError, ValueError, EOFError, KeyError)


def read_npz(path: Path, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> dict[
    str, np.ndarray
]:
    """Load the named arrays of an npz file (``allow_pickle=False``).

    Args:
        path: the npz file.
        required: keys that must be present.
        optional: keys loaded when present.

    Raises:
        DataError: naming the file if it is not a readable npz, lacks a required key (the
            message lists the keys it holds), or an array is truncated/corrupt.
    """
    try:
        npz = np.load(path, allow_pickle=False)
    except _READ_ERRORS as exc:
        raise DataError(
            f"{path}: not a readable npz file ({one_line(exc)}); valid: a file written by "
            "numpy.savez / savez_compressed"
        ) from exc
    if not isinstance(npz, np.lib.npyio.NpzFile):
        raise DataError(f"{path}: holds a single array, not an npz archive of named arrays")
    with npz:
        missing = [k for k in required if k not in npz.files]
        if missing:
            raise DataError(
                f"{path}: has no array {', '.join(missing)}; it holds: "
                f"{', '.join(npz.files) or 'nothing'}; need: {', '.join(required)}"
            )
        out: dict[str, np.ndarray] = {}
        for key in (*required, *(k for k in optional if k in npz.files)):
            try:
                out[key] = npz[key]
            except _READ_ERRORS as exc:
                raise DataError(
                    f"{path}: array {key!r} is corrupt or truncated ({one_line(exc)})"
                ) from exc
    return out


def npz_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Shapes of the arrays in an npz, read from the .npy headers only (no pixel data).

    Raises:
        DataError: naming the file if it is not a readable npz.
    """
    shapes: dict[str, tuple[int, ...]] = {}
    try:
        with zipfile.ZipFile(path) as zf:
            for member in zf.namelist():
                if not member.endswith(".npy"):
                    continue
                with zf.open(member) as fh:
                    version = np.lib.format.read_magic(fh)
                    if version == (1, 0):
                        shape, _, _ = np.lib.format.read_array_header_1_0(fh)
                    else:
                        shape, _, _ = np.lib.format.read_array_header_2_0(fh)
                shapes[member[: -len(".npy")]] = tuple(int(d) for d in shape)
    except _READ_ERRORS as exc:
        raise DataError(f"{path}: not a readable npz file ({one_line(exc)})") from exc
    return shapes
