"""Records that can be re-scored: a freshly trained run of each backend keeps its test logits
in its record, they are the model's, its metrics recomputed from them equal the recorded ones,
and a report rebuilt from its records recomputes them (and says when a record disagrees)."""

from __future__ import annotations

import gzip
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("torch")
pytest.importorskip("tensorflow")

from compare import api  # noqa: E402
from compare.records import (  # noqa: E402
    RECORDS_FILE,
    RECORDS_FOLDER,
    read_records,
    report_differences,
)
from compare.report import rebuild_report  # noqa: E402
from dpcore.backend import load_backend  # noqa: E402
from dpcore.config import RunConfig  # noqa: E402
from dpcore.data import load_dataset  # noqa: E402
from dpcore.results import ResultsStore, RunResult  # noqa: E402
from dpcore.scoring import (  # noqa: E402
    LOGITS,
    outputs_of,
    recomputation_differences,
    recompute_metrics,
)

#: 100 test digits x 10 classes = 1,000 logits: small enough for a record to keep them.
GRID: dict[str, Any] = {
    "name": "rescoring", "base": {"data": {"name": "digits", "test_limit": 100},
                                  "model": {"name": "cnn4"},
                                  "train": {"epochs": 1, "lr": 0.5, "batch_size": 64}},
    "axes": {"privacy": [{"label": "np", "privacy": {"mechanism": "none"}}]},
    "backends": ["tf", "torch"], "evaluation": {"faithfulness": False}}


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A store with one finished tiny run per backend, and its report folder."""
    root = tmp_path_factory.mktemp("rescoring")
    api.compare(GRID, out=root / "store", report=root / "reports" / "rescoring",
                progress=False)
    return root / "store", root / "reports" / "rescoring"


def test_a_fresh_run_keeps_the_logits_its_metrics_were_scored_from(
        trained: tuple[Path, Path]) -> None:
    store, _ = trained
    runs = ResultsStore(store).list_runs()
    assert sorted(r.backend for r in runs) == ["tf", "torch"]
    for run in runs:
        assert run.status == "finished" and run.metrics["scoring"]["auc"] == LOGITS
        outputs = outputs_of(run)
        assert outputs is not None and outputs.logits.shape == (100, 10)
        # they are the model's logits on the test set, as its checkpoint gives them
        code = load_backend(run.backend)
        model = code.load_checkpoint(store / str(run.checkpoint))
        dataset = load_dataset(RunConfig.from_dict(run.config).data)
        np.testing.assert_array_equal(outputs.labels, dataset.y_test)
        np.testing.assert_allclose(code.predict_logits(model, dataset.x_test),
                                   outputs.logits, rtol=0, atol=1e-5)
        # and every figure recomputed from them is the recorded one (the loss to 1e-6)
        recomputed = recompute_metrics(outputs, run.dataset["class_names"])
        assert recomputation_differences(run.metrics, recomputed) == []
        assert recomputed["auc"] == run.metrics["auc"]
        assert recomputed["accuracy"] == run.metrics["accuracy"]
        assert [c["auc"] for c in recomputed["per_class"]] == \
            [c["auc"] for c in run.metrics["per_class"]]


def test_the_report_records_keep_them_and_a_rebuild_recomputes_them(
        trained: tuple[Path, Path], tmp_path: Path) -> None:
    _, report = trained
    records = read_records(report)
    assert all(r.test_outputs is not None for r in records.results)
    text = (report / "report.md").read_text("utf-8")
    assert "AUC scored from the logits for all 2 runs" in text
    rebuild_report(report, tmp_path / "rebuilt")  # recomputes every run's metrics
    assert report_differences(report, tmp_path / "rebuilt") == []


def _edited_copy(report: Path, copy: Path, edit: Callable[[dict[str, Any]], None]
                 ) -> tuple[Path, RunResult]:
    """A copy of the report folder ``report`` in which ``edit`` changed the raw record of its
    first run, and that run as it was."""
    shutil.copytree(report, copy)
    first = read_records(copy).results[0]
    path = copy / RECORDS_FOLDER / RECORDS_FILE
    lines = [json.loads(line) for line in gzip.decompress(path.read_bytes()).splitlines()]
    for raw in lines:
        if raw["run_id"] == first.run_id:
            edit(raw)
    path.write_bytes(gzip.compress(("\n".join(json.dumps(raw) for raw in lines) + "\n")
                                   .encode("utf-8")))
    return copy, first


def test_a_record_whose_metrics_disagree_with_its_logits_is_named_and_rescored(
        trained: tuple[Path, Path], tmp_path: Path) -> None:
    def wrong_auc(raw: dict[str, Any]) -> None:
        raw["metrics"]["auc"] = 0.25

    copy, first = _edited_copy(trained[1], tmp_path / "copy", wrong_auc)
    with pytest.warns(UserWarning, match=rf"run {first.run_id}: its metrics differ from "
                                         r"those its test outputs give .*auc: recorded 0.25"):
        rebuild_report(copy, tmp_path / "out")
    runs = pd.read_csv(tmp_path / "out" / "runs.csv").set_index("run_id")
    assert runs.loc[first.run_id, "auc"] == pytest.approx(first.metrics["auc"], abs=0)
    assert set(runs["auc_scoring"]) == {LOGITS}
    kept = {r.run_id: r for r in read_records(tmp_path / "out").results}
    assert kept[first.run_id].metrics["auc"] == 0.25  # the records are written as read


def test_a_record_without_outputs_is_reported_as_scored_from_the_softmax(
        trained: tuple[Path, Path], tmp_path: Path) -> None:
    def unscored(raw: dict[str, Any]) -> None:  # as a record that names no scoring
        raw.pop("test_outputs")
        raw["metrics"].pop("scoring")

    copy, _ = _edited_copy(trained[1], tmp_path / "copy", unscored)
    text = rebuild_report(copy, tmp_path / "out").read_text("utf-8")
    assert ("This report mixes two AUC scorings: 1 run from the logits, 1 run from the "
            "float32 softmax (") in text
