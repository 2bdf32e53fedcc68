"""One set of defaults (:mod:`dpcore.defaults`) for ``train``, grid files, presets and the
API; every run records which values came from the defaults."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from compare import api
from compare.grid import GridCell, expand_grid, load_preset, preset_names
from dpcore.defaults import describe_settings, fill_defaults
from dpcore.results import run_id
from tests.committed_hashes import hash_before_noise_key

FIXTURE = Path(__file__).parent / "fixtures" / "preset_run_ids_before_defaults.json"


def test_every_committed_preset_keeps_its_run_hashes() -> None:
    """The run ids of every preset as expanded before grids took the
    bench's defaults (the grid code of 66cf501, on main's presets at 416a312): the
    presets give every key they rely on, so nothing changed. (Audit companion runs,
    ``GridCell.audits``, came later: they are extra runs, not changed ones.) Hashed under the
    rule of that time (before noise keys: :mod:`tests.committed_hashes`)."""
    before = json.loads(FIXTURE.read_text(encoding="utf-8"))
    cells = {name: {run_id(hash_before_noise_key(c.config), b): c for c, b in
                    expand_grid(load_preset(name)).runs() if c.audits is None}
             for name in preset_names() if name in before}
    now = {name: sorted(runs) for name, runs in cells.items() if name not in CHANGED_ON_PURPOSE}
    assert now == {name: before[name] for name in now}
    assert set(before) <= set(preset_names())
    for name, (removed, added, is_new, _why) in CHANGED_ON_PURPOSE.items():
        old, new = set(before[name]), set(cells[name])
        assert (len(old - new), len(new - old)) == (removed, added), name
        assert all(is_new(cells[name][rid]) for rid in new - old), name


#: Presets changed on purpose after the fixture was taken: (runs removed, runs added, what
#: every added run is, why). Every other run of these presets keeps its id.
CHANGED_ON_PURPOSE: dict[str, tuple[int, int, Callable[[GridCell], bool], str]] = {
    "imdb-library-benchmark-15": (
        0, 8, lambda cell: cell.config.seed in (3, 4),
        "5 seeds instead of 3: seeds 3 and 4 of its 2 settings on both backends"),
    "interpretability-clip-sweep": (
        50, 50, lambda cell: cell.labels["data"] == "cats_vs_dogs",
        "its cats vs dogs half on scatter-linear instead of cnn4 (which did not learn)"),
    "medical-ldp-vs-dpsgd-cnn4": (
        70, 10, lambda cell: cell.labels["privacy"] == "non-private",
        "retinopathy retired (60 runs); the non-private baseline re-tuned on a validation "
        "split (its 10 runs replaced)"),
}


def train_config(tmp_path: Path, *args: str):  # noqa: ANN201 - a RunConfig
    from compare.cli.main import build_parser
    from compare.cli.train import build_config

    parsed = build_parser().parse_args(["train", "--out", str(tmp_path), *args])
    return build_config(parsed)


def test_a_grid_without_hyper_parameters_trains_what_train_would(tmp_path: Path) -> None:
    grid = expand_grid({"name": "g", "base": {"data": {"name": "digits"},
                                              "model": {"name": "cnn4"}},
                        "axes": {"privacy": [
                            {"label": "eps=8", "privacy": {"mechanism": "dpsgd-gaussian",
                                                           "target_epsilon": 8.0}},
                            {"label": "np", "privacy": {"mechanism": "none"}}]}})
    by_label = {cell.labels["privacy"]: cell for cell in grid.cells}
    private = train_config(tmp_path, "--backend", "torch", "--dataset", "digits", "--model",
                           "cnn4", "--epsilon", "8")
    plain = train_config(tmp_path, "--backend", "tf", "--dataset", "digits", "--model",
                         "cnn4", "--mechanism", "none")
    assert by_label["eps=8"].config == private
    assert by_label["np"].config == plain
    assert private.data.image_size == 16 and private.train.momentum == 0.9
    assert by_label["eps=8"].defaults == {
        "model.activation": "tanh", "train.lr": 0.1, "train.momentum": 0.9,
        "train.batch_size": 64, "train.epochs": 5.0, "data.image_size": 16}


def test_the_api_fills_the_same_defaults_and_says_which() -> None:
    config, filled = api.resolve_config({"data": {"name": "mnist5k"},
                                         "train": {"lr": 1.0, "batch_size": 200}})
    assert config.train.momentum == 0.9 and filled["train.momentum"] == 0.9
    assert "train.lr" not in filled and "train.batch_size" not in filled
    line = describe_settings(config, filled)
    assert "sgd lr 1, momentum 0.9 (default)" in line and "batch 200," in line


@pytest.mark.parametrize(("backend", "sampling"), [("tf", "shuffle"), ("torch", "poisson")])
def test_library_recipe_takes_its_library_sampling(backend: str, sampling: str) -> None:
    completed, filled = fill_defaults({"recipe": "library"}, backend)
    assert completed["privacy"]["sampling"] == sampling
    assert filled["privacy.sampling"] == sampling
    given, _ = fill_defaults({"recipe": "library", "privacy": {"sampling": "poisson"}}, "tf")
    assert given["privacy"]["sampling"] == "poisson"  # explicit: kept (train refuses it)


def test_a_library_grid_point_splits_by_backend_sampling() -> None:
    grid = expand_grid({"name": "g", "base": {"data": {"name": "digits"}, "recipe": "library",
                                              "privacy": {"mechanism": "dpsgd-gaussian",
                                                          "noise_multiplier": 1.0}}})
    runs = {backend: cell.config.privacy.sampling for cell, backend in grid.runs()}
    assert runs == {"tf": "shuffle", "torch": "poisson"}


def test_explicit_library_sampling_the_library_cannot_run_is_one_line(tmp_path: Path) -> None:
    from compare.cli.main import main

    status = main(["train", "--backend", "tf", "--recipe", "library", "--dataset", "digits",
                   "--set", "privacy.sampling=poisson", "--noise-multiplier", "1",
                   "--dry-run", "--out", str(tmp_path / "o")])
    assert status == 2 and not (tmp_path / "o").exists()
