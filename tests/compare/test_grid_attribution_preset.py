"""The `mnist-gap-attribution` preset expands to the intended runs (validated, not run), and a
grid axis entry's `backends:` restricts its cells."""

from __future__ import annotations

from collections import Counter

import pytest

from compare.grid import expand_grid, load_preset
from dpcore.errors import ConfigError
from dpcore.recipes import check_backend_recipe, privacy_claim


def test_gap_attribution_preset_expands() -> None:
    grid = expand_grid(load_preset("mnist-gap-attribution"))
    everything = grid.runs()
    runs = [(c, b) for c, b in everything if c.audits is None]
    # 11 settings (harmonised on both backends, 6 flips, 2 stock recipes and 2 candidate
    # library recipes on one backend each) x 5 seeds
    assert len(runs) == 60 and len({(c.config.config_hash, b) for c, b in runs}) == 60
    # then one audit companion per configuration and backend (seed 0; compare.companions),
    # after every main run, each auditing a main run of its own backend
    companions = everything[len(runs):]
    assert len(companions) == 12 and all(c.audits is not None for c, _ in companions)
    assert {(c.audits, b) for c, b in companions} <= {(c.config.config_hash, b)
                                                       for c, b in runs}
    per_setting = Counter((cell.setting, backend) for cell, backend in runs)
    assert set(per_setting.values()) == {5}  # 5 seeds each
    candidates = {(c.setting, b): c.config for c, b in runs if c.config.recipe == "library"
                  and c.config.factors.non_default()}
    assert {k: v.factors.non_default() for k, v in candidates.items()} == {
        ("TF Privacy, 32 microbatches (library)", "tf"): {"microbatch_size": 32},
        ("Opacus, standardised inputs (library)", "torch"): {"input_scaling": "standardised"}}
    for cell, backend in runs:
        check_backend_recipe(cell.config, backend)  # every run can start
        config = cell.config
        assert (config.data.name, config.model.name, config.train.epochs,
                config.train.batch_size, config.train.lr, config.privacy.noise_multiplier,
                config.privacy.delta) == ("mnist", "cnn4", 15, 1024, 0.1, 1.0, 1e-5)
    library = {backend for cell, backend in runs if cell.config.recipe == "library"}
    assert library == {"tf", "torch"}
    harmonised = [c for c, b in runs if c.setting == "harmonised"]
    assert {c.config.factors.non_default().__len__() for c in harmonised} == {0}
    # each flip changes one factor; the microbatch flip is TF Privacy's microbatching as a
    # unit: clip per microbatch and divide by their count, which needs shuffled batches
    for cell, _ in runs:
        if cell.setting.startswith("flip"):
            changed = len(cell.config.factors.non_default()) + (
                cell.config.privacy.sampling == "shuffle")
            assert changed == (3 if "microbatches" in cell.setting else 1), cell.setting
    assert {privacy_claim(c.config, b)["status"] for c, b in runs} == {
        "proved", "claimed, not proved"}
    from compare.reporting.published import find_row, paper_table

    (entry,) = grid.published
    table = paper_table(entry["paper"], entry["table"])
    published = {(c["backend"], c["setting"]): table.rows[find_row(table, c["row"])][
        table.columns.index(c["column"])] for c in entry["cells"] if c["metric"] == "accuracy"}
    assert published == {("tf", "TF Privacy stock (library)"): 96.72,
                         ("torch", "Opacus stock (library)"): 85.47}


def test_axis_entry_backends_restrict_cells() -> None:
    raw = {"base": {"train": {"epochs": 1}},
           "axes": {"a": [{"label": "x", "backends": ["tf"]}, {"label": "y"}],
                    "b": [{"label": "p"}, {"label": "q", "backends": ["torch"]}]}}
    runs = [(c.setting, b) for c, b in expand_grid(raw).runs()]
    assert runs == [("x · p", "tf"), ("y · p", "tf"), ("y · p", "torch"), ("y · q", "torch")]
    with pytest.raises(ConfigError, match="backend 'jax' is not known"):
        expand_grid({"axes": {"a": [{"label": "x", "backends": ["jax"]}]}})
