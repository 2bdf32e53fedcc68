"""Audit companion runs (:mod:`compare.companions`): one audited extra run per configuration, whose
one-run audit is the configuration's *audited* epsilon beside its claimed and proved one.

The end-to-end tests train a tiny version of the mnist-gap-attribution design once
(``fixtures/gap-audit-tiny.yaml``: digits, one epoch, torch, 2 runs + 2 companions, about
30 s of CPU) and then only re-render its report from records.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
import pytest

from compare import api
from compare.companions import COMPANION_AXIS
from compare.grid import expand_grid, load_grid_file, load_preset
from compare.records import read_records, report_differences
from compare.report import rebuild_report, render_report
from compare.reporting.audited_column import NOT_YET_RUN
from compare.reporting.privacy_section import VIOLATION_FLAG
from dpcore.errors import ConfigError
from dpcore.results import RunResult, run_id

TINY = Path(__file__).parent / "fixtures" / "gap-audit-tiny.yaml"


# --- the grid ---------------------------------------------------------------------------
def test_companions_leave_the_main_runs_alone_and_come_last() -> None:
    raw = load_grid_file(TINY)
    without = dict(raw)
    del without["audit_companions"]
    grid, plain = expand_grid(raw), expand_grid(without)
    runs = grid.runs()
    main = [(c.config.config_hash, b) for c, b in plain.runs()]
    assert [(c.config.config_hash, b) for c, b in runs[:len(main)]] == main
    companions = runs[len(main):]
    assert [c.audits for c, _ in companions] == [c.config.config_hash for c, _ in plain.runs()
                                                 if c.config.seed == 0]
    kinds = {c.config.recipe: c.config.audit_canaries.kind for c, _ in companions}
    assert kinds == {"harmonised": "gradient", "library": "input"}
    assert all(c.config.seed == 0 and COMPANION_AXIS in c.labels for c, _ in companions)
    assert set(grid.companion_runs().values()) <= {run_id(h, b) for h, b in main}


def test_the_gap_attribution_preset_has_one_companion_per_configuration() -> None:
    """One white-box companion per configuration: gradient canaries in the step that ran,
    the libraries' own recipes included (their optimizers take canary records)."""
    grid = expand_grid(load_preset("mnist-gap-attribution"))
    configurations = {(c.setting, b) for c, b in grid.runs() if c.audits is None}
    companions = [(c, b) for c, b in grid.runs() if c.audits is not None]
    assert len([1 for c, _ in grid.runs() if c.audits is None]) == 60
    assert len(companions) == len(configurations) == 12
    assert {(c.labels["run"], b) for c, b in companions} == configurations
    for cell, _ in companions:
        spec = cell.config.audit_canaries
        assert cell.config.seed == 0
        assert (spec.kind, spec.count, spec.k) == ("gradient", 5000, 500)
    assert {c.config.recipe for c, _ in companions} == {"harmonised", "library"}


@pytest.mark.parametrize("section, message", [
    ({"canaries": {"harmonised": {"count": 10}}, "bogus": 1}, "unknown audit_companions key"),
    ({"canaries": {"harmonized": {"count": 10}}}, "recipe 'harmonized' is not known"),
    ({"canaries": {"harmonised": {"count": 0}}}, "count=0 audits nothing"),
    ({"canaries": {"harmonised": {"count": 10}}, "seeds": [-1]}, "audit_companions.seeds"),
    ({"canaries": {}}, "audit_companions.canaries={} is not valid"),
    ({"canaries": {"library": {"count": 10, "kind": "label"}}}, "audit_canaries.kind"),
])
def test_a_bad_companion_section_is_refused_in_one_line(section: dict, message: str) -> None:
    raw = {**load_grid_file(TINY), "audit_companions": section}
    with pytest.raises(ConfigError) as caught:
        expand_grid(raw)
    assert message in str(caught.value) and "\n" not in str(caught.value)


# --- the report ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny grid trained once (4 runs of one epoch on digits) and reported."""
    root = tmp_path_factory.mktemp("gap-audit")
    api.compare(str(TINY), out=root / "store", report=root / "report", progress=False)
    return root / "report"


def _privacy(folder: Path) -> pd.DataFrame:
    return pd.read_csv(folder / "privacy.csv", keep_default_na=False)


@pytest.mark.slow
def test_the_report_shows_claimed_proved_and_audited_per_configuration(
        tiny_report: Path) -> None:
    table = _privacy(tiny_report).set_index("setting")
    assert set(table.index) == {"harmonised", "Opacus stock (library)"}  # no companion rows
    assert (table["seeds"] == 1).all()  # the companions pool with no configuration's runs
    for setting, kind in (("harmonised", "gradient"), ("Opacus stock (library)", "input")):
        row = table.loc[setting]
        assert float(row["claimed"]) > 0 and float(row["proved"]) > 0
        assert float(row["audited (max over seeds)"]) >= 0  # the companion's audit
        assert row["audited per seed (95% lower bounds)"].startswith("seed 0: ")
        assert row["audit (kind, correct/k of m)"].startswith(kind)
        assert "(companion run, seed 0)" in row["audit (kind, correct/k of m)"]
    records = read_records(tiny_report)
    companions = [r for r in records.results if COMPANION_AXIS in r.labels]
    assert len(companions) == 2 and all(r.audit["one_run"] for r in companions)
    text = (tiny_report / "report.md").read_text(encoding="utf-8")
    assert "2 of the grid's 2 companion runs are stored" in text
    assert "- runs: 2 finished" in text  # companions are not counted among the grid's runs
    rebuilt = rebuild_report(tiny_report, tiny_report.parent / "rebuilt").parent
    assert report_differences(tiny_report, rebuilt) == []


@pytest.mark.slow
def test_records_without_their_companions_read_not_yet_run(
        tiny_report: Path, tmp_path: Path) -> None:
    records = read_records(tiny_report)
    main = [r for r in records.results if COMPANION_AXIS not in r.labels]
    render_report(main, records.context, tmp_path, resolved=True)
    table = _privacy(tmp_path)
    assert list(table["audited (max over seeds)"]) == [NOT_YET_RUN, NOT_YET_RUN]
    assert "0 of the grid's 2 companion runs are stored" in (
        tmp_path / "report.md").read_text(encoding="utf-8")


@pytest.mark.slow
def test_a_companion_audited_above_its_proved_epsilon_is_flagged(
        tiny_report: Path, tmp_path: Path) -> None:
    records = read_records(tiny_report)

    def leaky(r: RunResult) -> RunResult:
        if COMPANION_AXIS not in r.labels or r.config.get("recipe") == "library":
            return r
        one_run = {**r.audit["one_run"], "epsilon_lower_bound": 1000.0}
        return dataclasses.replace(r, audit={**r.audit, "one_run": one_run})

    render_report([leaky(r) for r in records.results], records.context, tmp_path,
                  resolved=True)
    table = _privacy(tmp_path).set_index("setting")
    assert table.loc[f"harmonised [{VIOLATION_FLAG}]", "violation"].startswith(VIOLATION_FLAG)
    assert table.loc["Opacus stock (library)", "violation"] == ""
    text = (tmp_path / "report.md").read_text(encoding="utf-8")
    headline = text.split("## Headline")[1].split("##")[0]
    assert f"1 {VIOLATION_FLAG}" in headline
    summary = pd.read_csv(tmp_path / "summary.csv")
    assert f"harmonised [{VIOLATION_FLAG}]" in set(summary["setting"])  # every table
