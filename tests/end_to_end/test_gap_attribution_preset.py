"""The gap-attribution preset, shrunk (digits, one epoch, one seed, four of its settings), run
through ``compare`` and reported: the section appears with every configuration, the chart and a
conclusion that judges nothing on one seed."""

from __future__ import annotations

from pathlib import Path

import pytest

from compare import api
from compare.grid import load_preset

KEEP = ("TF Privacy stock (library)", "Opacus stock (library)", "harmonised",
        "flip: shuffled fixed batches")


@pytest.mark.slow
def test_shrunk_gap_attribution_preset(tmp_path: Path) -> None:
    grid = load_preset("mnist-gap-attribution")
    grid["axes"] = {"run": [e for e in grid["axes"]["run"] if e["label"] in KEEP]}
    grid["seeds"] = 1
    grid["perf"] = {"physical_batch_size": 128, "engine": "fast"}
    api.compare(grid, out=tmp_path / "runs", report=tmp_path / "report", progress=False,
                overrides=["data.name=digits", "data.image_size=16", "train.epochs=1",
                           "train.batch_size=128"])
    text = (tmp_path / "report" / "report.md").read_text()
    section = text[text.index("## Gap attribution"):text.index("## Accuracy and AUC")]
    for label in KEEP:
        assert f"| {label} |" in section
    assert "![gap attribution](attribution.png)" in section
    assert (tmp_path / "report" / "attribution.png").stat().st_size > 0
    assert "The gap, stock TF Privacy − stock Opacus:" in section
    assert "1 seed: no interval" in section and " explains " not in section
    assert "claimed, not proved [1]" in section  # the shuffled settings
    assert "The published 96.72 %" in section
