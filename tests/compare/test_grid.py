"""Grid expansion: cartesian product, seeds, backends, overrides, presets."""

from __future__ import annotations

from pathlib import Path

import pytest

from compare.grid import expand_grid, load_grid_file, load_preset, preset_names
from dpcore.errors import ConfigError

GRID = {
    "name": "g",
    "base": {"data": {"name": "digits"}, "train": {"epochs": 1, "batch_size": 32}},
    "axes": {
        "privacy": [
            {"label": "eps=1", "privacy": {"mechanism": "dpsgd-gaussian", "target_epsilon": 1}},
            {"label": "plain", "privacy": {"mechanism": "none"}},
        ],
        # relu given: a grid's unspecified activation takes the bench's default (tanh)
        "model": [{"label": "cnn4", "model": {"name": "cnn4", "activation": "relu"}},
                  {"label": "tanh", "model": {"name": "cnn4", "activation": "tanh"}}],
    },
    "seeds": 2,
    "backends": ["tf", "torch"],
}


def test_expansion_is_the_cartesian_product_times_seeds() -> None:
    grid = expand_grid(GRID)
    assert len(grid.cells) == 2 * 2 * 2
    assert len(grid.runs()) == 16
    hashes = {c.config.config_hash for c in grid.cells}
    assert len(hashes) == 8  # every cell distinct
    first = grid.cells[0]
    assert first.labels == {"privacy": "eps=1", "model": "cnn4"}
    assert first.setting == "eps=1 · cnn4"  # not "|": it would split a Markdown table cell
    assert {c.config.seed for c in grid.cells} == {0, 1}
    # the same cell runs on both backends with the identical config
    assert grid.runs()[0][0] is grid.runs()[1][0]


def test_augment_passes_through_base_axes_and_overrides() -> None:
    """``augment`` is a config section like any other: in the base, in an axis entry (which
    laid over the base changes one field) and in a ``--set`` override."""
    raw = dict(GRID, seeds=1, base={**GRID["base"], "augment": {"hflip": True}},
               axes={"augment": [{"label": "flip"},
                                 {"label": "flip+crop", "augment": {"crop_padding": 2}}]})
    grid = expand_grid(raw)
    assert [c.config.augment.crop_padding for c in grid.cells] == [0, 2]
    assert all(c.config.augment.hflip for c in grid.cells)
    assert grid.cells[0].config.config_hash != grid.cells[1].config.config_hash
    off = expand_grid(raw, overrides=["augment.hflip=false", "augment.crop_padding=0"])
    assert all("augment" not in c.config.to_dict() for c in off.cells)
    with pytest.raises(ConfigError, match="augment.crop_padding=-1"):
        expand_grid(dict(raw, base={**raw["base"], "augment": {"crop_padding": -1}}))


def test_cli_style_overrides() -> None:
    grid = expand_grid(GRID, seeds=1, backends=["torch"], overrides=["train.lr=0.3"])
    assert len(grid.cells) == 4 and grid.backends == ("torch",)
    assert all(c.config.train.lr == 0.3 for c in grid.cells)


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"colour": "red"}, "unknown grid key(s) colour"),
        ({"backends": ["jax"]}, "backend 'jax' is not known"),
        ({"seeds": 0}, "seeds=0"),
        ({"axes": {"privacy": []}}, "non-empty list"),
        ({"perf": {"engine": "turbo"}}, "perf.engine"),
        ({"perf": {"speed": 2}}, "grid 'perf'"),
        ({"base": {"train": {"epochs": -1}}}, "train.epochs"),
    ],
)
def test_bad_grids_are_rejected(change: dict, fragment: str) -> None:
    with pytest.raises(ConfigError, match=None) as excinfo:
        expand_grid({**GRID, **change})
    assert fragment in str(excinfo.value)


def test_presets_load_and_expand() -> None:
    names = preset_names()
    assert "demo" in names
    for name in names:
        grid = expand_grid(load_preset(name))
        assert grid.cells, name
    demo = expand_grid(load_preset("demo"))
    assert demo.backends == ("tf", "torch")
    assert {c.config.data.name for c in demo.cells} == {"mnist5k"}
    assert sorted({c.labels["privacy"] for c in demo.cells}) == ["eps=1", "eps=8", "non-private"]
    assert sorted(c.config.seed for c in demo.cells) == sorted(list(range(5)) * 3)
    with pytest.raises(ConfigError, match="valid: .*demo"):
        load_preset("nope")


def test_single_run_config_file_is_a_one_cell_grid(tmp_path: Path) -> None:
    path = tmp_path / "one.yaml"
    path.write_text("data: {name: digits}\ntrain: {epochs: 1, batch_size: 16}\n")
    grid = expand_grid(load_grid_file(path))
    assert len(grid.cells) == 1 and grid.name == "one"


def test_tuned_interpretability_preset_trains_the_tuned_presets_settings() -> None:
    """Its runs at the tuned presets' own settings are those presets' configs (one stored run)."""
    tuned = expand_grid(load_preset("interpretability-vs-epsilon-tuned"))
    assert len(tuned.cells) == 2 * 9 * 5
    hashes = {c.config.config_hash: c.labels for c in tuned.cells}
    for preset, data_label, own_label, our_label in (
            ("cats-vs-dogs-tuned", "cats_vs_dogs", "non-private", "eps=inf"),
            ("pneumonia-tuned", "pneumonia", "eps=1", "gauss eps=1"),
            ("pneumonia-tuned", "pneumonia", "non-private", "eps=inf")):
        cells = [c for c in expand_grid(load_preset(preset)).cells
                 if c.labels["privacy"] == own_label]
        assert len(cells) == 5, (preset, own_label)
        for cell in cells:
            assert hashes.get(cell.config.config_hash) == {"data": data_label,
                                                           "privacy": our_label}
    # every other tuned setting differs only in its privacy section
    for cell in tuned.cells:
        assert cell.config.model.name == "scatter-linear"
        assert cell.config.train.momentum == 0.9 and cell.config.privacy.delta == 1e-5
