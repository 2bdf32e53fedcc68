"""A run refused before training (``ConfigError`` from the training callable) leaves no folder
that taking its claim created (:func:`compare.train_claim.train_claimed`), and never removes a
folder that holds a file."""

from __future__ import annotations

from pathlib import Path

import pytest

from compare.train_claim import missing_folders, remove_if_empty, train_claimed
from dpcore.errors import ConfigError
from dpcore.results import ResultsStore, RunResult


def _refuse() -> RunResult:
    raise ConfigError("privacy.sampling='poisson' is refused here; valid: shuffle")


def test_a_refused_run_leaves_no_folder_it_created(tmp_path: Path) -> None:
    out = tmp_path / "a" / "runs"
    with pytest.raises(ConfigError, match="poisson"):
        train_claimed(ResultsStore(out), "0123456789abcdef-tf", _refuse)
    assert not (tmp_path / "a").exists()


def test_a_refused_run_keeps_a_folder_that_existed(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    out.mkdir()
    (out / "other.txt").write_text("another writer's file")
    with pytest.raises(ConfigError):
        train_claimed(ResultsStore(out), "0123456789abcdef-tf", _refuse)
    assert (out / "other.txt").read_text() == "another writer's file"


def test_remove_if_empty_keeps_a_tree_with_a_file(tmp_path: Path) -> None:
    root = tmp_path / "x" / "y"
    folders = missing_folders(root)
    assert folders == [root, tmp_path / "x"]
    (root / "claims").mkdir(parents=True)
    (root / "claims" / "kept.json").write_text("{}")
    remove_if_empty(folders)
    assert (root / "claims" / "kept.json").exists()
    (root / "claims" / "kept.json").unlink()
    remove_if_empty(folders)
    assert not (tmp_path / "x").exists()
