"""Data sets: the registry, loaders of their native formats, splits, caching.

Public API:

* :data:`DATASETS` / :class:`DatasetInfo`: the registry (``dpcompare datasets`` prints it;
  defined in the leaf module :mod:`dpcore.datasets`).
* :func:`resolve_data_root`: ``--data-dir``, else ``$DPCOMPARE_DATA_DIR``, else
  ``~/.dpcompare/data``.
* :func:`load_dataset`: ``DataSpec`` -> :class:`Dataset` (uint8 NHWC images, int64 labels).
* :func:`dataset_table`: one row per data set: found where, split sizes, how to get it.
* :func:`as_float01`: ``uint8`` images -> ``float32`` in [0, 1] (the one place dividing by 255).

This package never imports TensorFlow or PyTorch; Pillow, scikit-learn and mlxtend are
imported only when a loader needs them.
"""

from dpcore.data.dataset import Dataset
from dpcore.data.images import as_float01
from dpcore.data.loading import load_dataset
from dpcore.data.paths import DATA_DIR_ENV, resolve_data_root
from dpcore.data.table import dataset_table
from dpcore.datasets import (
    DATASETS,
    MEDMNIST_PREFIX,
    DatasetInfo,
    data_provenance,
    get_info,
    portable_location,
)

__all__ = [
    "DATASETS",
    "DATA_DIR_ENV",
    "MEDMNIST_PREFIX",
    "Dataset",
    "DatasetInfo",
    "as_float01",
    "data_provenance",
    "dataset_table",
    "get_info",
    "load_dataset",
    "portable_location",
    "resolve_data_root",
]
