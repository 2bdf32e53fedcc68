"""The IMDB presets train on the full 25,000-review split, at the paper's sampling rate."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from compare import api
from compare.grid import _expanded_preset
from dpcore.datasets import get_info

PRESETS = ("imdb-library-benchmark", "imdb-library-benchmark-15")


@pytest.mark.parametrize("preset", PRESETS)
def test_imdb_presets_sample_at_the_papers_rate(preset: str) -> None:
    grid = _expanded_preset(preset)
    info = get_info("imdb-full")
    n_train = info.documented_sizes[0]
    assert n_train == 25000
    for cell in grid.cells:
        assert cell.config.data.name == "imdb-full"
        assert cell.config.train.batch_size / n_train == pytest.approx(0.00256)


def test_the_dp_runs_of_the_15_epoch_preset_spend_the_papers_opacus_epsilon() -> None:
    grid = _expanded_preset("imdb-library-benchmark-15")
    private = [c.config for c in grid.cells if c.config.privacy.mechanism != "none"]
    assert private
    config = private[0]
    got = api.epsilon(n=25000, batch_size=config.train.batch_size,
                      noise_multiplier=config.privacy.noise_multiplier,
                      epochs=config.train.epochs, delta=config.privacy.delta, library=False)
    # Kotevska et al., Table II: Opacus 6.83 at 15 epochs (the RDP epsilon of the setting)
    assert got["epsilon"]["rdp"] == pytest.approx(6.83, abs=0.02)
    assert got["sampling_rate"] == pytest.approx(0.00256)


def _write_jsonl(path: Path, n: int) -> None:
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        for i in range(n):
            text = "a fine film" if i % 2 else "a dull film"
            handle.write(json.dumps({"text": f"{text} {i}", "label": i % 2}) + "\n")


def test_imdb_full_reads_its_own_folder_not_the_subset(tmp_path: Path) -> None:
    (tmp_path / "imdb").mkdir()
    _write_jsonl(tmp_path / "imdb" / "imdb_train_6k.jsonl.gz", 6)
    _write_jsonl(tmp_path / "imdb" / "imdb_test_2k.jsonl.gz", 4)
    (tmp_path / "imdb-full").mkdir()
    _write_jsonl(tmp_path / "imdb-full" / "imdb_train_25k.jsonl.gz", 10)
    _write_jsonl(tmp_path / "imdb-full" / "imdb_test_25k.jsonl.gz", 8)
    full = api.load_data({"data": {"name": "imdb-full"}, "model": {"name": "textcnn"}},
                         data_dir=tmp_path)
    subset = api.load_data({"data": {"name": "imdb"}, "model": {"name": "textcnn"}},
                           data_dir=tmp_path)
    assert (len(full.y_train), len(full.y_test)) == (10, 8)
    assert (len(subset.y_train), len(subset.y_test)) == (6, 4)
