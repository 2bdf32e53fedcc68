"""benchmarks/defaults_sweep.py: the validation split never holds a test example, and the
``--quick`` run writes its table with the command in its header."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.defaults_sweep import main, ranked_points, validation_split
from dpcore.data.dataset import Dataset

pytest.importorskip("torch")


def test_validation_split_is_carved_from_the_training_split() -> None:
    rng = np.random.default_rng(0)
    x_train = np.arange(100, dtype=np.uint8).reshape(100, 1, 1, 1).repeat(4, 1).repeat(4, 2)
    dataset = Dataset(name="toy", task="image", x_train=x_train,
                      y_train=np.arange(100) % 2, x_test=np.full((10, 4, 4, 1), 255, np.uint8),
                      y_test=rng.integers(0, 2, 10), class_names=("a", "b"))
    carved = validation_split(dataset)
    assert len(carved.x_train) == 80 and len(carved.x_test) == 20
    fit, val = set(carved.x_train[:, 0, 0, 0]), set(carved.x_test[:, 0, 0, 0])
    assert not fit & val and fit | val == set(range(100))  # no test image (255) anywhere
    assert np.bincount(carved.y_test).tolist() == [10, 10]  # stratified


def test_ranking_needs_every_data_set_and_counts_divergence_as_zero() -> None:
    point = {"activation": "tanh", "lr": 0.1, "batch_size": 64, "momentum": 0.9, "epochs": 5.0}
    other = {**point, "lr": 1.0}
    rows = [{**point, "dataset": "a", "val_accuracy": 0.8},
            {**point, "dataset": "b", "val_accuracy": None},
            {**other, "dataset": "a", "val_accuracy": 0.6},
            {**other, "dataset": "b", "val_accuracy": 0.5},
            {**point, "lr": 9.0, "dataset": "a", "val_accuracy": 1.0}]
    ranked = ranked_points(rows)
    assert [round(acc, 3) for acc, _ in ranked] == [0.55, 0.4]
    assert ranked[0][1] == ("tanh", 1.0, 64, 0.9, 5.0)


@pytest.mark.slow
def test_quick_run_writes_the_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sweep.md"
    assert main(["--quick", "--datasets", "digits", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 2 and {r["status"] for r in rows} == {"finished"}
    assert all(r["epsilon_rdp"] == pytest.approx(8.0, rel=0.01) for r in rows)
    assert all(r["n_validation"] == 60 for r in rows)  # 20 % of 300 training digits
    text = out.read_text(encoding="utf-8")
    assert "python -m benchmarks.defaults_sweep --quick --datasets digits" in text
    assert "## digits" in text and "No test set is used" in text
