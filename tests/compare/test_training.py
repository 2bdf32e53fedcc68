"""The one record path (compare.training.train_and_record): ``dpcompare train`` and the grid
runner store the same record for the same configuration, a DP model with BatchNorm is refused
before its first step on both paths, and Ctrl-C stores an ``interrupted`` record."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import compare.training as training
from compare.cli.main import main
from compare.grid import expand_grid
from compare.runner import run_grid
from dpcore.config import RunConfig
from dpcore.data import load_dataset
from dpcore.results import ResultsStore

pytest.importorskip("torch")

BASE: dict[str, Any] = {
    "data": {"name": "digits", "image_size": 16},
    "model": {"name": "cnn4", "activation": "relu"},
    "train": {"steps": 3, "batch_size": 64, "lr": 0.5, "momentum": 0.0},
    "privacy": {"mechanism": "dpsgd-gaussian", "noise_multiplier": 1.0},
}
TRAIN_ARGS = ["train", "--backend", "torch", "--dataset", "digits", "--model", "cnn4",
              "--set", "data.image_size=16", "--steps", "3", "--batch-size", "64",
              "--lr", "0.5", "--noise-multiplier", "1.0", "--faithfulness-subset", "8",
              # BASE's model and optimizer in full (a key neither gives would take the same
              # default of dpcore.defaults on both paths)
              "--set", "model.activation=relu", "--set", "train.momentum=0.0", "--quiet"]


def one_cell_grid(faithfulness_subset: int = 8) -> Any:
    return expand_grid({"name": "one", "base": BASE, "axes": {}, "seeds": 1,
                        "backends": ["torch"],
                        "evaluation": {"faithfulness_subset": faithfulness_subset,
                                       "montage_images": 0}})


@pytest.fixture(autouse=True)
def _isolated_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DPCOMPARE_CACHE_DIR", str(tmp_path / "cache"))


def test_train_cli_and_runner_store_the_same_record(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*TRAIN_ARGS, "--out", str(tmp_path / "cli")]) == 0
    capsys.readouterr()
    grid = one_cell_grid()
    run_grid(grid, tmp_path / "grid", progress=False, log=lambda _m: None)
    (from_cli,) = ResultsStore(tmp_path / "cli").list_runs()
    (from_grid,) = ResultsStore(tmp_path / "grid").list_runs()
    assert from_cli.config_hash == from_grid.config_hash == grid.cells[0].config.config_hash
    assert from_cli.status == from_grid.status == "finished"
    for record in (from_cli, from_grid):  # the same steps ran on both paths
        assert record.checkpoint == f"runs/{record.run_id}/checkpoint.npz"
        assert record.faithfulness is not None and record.faithfulness["n"] == 8
    assert from_cli.metrics == from_grid.metrics
    assert from_cli.privacy == from_grid.privacy
    assert from_cli.faithfulness == from_grid.faithfulness
    assert from_grid.labels == dict(grid.cells[0].labels) and from_grid.grid == "one"
    assert from_cli.labels == {} and from_cli.grid is None
    for record in (from_cli, from_grid):  # the faithfulness took time, recorded apart
        assert 0 < record.timing["evaluation_seconds"] < record.timing["total_seconds"] + 600


@pytest.fixture
def batchnorm_model_and_no_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """The torch backend builds a model holding BatchNorm; any training step fails the test."""
    import torch

    import dpcore.pipeline as pipeline
    import torchpipe.backend as torch_backend

    real_build = torch_backend.build_model

    def with_batchnorm(*args: Any, **kwargs: Any) -> Any:
        model = real_build(*args, **kwargs)
        model.add_module("sneaky_bn", torch.nn.BatchNorm2d(4))
        return model

    def no_step(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("a training step ran before the model was checked")

    monkeypatch.setattr(torch_backend, "build_model", with_batchnorm)
    monkeypatch.setattr(pipeline, "run_training", no_step)


@pytest.mark.usefixtures("batchnorm_model_and_no_steps")
def test_train_cli_refuses_batchnorm_before_the_first_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main([*TRAIN_ARGS, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "BatchNorm2d" in err and "epsilon would be false" in err and "Traceback" not in err
    assert not list((tmp_path / "out").glob("runs/*/*"))  # nothing written


@pytest.mark.usefixtures("batchnorm_model_and_no_steps")
def test_runner_refuses_batchnorm_before_the_first_step(tmp_path: Path) -> None:
    outcome = run_grid(one_cell_grid(), tmp_path, progress=False, log=lambda _m: None)
    assert len(outcome.failed) == 1
    (record,) = ResultsStore(tmp_path).list_runs()
    assert record.status == "failed" and "BatchNorm2d" in (record.error or "")
    assert record.checkpoint is None


def test_ctrl_c_in_train_and_record_stores_interrupted_and_reraises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Interrupting:
        def train(self, *_a: Any, **_k: Any) -> Any:
            raise KeyboardInterrupt

    monkeypatch.setattr(training, "load_backend", lambda _b: Interrupting())
    config = RunConfig.from_dict(BASE)
    dataset = load_dataset(config.data)
    store = ResultsStore(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        training.train_and_record(config, dataset, "torch", store, labels={"k": "v"},
                                  grid_name="g")
    record = store.load(config.config_hash, "torch")
    assert record is not None and record.status == "interrupted"
    assert record.labels == {"k": "v"} and record.grid == "g"
    assert record.dataset["fingerprint"] == dataset.fingerprint
    assert not store.is_finished(config.config_hash, "torch")


def test_grid_evaluation_options_map_onto_one_evaluation() -> None:
    assert training.Evaluation.of_grid({}) == training.Evaluation(500, False)
    assert training.Evaluation.of_grid({"faithfulness": False, "faithfulness_subset": 9,
                                        "audit": True}) == training.Evaluation(0, True)


def test_a_local_dp_run_has_one_ledger_and_no_ldp_text_in_extra(tmp_path: Path) -> None:
    """The plan carries the LDP mechanism's per-image DpEvent; the run's epsilon is the shared
    accountant's epsilon of it and agrees with the mechanism's own per-image epsilon."""
    from dpcore.pipeline import prepare_dataset, privacy_plan

    config = RunConfig.from_dict({
        **BASE, "privacy": {"mechanism": "ldp"},
        "data": {**BASE["data"], "ldp_mechanism": "laplace", "ldp_params": {"scale": 2.0}}})
    dataset = prepare_dataset(config)
    assert dataset.ldp is not None
    assert not any(k.startswith(("ldp_", "source_", "privatised_")) for k in dataset.extra)
    event = dataset.ldp.dp_event
    assert type(event).__name__ == "LaplaceDpEvent"
    plan = privacy_plan(config, len(dataset.x_train), dataset.ldp)
    assert plan.event == event
    # Laplace b=2 on a 16x16x1 image in [0, 1]: L1 sensitivity 256, pure epsilon 128.
    assert plan.epsilon_rdp == pytest.approx(128.0, rel=1e-3)

    result, _ = training.train_and_record(config, dataset, "torch", ResultsStore(tmp_path),
                                          evaluation=training.Evaluation(0), progress=False)
    privacy = result.privacy
    assert privacy["dp_event"]["class_name"] == "LaplaceDpEvent"
    assert privacy["ldp"]["dp_event"] == privacy["dp_event"]
    assert privacy["epsilon_rdp"] == pytest.approx(privacy["ldp"]["epsilon_per_image"],
                                                   rel=1e-3)
    assert privacy["ldp"]["epsilon_per_value"] == pytest.approx(0.5)
    assert "epsilon_pld is not computed" in privacy["accounting_note"]
    assert privacy["ldp"]["privatised_fingerprint"] == result.dataset["fingerprint"]
    assert not any(k.startswith("ldp_") for k in result.dataset["extra"])


def test_one_epoch_line_format_for_train_and_grids() -> None:
    """``dpcompare train`` and a grid logging to a file write the same line per epoch."""
    from compare.training import epoch_line_logger

    lines: list[str] = []
    record = {"epoch": 3, "step": 120, "loss": 0.123456, "test_accuracy": 0.98765,
              "epsilon_spent": 1.23456, "seconds": 4.56}
    epoch_line_logger(40, lines.append)(record)
    epoch_line_logger(None, lines.append, indent="    ")({**record, "epsilon_spent": None})
    assert lines == [
        "epoch 3/40: loss 0.1235, test accuracy 0.9877, epsilon 1.23, step 120, 4.6 s",
        "    epoch 3: loss 0.1235, test accuracy 0.9877, epsilon n/a, step 120, 4.6 s",
    ]
