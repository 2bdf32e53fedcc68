"""The grid runner: both backends, stored results, resume without recomputation, failures
recorded while the grid goes on, and the report written from the store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compare.grid import expand_grid
from compare.montage_data import load_montage_data
from compare.report import ReportContext, write_report
from compare.runner import run_grid
from dpcore.results import ResultsStore

TINY = {
    "name": "tiny",
    "base": {
        "data": {"name": "digits", "image_size": 16},
        "model": {"name": "cnn4"},
        "train": {"steps": 4, "batch_size": 64, "lr": 0.5},
    },
    "axes": {
        "privacy": [
            {"label": "eps=2", "privacy": {"mechanism": "dpsgd-gaussian", "target_epsilon": 2.0}},
            {"label": "non-private", "privacy": {"mechanism": "none"}},
        ]
    },
    "backends": ["tf", "torch"],
    "evaluation": {"faithfulness": False, "montage_images": 0},
}


@pytest.fixture(scope="module")
def finished_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("grid")
    outcome = run_grid(expand_grid(TINY), out, progress=False, log=lambda _m: None)
    assert len(outcome.ran) == 4 and not outcome.failed
    return out


def test_every_run_is_stored_with_identical_configs(finished_store: Path) -> None:
    runs = ResultsStore(finished_store).list_runs()
    assert len(runs) == 4
    by_hash: dict[str, list] = {}
    for r in runs:
        by_hash.setdefault(r.config_hash, []).append(r)
        assert r.status == "finished" and r.grid == "tiny"
        assert (finished_store / r.checkpoint).is_file()
    assert len(by_hash) == 2
    for pair in by_hash.values():
        tf_run, torch_run = sorted(pair, key=lambda r: r.backend)
        assert tf_run.config == torch_run.config
        assert tf_run.dataset["fingerprint"] == torch_run.dataset["fingerprint"]
        assert tf_run.privacy["noise_multiplier"] == torch_run.privacy["noise_multiplier"]
        assert tf_run.labels == torch_run.labels


def test_rerun_skips_finished_runs(finished_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import compare.cellrun as cellrun

    def must_not_train(*_a: object, **_k: object) -> None:
        raise AssertionError("a finished run was recomputed")

    monkeypatch.setattr(cellrun, "run_one", must_not_train)  # what every executor calls
    outcome = run_grid(expand_grid(TINY), finished_store, progress=False, log=lambda _m: None)
    assert len(outcome.skipped) == 4 and not outcome.ran


def test_a_failing_cell_is_recorded_and_the_grid_goes_on(tmp_path: Path) -> None:
    grid = {**TINY, "backends": ["torch"],
            "axes": {"data": [{"label": "missing", "data": {"name": "chest_xray"}},
                              {"label": "digits", "data": {"name": "digits"}}]}}
    outcome = run_grid(expand_grid(grid), tmp_path, data_dir=tmp_path, progress=False,
                       log=lambda _m: None)
    assert len(outcome.failed) == 1 and len(outcome.ran) == 2
    statuses = {r.labels["data"]: r for r in ResultsStore(tmp_path).list_runs()}
    assert statuses["missing"].status == "failed"
    assert "chest_xray" in statuses["missing"].error
    assert statuses["digits"].status == "finished"
    # a failed run is not final: the next invocation retries it
    assert not ResultsStore(tmp_path).is_finished(statuses["missing"].config_hash, "torch")


def test_report_from_the_store(finished_store: Path, tmp_path: Path) -> None:
    report = write_report(finished_store, tmp_path / "rep",
                          ReportContext(command="dpcompare compare --config tiny.yaml"))
    text = report.read_text()
    assert "dpcompare compare --config tiny.yaml" in text
    assert "## Epsilon side by side" in text and "opacus" in text
    assert "### Per-class gaps" in text and "Fairness" not in text
    for name in ("runs.csv", "summary.csv", "epsilon.csv", "accuracy_by_setting.png",
                 "epoch_time.png"):
        assert (tmp_path / "rep" / name).is_file(), name
    import pandas as pd

    runs = pd.read_csv(tmp_path / "rep" / "runs.csv")
    assert len(runs) == 4 and set(runs["backend"]) == {"tf", "torch"}
    # reading order: DP-SGD before non-private, the two backends side by side
    assert list(runs["mechanism"]) == ["dpsgd-gaussian"] * 2 + ["none"] * 2
    assert list(runs["backend"]) == ["tf", "torch", "tf", "torch"]
    stored = {r.run_id: r for r in ResultsStore(finished_store).list_runs()}
    for _, row in runs.iterrows():  # every number comes from a RunResult
        assert row["accuracy"] == pytest.approx(stored[row["run_id"]].metrics["accuracy"])
    assert json.loads((finished_store / "runs" / runs["run_id"][0] / "result.json").read_text())


def test_faithfulness_and_montage_on_both_backends(tmp_path: Path) -> None:
    grid = {**TINY, "evaluation": {"faithfulness": True, "faithfulness_subset": 16,
                                   "montage_images": 2}}
    run_grid(expand_grid(grid), tmp_path, progress=False, log=lambda _m: None)
    runs = ResultsStore(tmp_path).list_runs()
    assert len(runs) == 4
    for r in runs:
        assert r.faithfulness is not None and r.faithfulness["n"] == 16
        assert 0.0 <= r.faithfulness["average_drop"] <= 100.0
        assert 0.0 <= r.faithfulness["deletion_auc"] <= 1.0
    # the runner keeps the montage's arrays in the grid's own folder; only a report draws it
    folder = tmp_path / "montages" / "tiny"
    assert sorted(p.name for p in folder.iterdir()) == ["digits-cnn4.npz"]
    stored = load_montage_data(folder / "digits-cnn4.npz")
    assert stored.images.shape == (2, 16, 16, 1) and len(stored.columns) == 4
    assert {c["run_id"] for c in stored.columns} == {r.run_id for r in runs}
    for column in stored.columns:
        assert column["maps"].shape == (2, 16, 16) and column["confidence"].shape == (2,)
    report = write_report(tmp_path, tmp_path / "rep", ReportContext(command="x"))
    text = report.read_text()
    assert "## Grad-CAM faithfulness" in text and "montages/digits-cnn4.png" in text
    drawn = tmp_path / "rep" / "montages" / "digits-cnn4.png"
    assert drawn.is_file() and drawn.stat().st_size > 10_000


def test_a_report_shows_only_its_own_grids_montages(tmp_path: Path) -> None:
    """Two grids share a store (as mnist-library-benchmark and mnist-gap-attribution share
    runs/mnist): each report shows its own grid's montage, and a grid that draws none shows
    none, not the other grid's montage of the same data set and model."""
    from compare.api import compare

    drawn = {**TINY, "name": "drawn", "evaluation": {"faithfulness": False,
                                                     "montage_images": 2}}
    other = {**TINY, "name": "other",
             "axes": {"privacy": [{"label": "eps=4", "privacy": {
                 "mechanism": "dpsgd-gaussian", "target_epsilon": 4.0}}]},
             "evaluation": {"faithfulness": False, "montage_images": 0}}
    compare(drawn, out=tmp_path / "store", report=tmp_path / "rep-drawn", progress=False)
    compare(other, out=tmp_path / "store", report=tmp_path / "rep-other", progress=False)
    assert (tmp_path / "store" / "montages" / "drawn" / "digits-cnn4.npz").is_file()
    assert (tmp_path / "rep-drawn" / "montages" / "digits-cnn4.png").is_file()
    assert "montages/digits-cnn4.png" in (tmp_path / "rep-drawn" / "report.md").read_text()
    assert "Saliency montages" not in (tmp_path / "rep-other" / "report.md").read_text()
    assert not (tmp_path / "rep-other" / "montages").exists()
    # without a grid, the report of the whole store names each montage after its grid
    write_report(tmp_path / "store", tmp_path / "rep-all", ReportContext(command="x"))
    assert (tmp_path / "rep-all" / "montages" / "drawn-digits-cnn4.png").is_file()


def test_local_dp_cell_both_backends_train_on_the_same_privatised_arrays(tmp_path: Path) -> None:
    grid = {**TINY,
            "axes": {"privacy": [{"label": "ldp b=2", "privacy": {"mechanism": "ldp"},
                                  "data": {"ldp_mechanism": "laplace",
                                           "ldp_params": {"scale": 2.0}}}]}}
    grid["evaluation"] = {"faithfulness": True, "faithfulness_subset": 16, "montage_images": 0}
    run_grid(expand_grid(grid), tmp_path, progress=False, log=lambda _m: None)
    tf_run, torch_run = sorted(ResultsStore(tmp_path).list_runs(), key=lambda r: r.backend)
    assert tf_run.status == torch_run.status == "finished"
    # unclipped noise leaves [0, 1]: faithfulness (defined on [0, 1] images) is skipped, with
    # the reason recorded, and the run is kept
    for run in (tf_run, torch_run):
        assert run.faithfulness is None
        assert "outside [0, 1]" in run.metrics["faithfulness_note"]
    assert tf_run.dataset["fingerprint"] == torch_run.dataset["fingerprint"]
    ldp = tf_run.privacy["ldp"]
    # Laplace scale b on values in [0, 1]: per value eps = 1/b; per 16x16x1 image eps = 256/b.
    assert ldp["epsilon_per_value"] == pytest.approx(0.5)
    assert ldp["epsilon_per_image"] == pytest.approx(128.0)
    assert ldp["psnr"] < 20 and ldp["ssim"] < 0.5
    assert ldp["privatised_fingerprint"] == torch_run.privacy["ldp"]["privatised_fingerprint"]
    report = write_report(tmp_path, tmp_path / "rep", ReportContext(command="x")).read_text()
    assert "## Local DP" in report and "protects a patient's image" in report


def test_local_dp_with_clipped_noise_gets_faithfulness_metrics(tmp_path: Path) -> None:
    grid = {**TINY, "backends": ["torch"],
            "evaluation": {"faithfulness": True, "faithfulness_subset": 16, "montage_images": 0},
            "axes": {"privacy": [{"label": "ldp b=2 clipped", "privacy": {"mechanism": "ldp"},
                                  "data": {"ldp_mechanism": "laplace",
                                           "ldp_params": {"scale": 2.0, "clip": True}}}]}}
    run_grid(expand_grid(grid), tmp_path, progress=False, log=lambda _m: None)
    (run,) = ResultsStore(tmp_path).list_runs()
    assert run.status == "finished" and run.faithfulness is not None
    assert run.faithfulness["n"] == 16 and "faithfulness_note" not in run.metrics


def test_report_can_be_limited_to_a_grids_runs(finished_store: Path, tmp_path: Path) -> None:
    runs = ResultsStore(finished_store).list_runs()
    keep = frozenset(r.run_id for r in runs if r.backend == "tf")
    write_report(finished_store, tmp_path / "rep", ReportContext(command="x", run_ids=keep))
    import pandas as pd

    assert set(pd.read_csv(tmp_path / "rep" / "runs.csv")["run_id"]) == keep


def test_a_grid_logging_to_a_file_gets_one_line_per_epoch(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Under nohup or in CI (stderr is no terminal) the per-epoch bar is hidden, so a long run
    would be silent for its whole length: each epoch is logged as one line instead."""
    import sys

    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    grid = {**TINY, "backends": ["torch"],
            "base": {**TINY["base"], "train": {"epochs": 2, "batch_size": 64, "lr": 0.5}},
            "axes": {"privacy": [{"label": "non-private", "privacy": {"mechanism": "none"}}]}}
    lines: list[str] = []
    run_grid(expand_grid(grid), tmp_path, progress=True, log=lines.append)
    epochs = [line.strip() for line in lines if line.strip().startswith("epoch ")]
    assert [e.split(":")[0] for e in epochs] == ["epoch 1/2", "epoch 2/2"]
    assert all("test accuracy" in e and "epsilon inf" in e for e in epochs), epochs  # no DP
    lines.clear()  # on a terminal the per-epoch bar shows it: no lines
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    run_grid(expand_grid({**grid, "seeds": 2}), tmp_path, progress=True, log=lines.append)
    assert not [line for line in lines if line.strip().startswith("epoch ")]
