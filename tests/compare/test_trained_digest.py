"""Each run record keeps its checkpoint's SHA-256, and every place that loads a checkpoint checks
it: ``api.load_model``, the grid's montages, ``benchmarks.auc_scoring`` and ``dpcompare audit``
refuse a changed file in one line naming it and both digests. Records without the digest still
load. One tiny run is trained once for the module (torch, digits at 16x16, 3 steps)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from compare import api
from compare.grid import Grid, expand_grid
from compare.grid_montages import store_montages
from compare.runner import run_grid
from dpcore.errors import CheckpointChangedError
from dpcore.pipeline import DatasetCache
from dpcore.results import ResultsStore, RunResult, read_result
from dpcore.storage import file_sha256
from dpcore.trained import read_checkpoint, write_checkpoint

GRID: dict[str, Any] = {
    "name": "digest-check",
    "base": {"data": {"name": "digits", "image_size": 16}, "model": {"name": "cnn4"},
             "train": {"steps": 3, "batch_size": 64, "lr": 0.5},
             "privacy": {"mechanism": "dpsgd-gaussian", "noise_multiplier": 1.0}},
    "seeds": 1, "backends": ["torch"],
    "evaluation": {"faithfulness": False, "montage_images": 2},
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Grid, Path]]:
    """The grid and its store with the one run trained (read only: tests copy it)."""
    root = tmp_path_factory.mktemp("digest")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DPCOMPARE_CACHE_DIR", str(root / "cache"))
        grid = expand_grid(GRID)
        outcome = run_grid(grid, root / "store", progress=False, log=lambda _line: None)
        assert len(outcome.ran) == 1 and not outcome.failed
        yield grid, root / "store"


@pytest.fixture()
def store(trained: tuple[Grid, Path], tmp_path: Path,
          monkeypatch: pytest.MonkeyPatch) -> ResultsStore:
    """A copy of the trained store this test may change."""
    monkeypatch.setenv("DPCOMPARE_CACHE_DIR", str(trained[1].parent / "cache"))
    shutil.copytree(trained[1], tmp_path / "store")
    return ResultsStore(tmp_path / "store")


def the_run(store: ResultsStore) -> RunResult:
    (result,) = store.list_runs()
    return result


def tamper(store: ResultsStore) -> tuple[Path, str, str]:
    """Rewrite the run's checkpoint as a valid checkpoint with one weight changed; returns the
    path, the recorded digest and the file's new one."""
    result = the_run(store)
    path = store.root / str(result.checkpoint)
    weights, meta = read_checkpoint(path)
    first = sorted(weights)[0]
    weights[first] = np.asarray(weights[first]) + np.float32(1e-3)
    write_checkpoint(path, weights, meta)
    return path, result.checkpoint_sha256 or "", file_sha256(path)


def assert_refusal(message: str, path: Path, recorded: str, actual: str) -> None:
    assert "\n" not in message
    assert f"checkpoint {path} has SHA-256 {actual}" in message
    assert f"its run record says {recorded}" in message and "refusing to load it" in message


def test_the_record_keeps_the_checkpoints_digest_and_the_file_is_reproducible(
        store: ResultsStore, tmp_path: Path) -> None:
    result = the_run(store)
    path = store.root / str(result.checkpoint)
    assert result.checkpoint_sha256 == file_sha256(path)
    assert len(result.checkpoint_sha256) == 64
    weights, meta = read_checkpoint(path)  # the same weights and metadata: the same bytes
    assert file_sha256(write_checkpoint(tmp_path / "again.npz", weights, meta)) == (
        result.checkpoint_sha256)
    assert api.load_model(path.parent).config.config_hash == result.config_hash


def test_load_model_refuses_a_changed_checkpoint_in_one_line(store: ResultsStore) -> None:
    path, recorded, actual = tamper(store)
    for given in (path.parent, path):  # the run folder or the file itself
        with pytest.raises(CheckpointChangedError) as caught:
            api.load_model(given)
        assert_refusal(str(caught.value), path, recorded, actual)


def test_the_cli_refusal_is_one_line(store: ResultsStore,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    from compare.cli.main import main

    path, recorded, actual = tamper(store)
    code = main(["audit", str(path.parent), "--dry-run"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert_refusal(err, path, recorded, actual)


def test_montages_leave_out_a_changed_checkpoint_saying_why(
        trained: tuple[Grid, Path], store: ResultsStore) -> None:
    grid = trained[0]
    lines: list[str] = []
    assert store_montages(grid, store, DatasetCache(None), log=lines.append)  # intact: stored
    path, recorded, actual = tamper(store)
    lines.clear()
    assert store_montages(grid, store, DatasetCache(None), log=lines.append) == []
    (line,) = lines
    assert line.startswith("montage digits/cnn4: skipped torch: ")
    assert_refusal(line, path, recorded, actual)


def test_auc_scoring_refuses_a_changed_checkpoint(store: ResultsStore) -> None:
    from benchmarks.auc_scoring import score_run

    path, recorded, actual = tamper(store)
    with pytest.raises(CheckpointChangedError) as caught:
        score_run(store, the_run(store), DatasetCache(None))
    assert_refusal(str(caught.value), path, recorded, actual)


def test_a_record_without_the_digest_still_loads(store: ResultsStore) -> None:
    result = the_run(store)
    record = store.run_dir(result.config_hash, result.backend) / "result.json"
    raw = json.loads(record.read_text())
    del raw["checkpoint_sha256"]
    record.write_text(json.dumps(raw))
    old = read_result(record)
    assert old is not None and old.checkpoint_sha256 is None
    assert "checkpoint_sha256" not in old.to_dict()  # written back as it was read
    tamper(store)  # nothing to check it against: loaded as before
    assert api.load_model(record.parent).config.config_hash == result.config_hash
