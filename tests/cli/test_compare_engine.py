"""`dpcompare compare --engine`: a performance-only override of the grid's perf.engine; the runs
and their config hashes are those of the grid, and a re-run with the other engine skips them."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from dpcore.results import ResultsStore
from tests.end_to_end.helpers import TINY_GRID, run_cli, write_grid

pytest.importorskip("tensorflow")


def test_engine_option_reaches_the_tf_runs_and_keeps_the_hashes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    grid = copy.deepcopy(TINY_GRID)
    grid["backends"] = ["tf"]
    grid["axes"]["privacy"] = grid["axes"]["privacy"][:1]
    path = write_grid(tmp_path / "grid.yaml", grid)
    out = tmp_path / "runs"
    code, _, err = run_cli(capsys, "compare", "--config", path, "--out", out, "--no-report",
                           "--quiet", "--engine", "fast")
    assert code == 0, err
    (result,) = ResultsStore(out).list_runs()
    assert result.perf["engine"] == "fast" and result.perf["engine_used"] == "fast"
    code, stdout, err = run_cli(capsys, "compare", "--config", path, "--out", out,
                                "--no-report", "--engine", "reference")
    assert code == 0, err
    assert "0 run(s) done, 1 already finished" in stdout
    assert [r.run_id for r in ResultsStore(out).list_runs()] == [result.run_id]
