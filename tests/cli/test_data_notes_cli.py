"""A user's folder whose files disagree (grey X-rays with a few RGB files) and one unreadable
file skipped on request: ``dpcompare train`` names both in its start line, and the report of
the run names them in its data line (from the record's ``dataset.extra``). The folder is
written by the test (PIL)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compare import api
from compare.cli.main import main
from tests.dpcore.data_writers import isolate, write_image

CHANNELS = "3 of 23 files are RGB, 20 grey: all converted to RGB; set data.channels: 1 to keep grey"
SKIPPED = "1 unreadable file(s) of 24 skipped (skip_unreadable): pneumonia/x7.png"


@pytest.fixture()
def scans(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """2 classes x 12 PNGs of 16x16, grey but for 3 RGB files; one file truncated."""
    isolate(monkeypatch, tmp_path)
    rng = np.random.default_rng(0)
    base = tmp_path / "xrays"
    for label, cls in enumerate(("normal", "pneumonia")):
        for i in range(12):
            grey = rng.integers(0, 100, (16, 16), dtype=np.uint8) + 120 * label
            write_image(base / cls / f"x{i}.png",
                        np.dstack([grey] * 3) if (label, i) in {(0, 2), (0, 9), (1, 4)}
                        else grey)
    victim = base / "pneumonia" / "x7.png"
    victim.write_bytes(victim.read_bytes()[:40])
    return base


def test_start_line_and_report_name_what_loading_changed(
        scans: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code = main(["train", "--backend", "torch", "--dataset", f"imagefolder:{scans}",
                 "--model", "cnn4", "--steps", "2", "--batch-size", "8",
                 "--noise-multiplier", "1.0", "--faithfulness-subset", "0",
                 "--set", "data.options.skip_unreadable=true", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err
    start = next(line for line in err.splitlines() if line.startswith("torch: cnn4 on "))
    assert start.endswith(f"; data: {CHANNELS}; data: {SKIPPED}"), start
    report = api.report(out, tmp_path / "report")
    data_line = next(line for line in Path(report).read_text().splitlines()
                     if line.startswith("- data: `imagefolder:"))
    assert f"; {CHANNELS}; {SKIPPED}" in data_line, data_line
