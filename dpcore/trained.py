"""The trained-model record both backends return, and its one checkpoint format.

A checkpoint is a single ``.npz`` file holding the evaluation weights in the framework-neutral
layout of :mod:`dpcore.weights` plus one JSON metadata entry (``__meta__``): the run config,
the input shape, class names and the backend that trained it. Because the layout is neutral,
a checkpoint written by either backend loads into either backend.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dpcore.config import PerfSpec, RunConfig
from dpcore.data.dataset import Dataset
from dpcore.errors import CheckpointChangedError, ConfigError
from dpcore.io import npz_bytes
from dpcore.results import RunResult, atomic_write_bytes, json_safe
from dpcore.storage import file_sha256
from dpcore.weights import Weights

CHECKPOINT_FORMAT = 1
CHECKPOINT_FILE = "checkpoint.npz"
_META_KEY = "__meta__"


@dataclass
class TrainedModel:
    """A trained model of one backend with everything needed to use and describe it.

    Attributes:
        backend: ``tf`` or ``torch``.
        model: the framework model (Keras ``Model`` / torch ``nn.Module``) holding the
            evaluation weights (the EMA weights when ``train.ema_decay`` is set).
        config: the run's configuration.
        weights: the evaluation weights in the neutral layout (float32 numpy copies).
        input_shape: one example's shape, ``(H, W, C)`` or ``(L,)``.
        n_classes: number of classes (logits).
        task: ``image`` or ``text``.
        class_names: one name per class.
        vocab_size: token-id count of text models, else ``None``.
        perf: the performance switches used (``None`` for a loaded checkpoint).
        result: the run's RunResult (``None`` for a loaded checkpoint without one).
        extra: backend details (e.g. the torch engine used).
        dataset: the data set the model was evaluated on (the config's data factors
            applied, the audit's input canaries not appended); ``None`` for a loaded
            checkpoint.
    """

    backend: str
    model: Any
    config: RunConfig
    weights: Weights
    input_shape: tuple[int, ...]
    n_classes: int
    task: str = "image"
    class_names: tuple[str, ...] = ()
    vocab_size: int | None = None
    perf: PerfSpec | None = None
    result: RunResult | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    dataset: Dataset | None = None

    @property
    def status(self) -> str | None:
        """The run's status (``finished``, ``diverged``...) when a result is attached."""
        return None if self.result is None else self.result.status

    @property
    def history(self) -> list[dict[str, Any]]:
        """Per-epoch records of the run (empty for a loaded checkpoint without a result)."""
        return [] if self.result is None else list(self.result.history)


def checkpoint_meta(trained: TrainedModel) -> dict[str, Any]:
    """The JSON metadata stored next to the weights."""
    return json_safe({
        "format": CHECKPOINT_FORMAT,
        "backend": trained.backend,
        "config": trained.config.to_dict(),
        "config_hash": trained.config.config_hash,
        "input_shape": list(trained.input_shape),
        "n_classes": trained.n_classes,
        "task": trained.task,
        "class_names": list(trained.class_names),
        "vocab_size": trained.vocab_size,
        "ema": trained.config.train.ema_decay is not None,
    })


def write_checkpoint(path: str | Path, weights: Mapping[str, np.ndarray],
                     meta: Mapping[str, Any]) -> Path:
    """Write weights + metadata to one ``.npz`` atomically; returns the path.

    The file is :func:`dpcore.io.npz_bytes` of them: the same weights and metadata give the
    same bytes, hence the same SHA-256 (:func:`checkpoint_sha256`, kept in the run's record).
    """
    if _META_KEY in weights:
        raise ConfigError(f"a weight may not be called {_META_KEY!r}")
    arrays = {k: np.asarray(v) for k, v in weights.items()}
    path = Path(path)
    atomic_write_bytes(path, npz_bytes(arrays, meta))
    return path


def checkpoint_sha256(path: str | Path) -> str:
    """Hex SHA-256 of the checkpoint file's bytes (what a run's record keeps as
    ``checkpoint_sha256``)."""
    return file_sha256(path)


def verify_checkpoint(path: str | Path, expected_sha256: str | None) -> Path:
    """``path`` when its SHA-256 is ``expected_sha256`` (or nothing is expected: a record
    without ``checkpoint_sha256``); returns the path.

    Raises:
        CheckpointChangedError: one line naming the file and both digests: the file is not
            the one the run stored (changed, replaced or damaged since).
    """
    path = Path(path)
    if expected_sha256 is None:
        return path
    actual = checkpoint_sha256(path)
    if actual != expected_sha256:
        raise CheckpointChangedError(
            f"checkpoint {path} has SHA-256 {actual}, but its run record says "
            f"{expected_sha256}: the file changed after the run stored it; refusing to load "
            "it (restore the file, or train the run again)")
    return path


def recorded_checkpoint(store_root: str | Path, result: RunResult) -> Path:
    """The checkpoint of the stored run ``result`` under ``store_root``, checked against the
    SHA-256 its record keeps (:func:`verify_checkpoint`): every caller that loads a run's
    checkpoint goes through this.

    Raises:
        ConfigError: the record names no checkpoint, or the file is missing.
        CheckpointChangedError: the file is not the one the run stored.
    """
    if not result.checkpoint:
        raise ConfigError(f"run {result.run_id} has no checkpoint in its record")
    path = Path(store_root) / str(result.checkpoint)
    if not path.is_file():
        raise ConfigError(f"checkpoint {path} of run {result.run_id} does not exist")
    return verify_checkpoint(path, result.checkpoint_sha256)


def read_checkpoint(path: str | Path) -> tuple[Weights, dict[str, Any]]:
    """Read ``(weights, meta)`` from a checkpoint written by :func:`write_checkpoint`.

    Raises:
        ConfigError: missing file, not a checkpoint, or an unknown format version.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"checkpoint {path} does not exist")
    try:
        with np.load(path, allow_pickle=False) as data:
            if _META_KEY not in data.files:
                raise ConfigError(f"{path} is not a dpcompare checkpoint (no {_META_KEY} entry)")
            meta = json.loads(str(data[_META_KEY]))
            weights = {k: np.asarray(data[k]) for k in data.files if k != _META_KEY}
    except (OSError, ValueError) as exc:
        raise ConfigError(f"checkpoint {path} is not readable: {exc}") from exc
    if meta.get("format") != CHECKPOINT_FORMAT:
        raise ConfigError(
            f"checkpoint {path} has format {meta.get('format')!r}; valid: {CHECKPOINT_FORMAT}"
        )
    return weights, meta


def save_checkpoint(trained: TrainedModel, path: str | Path) -> Path:
    """Write ``trained``'s evaluation weights and metadata to ``path`` (``.npz``)."""
    return write_checkpoint(path, trained.weights, checkpoint_meta(trained))


def load_trained(
    path: str | Path, backend: str, build_model: Callable[..., Any],
    set_weights: Callable[[Any, Mapping[str, np.ndarray]], None],
) -> TrainedModel:
    """Rebuild a backend's model from a checkpoint (written by either backend).

    Args:
        path: the ``.npz`` checkpoint.
        backend: the backend loading it (``tf`` or ``torch``).
        build_model: that backend's ``build_model(spec, input_shape, n_classes, vocab_size=)``.
        set_weights: that backend's ``set_weights(model, weights)``.
    """
    weights, meta = read_checkpoint(path)
    config = RunConfig.from_dict(meta["config"])
    input_shape = tuple(int(d) for d in meta["input_shape"])
    n_classes = int(meta["n_classes"])
    model = build_model(config.model, input_shape, n_classes, vocab_size=meta.get("vocab_size"))
    set_weights(model, weights)
    return TrainedModel(
        backend=backend, model=model, config=config,
        weights={k: np.asarray(v, dtype=np.float32) for k, v in weights.items()},
        input_shape=input_shape, n_classes=n_classes, task=meta.get("task", "image"),
        class_names=tuple(meta.get("class_names", ())), vocab_size=meta.get("vocab_size"),
        extra={"trained_by": meta.get("backend"), "checkpoint": str(path)},
    )
