"""Storage faults lose nothing: a disk that fills up (ENOSPC) or a folder that is read-only
(EROFS, EACCES) while a run is written gives one line naming the folder and what the write
needed, exit status 3 (``EXIT_STORAGE``; 2 stays "refused before anything was written"); the
store stays consistent (no half-written record or checkpoint, no claim left held); the trained
run is kept in the rescue folder the line names; a grid keeps its finished runs, and their
report can be written to another folder.

The faults are injected into :func:`dpcore.io.atomic_path` (every bench write goes through it)
for the files under the results folder only, so the data cache, the rescue folder and other
report folders still write; one test also fills a real 40 KB tmpfs (root only; skipped with
the reason where mounting is not allowed). Nothing here waits on a clock.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import dpcore.io
from compare import api
from compare.cli.main import EXIT_STORAGE, EXIT_USER_ERROR
from dpcore.claims import ClaimBoard
from dpcore.errors import StorageError
from dpcore.results import ResultsStore, read_result
from dpcore.storage import RESCUE_ENV, file_sha256
from tests.end_to_end.helpers import cli_env, run_cli, write_grid

TRAIN_ARGS = ["train", "--backend", "torch", "--dataset", "digits", "--model", "cnn4",
              "--set", "data.image_size=16", "--steps", "5", "--batch-size", "64",
              "--noise-multiplier", "1.0", "--faithfulness-subset", "0", "--quiet"]


class Fault:
    """Refuses the atomic writes under ``root`` with ``code`` from the ``after``-th one whose
    file is named ``name`` (any file when None); counts the writes it refused."""

    def __init__(self, root: Path, code: int, *, name: str | None = None,
                 after: int = 1) -> None:
        self.root, self.code, self.name, self.after = root.absolute(), code, name, after
        self.seen = 0
        self.refused: list[Path] = []
        self.real = dpcore.io.atomic_path

    @contextlib.contextmanager
    def atomic_path(self, path: str | Path, **kwargs: Any) -> Iterator[Path]:
        target = Path(path).absolute()
        if target.is_relative_to(self.root) and self.name in (None, target.name):
            self.seen += 1
            if self.seen >= self.after:
                self.refused.append(target)
                raise OSError(self.code, os.strerror(self.code))
        with self.real(path, **kwargs) as tmp:
            yield tmp


def inject(monkeypatch: pytest.MonkeyPatch, fault: Fault) -> Fault:
    monkeypatch.setattr(dpcore.io, "atomic_path", fault.atomic_path)
    return fault


@pytest.fixture()
def rescue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "rescue"
    monkeypatch.setenv(RESCUE_ENV, str(folder))
    return folder


def error_line(code: int, err: str, expected: int = EXIT_STORAGE) -> str:
    """The one ``dpcompare CMD: error: ...`` line of a storage fault (no traceback)."""
    assert code == expected, f"exit status {code}, stderr:\n{err}"
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len([line for line in lines if ": error: " in line]) == 1, err
    assert lines[-1].startswith("dpcompare ") and ": error: " in lines[-1], err
    return lines[-1]


def store_files(out: Path) -> list[str]:
    """Every file under ``out`` (relative), claims included."""
    return sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())


def kept_run(rescue: Path) -> Path:
    """The one run folder kept in the rescue folder."""
    (folder,) = rescue.glob("*/runs/*")
    return folder


def test_disk_full_while_train_stores_its_run(tmp_path: Path, rescue: Path,
                                              monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    fault = inject(monkeypatch, Fault(out, errno.ENOSPC))
    code, _out, err = run_cli(capsys, *TRAIN_ARGS, "--out", out)
    line = error_line(code, err)
    (refused,) = fault.refused
    assert refused.name == "checkpoint.npz"
    assert "no space left on the device" in line and str(refused.parent) in line
    kept = kept_run(rescue)
    assert f"is kept in {kept}" in line and f"move that folder into {out / 'runs'}" in line
    # the store: nothing half-written, no record, no checkpoint, no claim held
    assert store_files(out) == []
    # the run is kept whole: its record (finished) and its checkpoint, digest matching
    record = read_result(kept / "result.json")
    assert record is not None and record.status == "finished"
    assert record.run_id == kept.name and record.checkpoint == f"runs/{kept.name}/checkpoint.npz"
    assert record.checkpoint_sha256 == file_sha256(kept / "checkpoint.npz")
    # moved into the store once there is room, it is a finished run there and loads
    monkeypatch.setattr(dpcore.io, "atomic_path", fault.real)
    shutil.move(str(kept), str(out / "runs" / kept.name))
    assert ResultsStore(out).is_finished(*kept.name.rsplit("-", 1))
    model = api.load_model(out / "runs" / kept.name)
    assert model.config.config_hash == record.config_hash


def test_a_record_refused_after_its_checkpoint_leaves_neither(
        tmp_path: Path, rescue: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The checkpoint is written, the record is refused: the checkpoint is removed (never a
    checkpoint without the record that names it); the rescue folder holds both."""
    out = tmp_path / "out"
    fault = inject(monkeypatch, Fault(out, errno.ENOSPC, name="result.json"))
    code, _out, err = run_cli(capsys, *TRAIN_ARGS, "--out", out)
    line = error_line(code, err)
    assert [p.name for p in fault.refused] == ["result.json"]
    assert f"writing result.json into {fault.refused[0].parent}" in line
    assert store_files(out) == []
    kept = kept_run(rescue)
    assert sorted(p.name for p in kept.iterdir()) == ["checkpoint.npz", "result.json"]


def test_when_the_rescue_folder_is_refused_too_the_line_says_the_run_is_lost(
        tmp_path: Path, rescue: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    inject(monkeypatch, Fault(tmp_path, errno.ENOSPC))  # the store and the rescue folder
    code, _out, err = run_cli(capsys, *TRAIN_ARGS, "--out", tmp_path / "out")
    line = error_line(code, err)
    assert "is LOST: keeping it in" in line and str(rescue) in line and RESCUE_ENV in line
    assert store_files(tmp_path / "out") == []
    assert not any(p.is_file() for p in rescue.rglob("*"))  # nothing half-kept either


@pytest.mark.parametrize("code", [errno.EROFS, errno.EACCES])
def test_a_read_only_or_forbidden_folder_is_a_storage_fault(
        code: int, tmp_path: Path, rescue: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    inject(monkeypatch, Fault(out, code))
    status, _out, err = run_cli(capsys, *TRAIN_ARGS, "--out", out)
    line = error_line(status, err)
    reason = {errno.EROFS: "read-only file system", errno.EACCES: "permission denied"}[code]
    assert line.split(": error: ", 1)[1].startswith(f"{reason}: writing checkpoint.npz into ")
    assert store_files(out) == [] and kept_run(rescue).is_dir()


def test_a_folder_made_read_only_by_chmod(tmp_path: Path, rescue: Path,
                                          monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """The real thing: the run's folder exists and cannot be written (mode 0o555)."""
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    try:
        (locked / "probe").write_bytes(b"")
    except PermissionError:
        pass
    else:
        pytest.skip("chmod does not stop this user's writes (running as root): the injected "
                    "EACCES/EROFS test covers the fault")
    out = tmp_path / "out"
    code, _o, err = run_cli(capsys, *TRAIN_ARGS, "--out", out)  # a first run makes the folder
    assert code == 0, err
    (run_dir,) = (out / "runs").iterdir()
    before = {p.name: p.read_bytes() for p in run_dir.iterdir()}
    run_dir.chmod(0o555)
    try:
        code, _o, err = run_cli(capsys, *TRAIN_ARGS, "--out", out)
        line = error_line(code, err)
        assert "permission denied" in line and str(run_dir) in line
        assert {p.name: p.read_bytes() for p in run_dir.iterdir()} == before  # untouched
    finally:
        run_dir.chmod(0o755)
    assert kept_run(rescue).is_dir()
    assert not list((out / "claims").iterdir())


def test_disk_full_in_a_grid_keeps_its_finished_runs_and_their_report_goes_elsewhere(
        tmp_path: Path, rescue: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    out, grid = tmp_path / "out", write_grid(tmp_path / "grid.yaml")
    fault = inject(monkeypatch, Fault(out, errno.ENOSPC, name="checkpoint.npz", after=3))
    code, _out, err = run_cli(capsys, "compare", "--config", grid, "--out", out, "--report",
                              tmp_path / "report", "--quiet")
    line = error_line(code, err)
    (refused,) = fault.refused  # the third run's checkpoint; the fourth never started
    assert "no space left on the device" in line and str(refused.parent) in line
    assert f"2 of the grid's 4 runs are finished and kept in {out}" in line
    assert f"`dpcompare report {out} --out OTHER_FOLDER`" in line
    assert f"is kept in {kept_run(rescue)}" in line
    store = ResultsStore(out)
    records = store.list_runs()
    assert len(records) == 2 and all(r.status == "finished" for r in records)  # no failed one
    assert refused.parent.name not in {r.run_id for r in records}
    assert sorted(p.parent.name for p in out.glob("runs/*/checkpoint.npz")) == sorted(
        r.run_id for r in records)
    assert not list((out / "claims").iterdir())  # every claim released
    # the store is still full: the report of the finished runs goes to another folder
    code, text, err = run_cli(capsys, "report", out, "--out", tmp_path / "elsewhere")
    assert code == 0, err
    assert "- runs: 2 finished" in (tmp_path / "elsewhere" / "report.md").read_text()
    assert "report.md" in text


def test_a_claim_the_disk_cannot_fill_is_removed(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """An exclusive create can succeed on a full disk (an inode is left) while its content
    cannot be written: the empty claim would hold the run until it went stale."""
    import dpcore.claims

    def full(_fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(dpcore.claims.os, "fsync", full)
    board = ClaimBoard(tmp_path)
    with pytest.raises(StorageError, match=r"no space left on the device: writing "
                       r"abc-torch\.json into .*claims needed \d+ bytes"):
        board.try_claim("abc-torch")
    assert not list(board.folder.iterdir())


def test_exit_statuses_are_distinct() -> None:
    assert EXIT_STORAGE == 3 and EXIT_USER_ERROR == 2


def _mount_small_tmpfs(folder: Path) -> None:
    folder.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a 40 KB tmpfs needs root and mount(8); the injected ENOSPC "
                    "tests cover the fault")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=40k", "tmpfs", str(folder)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not allowed here ({done.stderr.strip()}); the "
                    "injected ENOSPC tests cover the fault")


def test_a_real_40_kb_file_system_fills_up(tmp_path: Path) -> None:
    """``--out`` on a 40 KB tmpfs: the 48 KB checkpoint does not fit."""
    small = tmp_path / "small"
    _mount_small_tmpfs(small)
    try:
        env = {**cli_env(tmp_path / "cache"), RESCUE_ENV: str(tmp_path / "rescue")}
        done = subprocess.run([sys.executable, "-m", "compare.cli.main", *TRAIN_ARGS,
                               "--out", str(small / "out")],
                              cwd=tmp_path, env=env, capture_output=True, text=True,
                              check=False, timeout=900)
        line = error_line(done.returncode, done.stderr)
        run_dir = next((small / "out" / "runs").glob("*"), None)
        assert run_dir is None  # not even an empty run folder
        assert "no space left on the device: writing checkpoint.npz into " in line
        needed = int(line.split(" needed ", 1)[1].split(" bytes", 1)[0].replace(",", ""))
        kept = kept_run(tmp_path / "rescue")
        assert needed == (kept / "checkpoint.npz").stat().st_size > 40 * 1024
        assert "free there" in line and f"is kept in {kept}" in line
        assert store_files(small / "out") == []
        assert json.loads((kept / "result.json").read_text())["status"] == "finished"
    finally:
        subprocess.run(["umount", str(small)], check=False)
