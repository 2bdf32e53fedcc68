"""The command in a report's header names no folder of the machine that ran it."""

from __future__ import annotations

from pathlib import Path

import pytest

from compare.report import command_line


def test_the_header_command_is_portable_and_still_runs_from_where_it_was_typed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project, data, store = tmp_path / "project", tmp_path / "data", tmp_path / "runs" / "r18"
    for folder in (project, data, store):
        folder.mkdir(parents=True)
    monkeypatch.chdir(project)
    monkeypatch.setenv("DPCOMPARE_DATA_DIR", str(data))
    line = command_line(["compare", "--preset", "demo", "--out", str(store),
                         "--data-dir", str(data), f"--report={project}/reports/demo",
                         "--set", "train.note=two words"])
    assert line == ("dpcompare compare --preset demo --out ../runs/r18 "
                    "--data-dir $DPCOMPARE_DATA_DIR --report=reports/demo "
                    "--set 'train.note=two words'")
    assert str(tmp_path) not in line


def test_a_relative_command_is_kept_as_typed(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DPCOMPARE_DATA_DIR", raising=False)
    assert (command_line(["report", "--records", "reports/demo"])
            == "dpcompare report --records reports/demo")
