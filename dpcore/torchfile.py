"""Read a PyTorch ``state_dict`` file (``torch.save``) into numpy arrays without torch.

``dpcore`` never imports torch, yet a user's pre-trained weights are usually a ``.pt`` file,
and the TensorFlow backend must be able to start from them on a machine without torch. Since
torch 1.6, ``torch.save`` writes a zip archive: ``<name>/data.pkl`` (a pickle of the
``state_dict`` whose tensors refer to storages by key) and ``<name>/data/<key>`` (each
storage's raw little-endian bytes). This module unpickles ``data.pkl`` with an unpickler that
knows only the few names a tensor ``state_dict`` uses (``OrderedDict``, torch's tensor and
parameter rebuild functions, the typed storage classes) and refuses every other global, as
``torch.load(weights_only=True)`` does, so reading a file never runs its code.

Hand-written because no installed library reads this format without torch (safetensors reads
its own format only). Checked against ``torch.save`` in ``tests/dpcore/test_pretrained.py``.
Not supported (one-line error): the legacy non-zip format (``_use_new_zipfile_serialization=
False``), big-endian files, dtypes numpy lacks (bfloat16), and anything that is not a mapping
of names to tensors.
"""

from __future__ import annotations

import pickle
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

from dpcore.errors import ConfigError

#: torch storage class name -> numpy dtype.
STORAGE_DTYPES: dict[str, np.dtype[Any]] = {
    "FloatStorage": np.dtype("<f4"),
    "DoubleStorage": np.dtype("<f8"),
    "HalfStorage": np.dtype("<f2"),
    "LongStorage": np.dtype("<i8"),
    "IntStorage": np.dtype("<i4"),
    "ShortStorage": np.dtype("<i2"),
    "CharStorage": np.dtype("i1"),
    "ByteStorage": np.dtype("u1"),
    "BoolStorage": np.dtype("?"),
}


class _StorageType:
    """Stands for a ``torch.<X>Storage`` class in the pickle (only its dtype is needed)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.dtype = STORAGE_DTYPES[name]


def _rebuild_tensor_v2(storage: np.ndarray, offset: int, size: tuple[int, ...],
                       stride: tuple[int, ...], *_: Any) -> np.ndarray:
    """torch's ``_rebuild_tensor_v2``: a strided view of the storage, copied."""
    item = storage.itemsize
    view = np.lib.stride_tricks.as_strided(
        storage[offset:], shape=tuple(size), strides=tuple(s * item for s in stride))
    return np.array(view)


def _rebuild_parameter(data: np.ndarray, *_: Any) -> np.ndarray:
    """torch's ``_rebuild_parameter``: a parameter is its data here."""
    return data


_ALLOWED: dict[tuple[str, str], Any] = {
    ("collections", "OrderedDict"): OrderedDict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
}


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: Any, archive: zipfile.ZipFile, prefix: str, where: Path) -> None:
        super().__init__(file)
        self.archive, self.prefix, self.where = archive, prefix, where

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch" and name in STORAGE_DTYPES:
            return _StorageType(name)
        if (module, name) in _ALLOWED:
            return _ALLOWED[(module, name)]
        raise ConfigError(f"{self.where}: holds {module}.{name}, which a tensor state_dict "
                          "does not; valid: a file written by torch.save(model.state_dict())")

    def persistent_load(self, pid: Any) -> np.ndarray:
        if not (isinstance(pid, tuple) and pid and pid[0] == "storage"):
            raise ConfigError(f"{self.where}: unknown storage record {pid!r}")
        storage_type, key = pid[1], pid[2]
        if not isinstance(storage_type, _StorageType):
            raise ConfigError(f"{self.where}: storage type {storage_type!r} is not supported; "
                              f"valid: {', '.join(STORAGE_DTYPES)}")
        data = self.archive.read(f"{self.prefix}data/{key}")
        return np.frombuffer(data, dtype=storage_type.dtype)


def read_state_dict(path: str | Path) -> dict[str, np.ndarray]:
    """The tensors of a ``torch.save``-d ``state_dict`` as numpy arrays (PyTorch layout).

    Raises:
        ConfigError: one line naming the file: not a zip ``torch.save`` file, a big-endian
            file, a global other than a tensor's, or a pickle that is not a name -> tensor map.
    """
    path = Path(path)
    if not zipfile.is_zipfile(path):
        raise ConfigError(f"{path}: not a torch.save zip file (legacy format or not PyTorch); "
                          "valid: a state_dict saved by torch >= 1.6 with torch.save")
    with zipfile.ZipFile(path) as archive:
        pickles = [n for n in archive.namelist() if n.endswith("/data.pkl")]
        if len(pickles) != 1:
            raise ConfigError(f"{path}: holds no single data.pkl; valid: a file written by "
                              "torch.save(model.state_dict())")
        prefix = pickles[0][: -len("data.pkl")]
        if f"{prefix}byteorder" in archive.namelist() and \
                archive.read(f"{prefix}byteorder").strip() != b"little":
            raise ConfigError(f"{path}: is big-endian; valid: a little-endian torch.save file")
        with archive.open(pickles[0]) as fh:
            loaded = _Unpickler(fh, archive, prefix, path).load()
    if not isinstance(loaded, dict) or not all(
            isinstance(k, str) and isinstance(v, np.ndarray) for k, v in loaded.items()):
        raise ConfigError(f"{path}: is not a state_dict (a mapping of names to tensors); "
                          "valid: torch.save(model.state_dict(), path)")
    return dict(loaded)
