"""A DP-SGD mechanism added by registration only: a toy Gaussian variant with its own name
(registered in :data:`dpcore.mechanisms.DP_MECHANISMS`) and its own label and marker
(registered in the report layer's :data:`compare.reporting.styles.MECHANISM_STYLES`) trains on
both backends and its runs appear in a report built by :mod:`compare.report`, with no other
change (the test's fixture registers both and unregisters them after)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from compare import api
from compare.reporting import section as report_section
from compare.reporting.styles import MECHANISM_STYLES, MechanismStyle, label_of, marker_of
from compare.tidy import load_results
from dpcore.accounting import dpsgd_event, epsilon_rdp
from dpcore.config import PrivacySpec, RunConfig
from dpcore.errors import ConfigError
from dpcore.mechanisms import DP_MECHANISMS, GaussianDpSgd, get_mechanism
from tests.compare.test_runner import TINY

TOY = "dpsgd-toy"
TOY_LABEL = "toy Gaussian (test only)"


class ToyGaussian(GaussianDpSgd):
    """Gaussian DP-SGD under another name; the libraries do not know it."""

    name = TOY
    cli_name = "toy"
    aliases = ()
    library_recipe = False
    library_accountant = False


@pytest.fixture
def toy() -> Iterator[str]:
    DP_MECHANISMS.register()(ToyGaussian)
    MECHANISM_STYLES.register(TOY)(MechanismStyle(label=TOY_LABEL, marker="D"))
    try:
        yield TOY
    finally:
        DP_MECHANISMS.unregister(TOY)
        MECHANISM_STYLES.unregister(TOY)
    assert TOY not in DP_MECHANISMS and TOY not in MECHANISM_STYLES


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
    assert get_mechanism(toy).accountants == ("rdp", "pld", "prv")  # they support its event
    assert (label_of(toy), marker_of(toy)) == (TOY_LABEL, "D")
    assert RunConfig(privacy=PrivacySpec(mechanism=toy, noise_multiplier=1.0)).privacy.is_dpsgd
    with pytest.raises(ConfigError, match="no library recipe"):
        RunConfig(recipe="library", privacy=PrivacySpec(mechanism=toy, noise_multiplier=1.0))
    with pytest.raises(ConfigError, match="taken by"):
        DP_MECHANISMS.register()(type("Clash", (ToyGaussian,), {"name": "x", "cli_name": "toy"}))


def test_unregistered_the_toy_is_refused_and_drawn_in_the_default_style() -> None:
    with pytest.raises(ConfigError, match=f"privacy.mechanism='{TOY}' is not known"):
        PrivacySpec(mechanism=TOY, noise_multiplier=1.0)
    assert (label_of(TOY), marker_of(TOY)) == (TOY, "o")


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
