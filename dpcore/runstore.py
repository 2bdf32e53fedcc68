"""Writing a trained run into a results store: its checkpoint, then its record, each atomically
(:mod:`dpcore.io`); a storage fault loses nothing (:func:`save_run`).

When the storage refuses either file (no space, a quota, a read-only or forbidden folder:
:mod:`dpcore.storage`),

* the store stays consistent: the checkpoint this attempt wrote is removed (a checkpoint never
  stands without the record that names it and its digest), the record is not written (an
  atomic write leaves the previous file or none), a run folder the attempt left empty is
  removed, and nothing half-written remains;
* the trained run is **kept**: its checkpoint and record are written, in the store's own layout
  (``runs/<run id>/``), to a fresh folder under the rescue folder
  (:func:`dpcore.storage.rescue_root`: ``$DPCOMPARE_RESCUE_DIR``, else ``dpcompare-rescue`` in
  the system's temporary folder). The temporary folder is usually another file system than a
  results store (often a RAM disk, or the system disk rather than a data disk), and a run is
  small beside the minutes to hours of computing it cost; moving the kept folder into the
  store's ``runs/`` once there is room makes it a finished run there (the record's checkpoint
  path is relative to the store root). Keeping it in place of its claim file would leave a
  claim held and a file of another kind in ``claims/``, so the rescue folder is the one place;
* the :class:`~dpcore.errors.StorageError` raised says where the run was kept, or that it is
  lost and why (the rescue write was refused too).

Nothing here imports a framework: the backend's checkpoint writer is passed in.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from dpcore.errors import StorageError
from dpcore.results import RESULT_FILE, ResultsStore, RunResult
from dpcore.storage import RESCUE_ENV, file_sha256, is_storage_fault, rescue_root, storage_error
from dpcore.trained import CHECKPOINT_FILE

__all__ = ["CheckpointWriter", "rescue", "save_run"]

#: Writes a run's checkpoint to the path it is given; returns the path written.
CheckpointWriter = Callable[[Path], "Path | str"]


@dataclasses.dataclass
class _Progress:
    """The file being written (``trying``) and the files written so far."""

    trying: Path | None = None
    written: list[Path] = dataclasses.field(default_factory=list)


def _write(store: ResultsStore, result: RunResult, save_checkpoint: CheckpointWriter | None,
           progress: _Progress) -> Path:
    """Checkpoint (recorded with its path relative to the store and its SHA-256), then record;
    ``progress`` follows which file is being written and which exist."""
    run_dir = store.run_dir(result.config_hash, result.backend)
    if save_checkpoint is not None:
        progress.trying = run_dir / CHECKPOINT_FILE
        path = Path(save_checkpoint(progress.trying))
        progress.written.append(path)
        result.checkpoint = str(path.relative_to(store.root))
        result.checkpoint_sha256 = file_sha256(path)
    progress.trying = run_dir / RESULT_FILE
    return store.save(result)


def save_run(store: ResultsStore, result: RunResult,
             save_checkpoint: CheckpointWriter | None = None) -> Path:
    """Write ``result`` (and, with ``save_checkpoint``, its checkpoint first) into ``store``;
    returns the record's path. ``result.checkpoint`` and ``result.checkpoint_sha256`` are set
    from the checkpoint written.

    Raises:
        StorageError: the storage refused a write: the store is left consistent and the run
            kept in the rescue folder, both as the module docstring says; the message names
            the folder, the file, the bytes needed (when known), and where the run is kept
            (or why it is lost).
    """
    progress = _Progress()
    try:
        return _write(store, result, save_checkpoint, progress)
    except OSError as exc:
        if not is_storage_fault(exc):
            raise
        for path in progress.written:  # no checkpoint without the record naming it
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # nor a run folder this attempt left empty
            store.run_dir(result.config_hash, result.backend).rmdir()
        fault = exc if isinstance(exc, StorageError) else storage_error(exc, progress.trying)
        kept = rescue(result, save_checkpoint, store.runs_dir)
        raise StorageError(f"{fault}; {kept}", errno=exc.errno, folder=getattr(
            fault, "folder", None), needed=getattr(fault, "needed", None)) from exc


def rescue(result: RunResult, save_checkpoint: CheckpointWriter | None,
           runs_dir: str | Path) -> str:
    """Keep ``result`` (and its checkpoint) in a fresh folder under :func:`rescue_root`, in
    the store layout; returns the phrase saying where (and that moving it into ``runs_dir``,
    the store's ``runs/`` folder, makes it a finished run there), or that the run is lost and
    why."""
    base = rescue_root()
    copy = dataclasses.replace(result, perf=dict(result.perf))
    root: Path | None = None
    try:
        base.mkdir(parents=True, exist_ok=True)
        root = Path(tempfile.mkdtemp(prefix=f"{result.run_id}-", dir=base))
        _write(ResultsStore(root), copy, save_checkpoint, _Progress())
    except OSError as exc:
        if root is not None:  # no half-kept run either
            shutil.rmtree(root, ignore_errors=True)
        why = storage_error(exc) if is_storage_fault(exc) else f"{type(exc).__name__}: {exc}"
        return (f"the trained run {result.run_id} is LOST: keeping it in {base} failed too "
                f"({why}); set {RESCUE_ENV} to a folder with room to keep the next one")
    kept = ResultsStore(root).run_dir(result.config_hash, result.backend)
    return (f"the trained run {result.run_id} is kept in {kept} (move that folder into "
            f"{runs_dir} once there is room: it then counts as finished there)")
