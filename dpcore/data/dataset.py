"""The framework-neutral data set record every loader returns and every backend consumes."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from dpcore.errors import DataError

if TYPE_CHECKING:  # annotation only: dpcore.ldp imports this module at run time
    from dpcore.ldp.record import LdpRecord


@dataclass(frozen=True, eq=False)
class Dataset:
    """A loaded, split data set held as numpy arrays.

    Images are NHWC, either ``uint8`` in 0..255 or ``float32`` in [0, 1] (after normalisation or
    local-DP noise, values may leave [0, 1] unless clipped). Text data sets hold ``int32`` token
    ids of shape [N, L] (0 = padding). Labels are ``int64`` class indices in
    ``[0, len(class_names))``.

    Attributes:
        name: registry name (``mnist5k``), or ``medmnist:PATH``.
        task: ``image`` or ``text``.
        x_train, y_train, x_test, y_test: the two splits.
        class_names: one human-readable name per class.
        groups_train, groups_test: optional int group labels (e.g. a site or sex column) used by
            per-group fairness metrics; ``None`` when the data set has none.
        group_names: names of the group labels, if any.
        source: where the arrays came from (a path, or the package that ships them).
        vocabulary_size: for text data sets, the number of token ids (padding included).
        extra: free-form facts about the data (e.g. "balanced subset, not the official split").
        ldp: for a locally privatised copy, what was done and what it costs (typed; see
            :mod:`dpcore.ldp.record`); ``None`` for the data as loaded.
        ldp_test_images: for a locally privatised copy, its test images both ways
            (``"clean"``: the originals, ``"privatised"``: noised like the training images;
            float32, in the order of ``y_test``), so that the model can be evaluated on both
            (``x_test`` is one of them, per ``data.ldp_test_inputs``); not part of the
            fingerprint. ``None`` otherwise.
        x_val, y_val: an optional validation split (same example shape and classes as the
            others; e.g. ``imagefolder:``'s ``val/`` folder with ``val: validation``), used
            where a consumer asks for one (the temperature of the calibrated faithfulness);
            ``None`` (both) for the data sets without one. Part of the fingerprint only when
            present, so every data set without one keeps its fingerprint.
    """

    name: str
    task: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    class_names: tuple[str, ...]
    groups_train: np.ndarray | None = None
    groups_test: np.ndarray | None = None
    group_names: tuple[str, ...] | None = None
    source: str = ""
    vocabulary_size: int | None = None
    extra: dict[str, str] = field(default_factory=dict)
    ldp: LdpRecord | None = None
    ldp_test_images: dict[str, np.ndarray] | None = None
    x_val: np.ndarray | None = None
    y_val: np.ndarray | None = None

    def __post_init__(self) -> None:
        validate_arrays(self)

    @property
    def n_classes(self) -> int:
        return len(self.class_names)

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one example (H, W, C for images; L for text)."""
        return tuple(int(d) for d in self.x_train.shape[1:])

    @property
    def fingerprint(self) -> str:
        """SHA-256 (first 16 hex digits) over shapes, dtypes and bytes of all arrays.

        Two data sets with the same fingerprint hold identical arrays, so results keyed by it
        were trained and evaluated on the same data.
        """
        cached = self.__dict__.get("_fingerprint")
        if cached is not None:
            return cached
        digest = hashlib.sha256()
        arrays = (self.x_train, self.y_train, self.x_test, self.y_test,
                  self.groups_train, self.groups_test)
        for arr in arrays:
            if arr is None:
                digest.update(b"none")
                continue
            contiguous = np.ascontiguousarray(arr)
            digest.update(f"{contiguous.dtype.str}{contiguous.shape}".encode())
            digest.update(contiguous.tobytes())
        digest.update("|".join(self.class_names).encode())
        if self.x_val is not None and self.y_val is not None:  # absent: the old digest
            for arr in (self.x_val, self.y_val):
                contiguous = np.ascontiguousarray(arr)
                digest.update(f"val{contiguous.dtype.str}{contiguous.shape}".encode())
                digest.update(contiguous.tobytes())
        value = digest.hexdigest()[:16]
        object.__setattr__(self, "_fingerprint", value)
        return value


def validate_arrays(ds: Dataset) -> None:
    """Raise DataError (naming the data set and array) if the arrays break the contract."""
    where = f"data set {ds.name!r}"
    if ds.task not in ("image", "text"):
        raise DataError(f"{where}: task={ds.task!r} is not valid; valid: image, text")
    if not ds.class_names:
        raise DataError(f"{where}: has no class names")
    if (ds.x_val is None) != (ds.y_val is None):
        raise DataError(f"{where}: the validation split needs both x_val and y_val, or neither")
    splits = [("train", ds.x_train, ds.y_train), ("test", ds.x_test, ds.y_test)]
    if ds.x_val is not None and ds.y_val is not None:
        splits.append(("validation", ds.x_val, ds.y_val))
    for split, x, y in splits:
        if len(x) == 0:
            raise DataError(f"{where}: the {split} split is empty; need at least one example")
        if len(x) != len(y):
            raise DataError(
                f"{where}: {split} has {len(x)} inputs but {len(y)} labels; counts must match"
            )
        if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
            raise DataError(
                f"{where}: {split} labels have shape {y.shape} and dtype {y.dtype}; "
                "need a 1-D integer array"
            )
        if y.min() < 0 or y.max() >= len(ds.class_names):
            raise DataError(
                f"{where}: {split} labels range over {int(y.min())}..{int(y.max())}; valid: "
                f"0..{len(ds.class_names) - 1} ({len(ds.class_names)} classes)"
            )
        if ds.task == "image":
            if x.ndim != 4 or x.shape[-1] not in (1, 3):
                raise DataError(
                    f"{where}: {split} images have shape {x.shape}; need NHWC with 1 or 3 channels"
                )
            if x.dtype not in (np.uint8, np.float32):
                raise DataError(f"{where}: {split} images are {x.dtype}; need uint8 or float32")
            if x.dtype == np.float32 and not np.isfinite(x).all():
                raise DataError(f"{where}: {split} images contain NaN or inf pixel values")
        elif x.ndim != 2:
            raise DataError(f"{where}: {split} text has shape {x.shape}; need [N, L] token ids")
    if ds.x_train.shape[1:] != ds.x_test.shape[1:]:
        raise DataError(
            f"{where}: train examples have shape {ds.x_train.shape[1:]} but test examples "
            f"{ds.x_test.shape[1:]}; both splits need one shape"
        )
    if ds.x_val is not None and ds.x_val.shape[1:] != ds.x_train.shape[1:]:
        raise DataError(
            f"{where}: train examples have shape {ds.x_train.shape[1:]} but validation "
            f"examples {ds.x_val.shape[1:]}; every split needs one shape"
        )
    for split, groups, n in (("train", ds.groups_train, len(ds.x_train)),
                             ("test", ds.groups_test, len(ds.x_test))):
        if groups is not None and (groups.shape != (n,)):
            raise DataError(f"{where}: {split} group labels have shape {groups.shape}; need ({n},)")
