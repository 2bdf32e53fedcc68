"""A write the storage refuses is one line naming the folder, the file and the bytes needed
(:mod:`dpcore.storage`, raised by every atomic writer of :mod:`dpcore.io`), and storing a run
whose files are refused leaves the store consistent and keeps the run elsewhere
(:func:`dpcore.runstore.save_run`)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

import dpcore.io
from dpcore.config import RunConfig
from dpcore.errors import StorageError
from dpcore.io import atomic_write_bytes, write_npz
from dpcore.results import ResultsStore, RunResult, read_result
from dpcore.runstore import save_run
from dpcore.storage import RESCUE_ENV, byte_text, file_sha256, storage_error
from tests.dpcore.test_results import make_result as make_stored_result


def refuse(code: int) -> OSError:
    return OSError(code, os.strerror(code))


def test_a_full_disk_names_the_folder_the_file_and_the_bytes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "sub" / "f.bin"
    atomic_write_bytes(path, b"old")

    def full(_self: Path, _data: bytes) -> int:
        raise refuse(errno.ENOSPC)

    monkeypatch.setattr(Path, "write_bytes", full)
    with pytest.raises(StorageError) as caught:
        atomic_write_bytes(path, b"x" * 1234)
    monkeypatch.undo()
    message = str(caught.value)
    assert message.startswith(f"no space left on the device: writing f.bin into {path.parent} "
                              "needed 1,234 bytes (1.2 KiB), ")
    assert message.endswith(" free there") and "\n" not in message
    assert isinstance(caught.value, OSError) and caught.value.errno == errno.ENOSPC
    assert caught.value.folder == str(path.parent) and caught.value.needed == 1234
    assert path.read_bytes() == b"old" and [p.name for p in path.parent.iterdir()] == ["f.bin"]


def test_a_read_only_folder_is_named_before_anything_is_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def read_only(*_args: object, **_kwargs: object) -> tuple[int, str]:
        raise refuse(errno.EROFS)

    monkeypatch.setattr(dpcore.io.tempfile, "mkstemp", read_only)
    with pytest.raises(StorageError, match=r"^read-only file system: writing m\.npz into "):
        write_npz(tmp_path / "m.npz", {}, {"a": 1})  # size unknown: streamed
    assert not (tmp_path / "m.npz").exists()


def test_other_os_errors_are_left_as_they_are(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(_self: Path, _data: bytes) -> int:
        raise refuse(errno.EIO)

    monkeypatch.setattr(Path, "write_bytes", broken)
    with pytest.raises(OSError) as caught:
        atomic_write_bytes(tmp_path / "f", b"x")
    assert not isinstance(caught.value, StorageError) and caught.value.errno == errno.EIO


def test_byte_text_and_a_fault_naming_no_file() -> None:
    assert byte_text(1) == "1 byte" and byte_text(812) == "812 bytes"
    assert byte_text(3 << 20) == "3,145,728 bytes (3.0 MiB)"
    assert str(storage_error(refuse(errno.EDQUOT))) == "disk quota exceeded: a write was refused"


def make_result() -> RunResult:
    return make_stored_result(RunConfig(), "torch")


def writer(path: Path) -> Path:
    atomic_write_bytes(path, b"weights")
    return path


def test_a_refused_record_removes_its_checkpoint_and_keeps_the_run_elsewhere(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RESCUE_ENV, str(tmp_path / "rescue"))
    store = ResultsStore(tmp_path / "store")
    real = dpcore.io.atomic_write_text

    def refuse_records(path: str | Path, text: str) -> None:
        if Path(path).is_relative_to(store.root):
            raise refuse(errno.ENOSPC)
        real(path, text)

    monkeypatch.setattr(dpcore.io, "atomic_write_text", refuse_records)
    result = make_result()
    with pytest.raises(StorageError) as caught:
        save_run(store, result, writer)
    run_dir = store.run_dir(result.config_hash, "torch")
    assert not run_dir.exists()  # neither the checkpoint nor an empty folder stays
    (kept,) = (tmp_path / "rescue").glob("*/runs/*")
    assert f"writing result.json into {run_dir} was refused" in str(caught.value)
    assert f"is kept in {kept} (move that folder into {store.runs_dir} " in str(caught.value)
    record = read_result(kept / "result.json")
    assert record is not None and record.checkpoint == f"runs/{kept.name}/checkpoint.npz"
    assert record.checkpoint_sha256 == file_sha256(kept / "checkpoint.npz")


def test_a_stored_run_records_its_checkpoints_digest(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    result = make_result()
    path = save_run(store, result, writer)
    record = read_result(path)
    assert record is not None and record.checkpoint_sha256 == file_sha256(
        store.root / str(record.checkpoint))
