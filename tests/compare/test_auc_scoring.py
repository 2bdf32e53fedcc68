"""benchmarks/auc_scoring: stored runs re-scored from their checkpoints, or from the test
logits their records keep (no checkpoint needed); the AUC it recomputes by the record's method
is the record's, and the write-up names the comparable runs and the others."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")

from benchmarks import auc_scoring  # noqa: E402
from compare import api  # noqa: E402
from dpcore.results import ResultsStore  # noqa: E402

GRID = {"name": "auc-scoring", "base": {"data": {"name": "digits"}, "model": {"name": "cnn4"},
                                        "train": {"epochs": 2, "lr": 0.5}},
        "axes": {"privacy": [{"label": "np", "privacy": {"mechanism": "none"}}]},
        "backends": ["torch"], "evaluation": {"faithfulness": False}}


def test_a_store_is_rescored_and_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                         ) -> None:
    out = tmp_path / "store"
    api.compare(GRID, out=out, progress=False, report=False)
    (run,) = ResultsStore(out).list_runs()
    assert run.test_outputs is None  # 360 test digits x 10 classes: above what records keep
    frame = auc_scoring.score_store(out)
    assert list(frame["run_id"]) == [run.run_id] and bool(frame["comparable"].iloc[0])
    row = frame.iloc[0]
    assert row["source"] == auc_scoring.FROM_CHECKPOINT and row["scored_by"] == "logits"
    assert row["auc_logits"] == pytest.approx(run.metrics["auc"], abs=1e-12)
    assert 0.5 < row["auc_softmax"] <= 1.0 and 0.0 <= row["saturated"] <= 1.0
    assert row["difference"] == pytest.approx(row["auc_logits"] - run.metrics["auc"])
    target = tmp_path / "scores.md"
    assert auc_scoring.main(["--store", str(out), "--out", str(target)]) == 0
    text = target.read_text(encoding="utf-8")
    assert f"Command: `python -m benchmarks.auc_scoring --store {out}`" in text
    assert run.run_id in text and "1 run(s) compared" in text
    with pytest.raises(SystemExit, match="not a finished run with a checkpoint.*nope-torch"):
        auc_scoring.main(["--store", str(out), "--runs", "nope-torch"])


def test_runs_whose_records_keep_their_logits_need_no_checkpoint(tmp_path: Path) -> None:
    small = {**GRID, "base": {**GRID["base"], "data": {"name": "digits", "test_limit": 100}}}
    api.compare(small, out=tmp_path / "store", progress=False, report=False)
    (run,) = ResultsStore(tmp_path / "store").list_runs()
    assert run.test_outputs is not None
    (tmp_path / "store" / str(run.checkpoint)).unlink()  # the checkpoint is gone
    frame = auc_scoring.score_store(tmp_path / "store", data_dir=str(tmp_path / "no-data"))
    row = frame.iloc[0]
    assert row["source"] == auc_scoring.FROM_RECORD and bool(row["comparable"])
    assert row["auc_logits"] == run.metrics["auc"]
    text = auc_scoring.render(frame, "cmd")
    assert ("1 run(s) re-scored from the test logits their records keep (`source`: record's "
            "logits): no checkpoint or data needed.") in text


def test_the_write_up_tables_comparable_runs_and_names_the_others() -> None:
    """The render: the comparable runs with their mean and largest gain, the others named
    apart (their recomputed softmax AUC is not the record's)."""
    import pandas as pd

    frame = pd.DataFrame([
        {"run_id": "a-tf", "label": "x", "source": "checkpoint", "accuracy": 0.7,
         "saturated": 0.9, "scored_by": "softmax_float32", "auc_recorded": 0.71,
         "auc_softmax": 0.71, "auc_logits": 0.76, "difference": 0.05, "comparable": True},
        {"run_id": "b-tf", "label": "y", "source": "checkpoint", "accuracy": 0.7,
         "saturated": 0.0, "scored_by": "softmax_float32", "auc_recorded": 0.80,
         "auc_softmax": 0.75, "auc_logits": 0.75, "difference": -0.05, "comparable": False}])
    text = auc_scoring.render(frame, "cmd")
    assert "1 run(s) compared" in text and "largest +0.0500" in text
    assert "1 run(s) not comparable" in text and "`b-tf`" in text
    assert "re-scored from the test logits" not in text  # none came from a record
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert any("a-tf" in r for r in rows) and not any("b-tf" in r for r in rows)
