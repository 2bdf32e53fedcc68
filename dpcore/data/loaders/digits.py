"""``digits``: scikit-learn's 1,797 8x8 handwritten digits, with a seeded stratified split.

Pixels hold 0..16 in the source; they are scaled to 0..255 as ``round(v * 255 / 16)`` (numpy
rounding, ties to even) and stored as ``uint8`` 8x8x1. The split is stratified by digit,
``test_fraction`` (default 0.2: 1,437 / 360) seeded by ``DataSpec.split_seed``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dpcore.data.loaders.base import Decoded, DecodeRequest, as_labels
from dpcore.data.splits import split_counts, stratified_split
from dpcore.datasets import DatasetInfo

N_EXAMPLES = 1797


def _data_file() -> Path:
    import sklearn.datasets

    return Path(sklearn.datasets.__file__).parent / "data" / "digits.csv.gz"


def source_files(path: Path | None, info: DatasetInfo) -> list[Path]:
    return [_data_file()]


def decode(path: Path | None, request: DecodeRequest) -> Decoded:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = np.round(np.asarray(bunch.images, dtype=np.float64) * (255.0 / 16.0))
    x = np.clip(x, 0, 255).astype(np.uint8)[..., np.newaxis]
    y = as_labels(np.asarray(bunch.target), request.info.n_classes, "sklearn load_digits()")
    fraction = float(request.options["test_fraction"])
    train, test = stratified_split(y, fraction, request.split_seed)
    return Decoded(
        x_train=x[train], y_train=y[train], x_test=x[test], y_test=y[test],
        extra={"scaling": "0..16 scaled to 0..255 by round(v * 255 / 16)",
               "split": f"seeded stratified split, test_fraction={fraction:g}, "
               f"split_seed={request.split_seed}"},
    )


def split_sizes(path: Path | None, info: DatasetInfo) -> dict[str, int]:
    n_train, n_test = split_counts(N_EXAMPLES, float(info.options["test_fraction"]))
    return {"train": n_train, "test": n_test}
