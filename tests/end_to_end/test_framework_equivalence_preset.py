"""The framework-equivalence preset, shrunk (digits 16x16, one epoch, two seeds), run through
``compare`` and reported: its section pairs each seed's runs, which share their noise, batches
and initial weights, so their weights agree to float rounding; the section is rebuilt from the
records alone (the final weights are kept in ``records/weights``)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from compare import api
from compare.grid import load_preset
from compare.records import RECORDS_FOLDER, report_differences
from compare.report import rebuild_report


@pytest.mark.slow
def test_shrunk_framework_equivalence_preset(tmp_path: Path) -> None:
    grid = load_preset("framework-equivalence")
    grid["seeds"] = 2
    grid["evaluation"] = {"faithfulness": False, "montage_images": 4}
    api.compare(grid, out=tmp_path / "runs", report=tmp_path / "report", progress=False,
                overrides=["data.name=digits", "data.image_size=16", "train.epochs=1",
                           "train.batch_size=128"])
    report = tmp_path / "report"
    text = (report / "report.md").read_text()
    section = text[text.index("## Framework equivalence"):]
    section = section[:section.index("\n## ", 1)]
    rows = pd.read_csv(report / "framework_equivalence.csv")
    assert list(rows["seed"]) == [0, 1]
    # same noise, batches and initial weights: the frameworks alone differ (float rounding)
    assert (rows["weight_method"] == "exact").all()
    assert (rows["weight_difference"] < 1e-4).all() and (rows["weight_difference"] > 0).all()
    assert (rows["difference"].abs() <= 0.01).all()
    assert rows["gradcam_pearson"].notna().sum() == 1  # the montage shows the first seed
    assert rows["gradcam_pearson"].dropna().iloc[0] > 0.99
    assert "(preliminary: 2 < 5 seeds)" in section
    assert "95% percentile bootstrap interval" in section
    assert "10,650 parameters per model" in section  # cnn4 on 16x16 digits
    kept = sorted((report / RECORDS_FOLDER / "weights").glob("*.npz"))
    assert len(kept) == 4
    # the paired table says the pairs share their noise (no "own generator" note)
    assert "draws it from its own generator" not in text
    # rebuilt from records alone: the same section, the same weight differences
    rebuilt = tmp_path / "rebuilt"
    rebuild_report(report, rebuilt)
    assert report_differences(report, rebuilt) == []
