"""A DP-SGD mechanism added by registration only (issue 34): a toy Gaussian variant with its
own name, label and marker trains on both backends and its runs appear in a report built by
:mod:`compare.report`, with no change outside :mod:`dpcore.mechanisms` (the test's fixture
registers it and unregisters it after)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from compare import api
from compare.reporting import section as report_section
from compare.tidy import load_results
from dpcore.accounting import dpsgd_event, epsilon_rdp
from dpcore.config import PrivacySpec, RunConfig
from dpcore.errors import ConfigError
from dpcore.mechanisms import (
    DP_MECHANISMS,
    GaussianDpSgd,
    get_mechanism,
    register_mechanism,
    unregister_mechanism,
)
from tests.compare.test_runner import TINY

TOY = "dpsgd-toy"
TOY_LABEL = "toy Gaussian (test only)"


class ToyGaussian(GaussianDpSgd):
    """Gaussian DP-SGD under another name, label and marker; the libraries do not know it."""

    name = TOY
    cli_name = "toy"
    aliases = ()
    label = TOY_LABEL
    marker = "D"
    library_recipe = False
    library_accountant = False


@pytest.fixture
def toy() -> Iterator[str]:
    register_mechanism(ToyGaussian)
    try:
        yield TOY
    finally:
        unregister_mechanism(TOY)
    assert TOY not in DP_MECHANISMS


#: test_runner's tiny grid (digits 16x16, 4 steps, both backends) with three settings: the toy
#: mechanism at two noise levels and the non-private reference.
GRID: dict[str, Any] = {**TINY, "name": "toy-mechanism", "axes": {"privacy": [
    {"label": "toy sigma=1", "privacy": {"mechanism": TOY, "noise_multiplier": 1.0}},
    # a second noise level: the toy's runs form a curve of epsilon (one point is no curve)
    {"label": "toy sigma=4", "privacy": {"mechanism": TOY, "noise_multiplier": 4.0}},
    {"label": "non-private", "privacy": {"mechanism": "none"}},
]}}


def test_the_toy_is_known_only_while_registered(toy: str) -> None:
    assert get_mechanism(toy).noises_gradients
    assert RunConfig(privacy=PrivacySpec(mechanism=toy, noise_multiplier=1.0)).privacy.is_dpsgd
    with pytest.raises(ConfigError, match="no library recipe"):
        RunConfig(recipe="library", privacy=PrivacySpec(mechanism=toy, noise_multiplier=1.0))
    with pytest.raises(ConfigError, match="taken by"):
        register_mechanism(type("Clash", (ToyGaussian,), {"name": "x", "cli_name": "toy"}))


def test_unregistered_the_toy_is_refused() -> None:
    with pytest.raises(ConfigError, match=f"privacy.mechanism='{TOY}' is not known"):
        PrivacySpec(mechanism=TOY, noise_multiplier=1.0)


def test_a_registered_mechanism_trains_on_both_backends_and_is_reported(
        toy: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    legends: list[str] = []
    save = report_section.saved_figure

    def keep_legend(name: str, fig: Any, **kwargs: Any) -> Any:
        legends.extend(t.get_text() for legend in fig.legends for t in legend.get_texts())
        return save(name, fig, **kwargs)

    monkeypatch.setattr(report_section, "saved_figure", keep_legend)
    report = tmp_path / "report"
    store = api.compare(GRID, out=tmp_path / "store", report=report, progress=False)
    assert not store.outcome.failed and len(store.outcome.ran) == 6

    runs = pd.read_csv(report / "runs.csv")
    toy_runs = runs[runs["mechanism"] == toy]
    assert sorted(toy_runs["backend"]) == ["tf", "tf", "torch", "torch"]
    assert (toy_runs["status"] == "finished").all()
    # the toy's event is its step_event: Gaussian, so its epsilon is Gaussian DP-SGD's
    for result in load_results(tmp_path / "store"):
        privacy = result.privacy
        if privacy["mechanism"] == toy:
            sigma = float(result.config["privacy"]["noise_multiplier"])
            expected = epsilon_rdp(dpsgd_event("dpsgd-gaussian", sigma, privacy["sampling_rate"],
                                               privacy["steps"]), privacy["delta"])
            assert privacy["epsilon_rdp"] == pytest.approx(expected)
            assert "GaussianDpEvent" in json.dumps(privacy["dp_event"])

    text = (report / "report.md").read_text(encoding="utf-8")
    epsilon_table = text.split("## Epsilon side by side", 1)[1].split("\n## ", 1)[0]
    assert epsilon_table.count("toy sigma=1") == 2  # one row per backend
    assert f"tf {TOY_LABEL}" in legends and f"torch {TOY_LABEL}" in legends
