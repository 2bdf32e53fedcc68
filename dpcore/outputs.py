"""The per-example test outputs a RunResult keeps, so that its metrics can be recomputed from
the record alone (:mod:`dpcore.scoring`).

A finished run whose evaluation set is small (at most :data:`MAX_KEPT_VALUES` logits, test
examples x classes) keeps, in its record's ``test_outputs`` entry:

* ``logits``: the float32 logits [n, n_classes] its final metrics were scored from, exactly
  (float16 would round nearby logits to one value and tie them again);
* ``labels``: the true classes [n];
* ``groups`` / ``group_names``: the group of each example and the groups' names, when the
  data set has groups (:func:`dpcore.metrics.per_group_metrics`).

Each array is stored as text: its little-endian bytes, zlib-compressed (level 9), in URL-safe
base64 (no ``/``: a report's records pass through a rewrite of folder paths,
:func:`compare.records.portable_text`), with its dtype and shape beside it. The outputs are in
the same JSON object as the metrics scored from them, so that a record and its logits cannot
drift apart; zlib's checksum refuses damaged bytes. Hand-written: numpy has no text encoding of
an array, and an npz in base64 would add a zip container per array.

Size: float32 logits hardly compress (their mantissa bits are noise): measured 4.0-4.2 bytes
per logit in a report's ``records.jsonl.gz`` (zlib, base64, then the file's gzip) for DP-SGD
runs, so a record keeps at most about 8.5 KB of outputs, beside the 2-3 KB of its other
fields.
"""

from __future__ import annotations

import base64
import binascii
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpcore.errors import DataError

#: Most logits (evaluation examples x classes) a record keeps: 8 KiB of float32, about 8.5 KB
#: in a report's records. Every binary test set up to 1,024 examples and every 5-class one up
#: to 409 fits (the committed reports' cats vs dogs 1,000 x 2, PneumoniaMNIST 624 x 2,
#: RetinaMNIST 400 x 5); the 10-class sets (1,000 or 10,000 x 10) do not: their 40 to 400 KB
#: per run would make a report's records, now 2 to 3 KB per run, grow tenfold or more.
MAX_KEPT_VALUES = 2048

#: The version of the encoding below (in each ``test_outputs`` entry).
OUTPUTS_ENCODING = "zlib9-base64url-le/1"


@dataclass(frozen=True)
class TestOutputs:
    """A run's final outputs on its evaluation set (the set its ``metrics`` are scored on).

    Attributes:
        logits: float32 [n, n_classes], the model's logits (evaluation weights).
        labels: int64 [n], the true classes in 0..n_classes-1.
        groups: int64 [n] group of each example, or None (the groups are then the classes).
        group_names: the groups' display names by group value, or None.
    """

    __test__ = False  # not a pytest test class, whatever its name

    logits: np.ndarray
    labels: np.ndarray
    groups: np.ndarray | None = None
    group_names: tuple[str, ...] | None = None

    @property
    def n(self) -> int:
        """Examples."""
        return int(self.logits.shape[0])

    @property
    def n_classes(self) -> int:
        """Classes (columns of the logits)."""
        return int(self.logits.shape[1])

    def to_record(self) -> dict[str, Any]:
        """The RunResult ``test_outputs`` entry (JSON-able; see the module docstring)."""
        out: dict[str, Any] = {
            "encoding": OUTPUTS_ENCODING, "n": self.n, "n_classes": self.n_classes,
            "logits": _encode(self.logits.astype("<f4")),
            "labels": _encode(self.labels.astype(_label_dtype(self.n_classes))),
        }
        if self.groups is not None:
            out["groups"] = _encode(self.groups.astype("<i8"))
            out["group_names"] = None if self.group_names is None else list(self.group_names)
        return out

    @classmethod
    def from_record(cls, raw: Mapping[str, Any], where: str = "test_outputs") -> TestOutputs:
        """The outputs of a ``test_outputs`` entry.

        Raises:
            DataError: an unknown encoding, damaged text or arrays of the wrong shape, naming
                ``where`` (e.g. the run id).
        """
        if raw.get("encoding") != OUTPUTS_ENCODING:
            raise DataError(f"{where}: unknown encoding {raw.get('encoding')!r}; valid: "
                            f"{OUTPUTS_ENCODING!r}")
        try:
            n, k = int(raw["n"]), int(raw["n_classes"])
            logits = _decode(raw["logits"], "<f4", (n, k))
            labels = _decode(raw["labels"], _label_dtype(k), (n,)).astype(np.int64)
            groups = (None if raw.get("groups") is None
                      else _decode(raw["groups"], "<i8", (n,)).astype(np.int64))
        except (KeyError, TypeError, ValueError, zlib.error, binascii.Error) as exc:
            raise DataError(f"{where}: unreadable test outputs ({exc}); the record must be "
                            "rewritten by the run that wrote it") from exc
        names = raw.get("group_names")
        return cls(logits=logits, labels=labels, groups=groups,
                   group_names=None if names is None else tuple(str(v) for v in names))


def kept_outputs(logits: np.ndarray | None, labels: np.ndarray, *,
                 groups: np.ndarray | None = None, group_names: Sequence[str] | None = None,
                 limit: int = MAX_KEPT_VALUES) -> TestOutputs | None:
    """The :class:`TestOutputs` a record keeps, or None: no logits, non-finite ones, or more
    than ``limit`` values (examples x classes). ``group_names`` (by group value) are kept
    with ``groups`` only."""
    if logits is None:
        return None
    z = np.asarray(logits)
    if z.ndim != 2 or z.size > limit or not np.all(np.isfinite(z)):
        return None
    return TestOutputs(
        logits=z.astype(np.float32), labels=np.asarray(labels, dtype=np.int64),
        groups=None if groups is None else np.asarray(groups, dtype=np.int64),
        group_names=(None if groups is None or group_names is None
                     else tuple(str(v) for v in group_names)))


def _label_dtype(n_classes: int) -> str:
    """The smallest little-endian unsigned dtype holding 0..n_classes-1."""
    return np.dtype(np.min_scalar_type(max(n_classes - 1, 0))).newbyteorder("<").str


def _encode(array: np.ndarray) -> str:
    return base64.urlsafe_b64encode(zlib.compress(np.ascontiguousarray(array).tobytes(), 9)
                                    ).decode("ascii")


def _decode(text: str, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    data = zlib.decompress(base64.urlsafe_b64decode(text.encode("ascii")))
    return np.frombuffer(data, dtype=np.dtype(dtype)).reshape(shape).copy()


__all__ = ["MAX_KEPT_VALUES", "OUTPUTS_ENCODING", "TestOutputs", "kept_outputs"]
