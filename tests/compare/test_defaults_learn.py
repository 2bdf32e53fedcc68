"""Defaults that learn (:mod:`dpcore.defaults`): ``dpcompare train`` with no hyper-parameter,
Gaussian DP-SGD at epsilon 8, beats the majority-class rate by at least 10 points on every small
image data set that ships with a package and on a generated MedMNIST-format file.

Only data settings are given: a seeded 1,000-example subset of mnist5k, so that the three
runs take about a minute together (sklearn's 8x8 digits get no option: the defaults upscale
them to 16x16, as cnn4 needs inputs of at least 13x13); model, optimizer, learning rate,
batch size and epochs are the defaults of :mod:`dpcore.defaults`. Seeded (batches, weights,
noise), so deterministic.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from compare import api
from compare.cli.main import main
from dpcore.datasets import DATASETS

pytest.importorskip("torch")

#: Data settings (never hyper-parameters) per built-in data set; see the module docstring.
DATA_OPTIONS = {
    "digits": [],
    "mnist5k": ["--set", "data.train_limit=1000", "--set", "data.test_limit=500"],
}
MARGIN = 0.10


def builtin_image_sets() -> list[str]:
    """Registered image data sets that ship with an installed package (no file to fetch)."""
    return sorted(name for name, info in DATASETS.items()
                  if info.task == "image" and info.how_to_get.startswith("built in"))


def test_every_builtin_image_set_is_covered() -> None:
    assert builtin_image_sets() == sorted(DATA_OPTIONS)


def write_learnable_medmnist(path: Path, seed: int = 0) -> None:
    """A 2-class, 28x28 gray MedMNIST-format npz (65 % class 0): class 1 holds a bright 8x8
    square at a jittered spot in the centre, on the same noisy background as class 0."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for split, count in (("train", 800), ("val", 40), ("test", 200)):
        labels = (rng.random(count) < 0.35).astype(np.uint8)
        images = rng.normal(70, 30, (count, 28, 28))
        for i in np.flatnonzero(labels):
            r, c = rng.integers(8, 13, size=2)
            images[i, r:r + 8, c:c + 8] += 110
        arrays[f"{split}_images"] = np.clip(images, 0, 255).astype(np.uint8)
        arrays[f"{split}_labels"] = labels[:, None]
    np.savez_compressed(path, **arrays)


def train_with_defaults(dataset: str, extra: list[str], out: Path,
                        capsys: pytest.CaptureFixture[str]) -> tuple[float, float]:
    """(test accuracy, majority-class rate of the test split) of a default run at epsilon 8."""
    code = main(["train", "--backend", "torch", "--dataset", dataset, *extra, "--epsilon", "8",
                 "--faithfulness-subset", "0", "--quiet", "--json", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    result = json.loads(captured.out)
    assert result["status"] == "finished"
    assert result["privacy"]["epsilon_rdp"] == pytest.approx(8.0, rel=0.01)
    assert "train.lr" not in " ".join(extra)  # data settings only
    y_test = api.load_data(result["config"]).y_test
    majority = float(np.bincount(y_test).max() / len(y_test))
    return float(result["metrics"]["accuracy"]), majority


@pytest.mark.slow
@pytest.mark.parametrize("dataset", sorted(DATA_OPTIONS))
def test_defaults_beat_the_majority_class_on_builtin_sets(
        dataset: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    accuracy, majority = train_with_defaults(dataset, DATA_OPTIONS[dataset], tmp_path, capsys)
    assert accuracy >= majority + MARGIN, (dataset, accuracy, majority)


@pytest.mark.slow
def test_defaults_beat_the_majority_class_on_a_generated_medmnist_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "blobs.npz"
    write_learnable_medmnist(path)
    accuracy, majority = train_with_defaults(f"medmnist:{path}", [], tmp_path / "out", capsys)
    assert 0.6 <= majority <= 0.7
    assert accuracy >= majority + MARGIN, (accuracy, majority)
