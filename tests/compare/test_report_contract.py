"""The citable-report contract (:mod:`compare.reporting.contract`) over every committed report,
and each check against reports that break it.

Every folder under ``reports/`` with records is rendered from its records as regenerating it
would (the preset's current text and published figures, the grid's runs from every committed
report's records), once per session, and every check runs on it. A check that fails because
the lead must still retrain runs after a preset changed on purpose is listed, with its reason,
in :data:`compare.reporting.contract.AWAITING_RETRAINING`; a committed report whose text is
older than its preset is listed in :data:`AWAITING_REGENERATION`. Both are strict expected
failures: once a report is retrained or regenerated its entry fails the test until removed, so
the lists only shrink. The README's list of reports must be the generated one.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import pytest

from compare.records import has_records
from compare.report_context import ReportContext
from compare.reporting import contract
from compare.reporting.contract import (
    AWAITING_RETRAINING,
    CHECKS,
    ContractReport,
    render_for_contract,
)
from compare.reporting.digest import RETIRED_REPORTS, current_block, readme_block
from compare.reporting.pipeline import report_data, section_named
from compare.reporting.stats import holm_adjusted
from tests.compare.report_fakes import fake_result

ROOT = Path(__file__).resolve().parents[2]
REPORTS = ROOT / "reports"
FOLDERS = sorted(p.name for p in REPORTS.iterdir() if p.is_dir() and has_records(p))

#: Committed reports whose text (records/context.json: description, notes, published figures)
#: is older than their preset: `dpcompare compare --preset NAME --no-train --report
#: reports/NAME` regenerates them from the committed records, with no training.
AWAITING_REGENERATION: dict[str, str] = {
    name: f"{what}; regenerating it waits for the grid's DP-SGD runs, whose config hashes "
          "moved (contract.NOISE_KEY), to be trained: a regeneration now would drop them"
    for name, what in {
        "interpretability-clip-sweep": "description and notes: cnn4 retired from cats vs dogs",
        "interpretability-vs-epsilon-tuned": "published: the paper's trends added; notes",
        "mnist-gap-attribution": "notes: the shuffled proved figure by PLD; the library "
                                 "recipes audited by gradient canaries in their own steps",
    }.items()}


@functools.cache
def rendered(name: str) -> ContractReport:
    return render_for_contract(REPORTS / name)


def _cases() -> list:
    cases = []
    for name in FOLDERS:
        for check in CHECKS:
            reason = AWAITING_RETRAINING.get((name, check))
            if check == "regenerated" and name in AWAITING_REGENERATION:
                reason = f"awaiting regeneration: {AWAITING_REGENERATION[name]}"
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            cases.append(pytest.param(name, check, marks=marks, id=f"{name}-{check}"))
    return cases


@pytest.mark.parametrize("name, check", _cases())
def test_every_committed_report_meets_the_contract(name: str, check: str) -> None:
    problems = CHECKS[check](rendered(name))
    assert not problems, f"reports/{name} fails '{check}':\n" + "\n".join(problems)


def test_the_waiting_lists_name_committed_reports_and_known_checks() -> None:
    assert {name for name, _ in AWAITING_RETRAINING} <= set(FOLDERS)
    assert {check for _, check in AWAITING_RETRAINING} <= set(CHECKS)
    assert set(AWAITING_REGENERATION) <= set(FOLDERS)
    assert not set(RETIRED_REPORTS) & set(FOLDERS), "a retired report is still committed"


def test_the_readme_lists_the_reports_as_generated() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    expected = readme_block(REPORTS, render=lambda folder: rendered(folder.name))
    assert current_block(readme) == expected, (
        "README's list of reports is not the generated one: run "
        "`python -m compare.reporting.digest --write README.md`")


# -- each check against a report that breaks it ------------------------------------------------
def _report(runs: list, **context: object) -> ContractReport:
    ctx = ReportContext(command="test", **context)  # type: ignore[arg-type]
    data = report_data(runs, ctx)
    sections = {s: "\n".join(section_named(s).render(data).lines)
                for s in contract.TEXT_SECTIONS}
    return ContractReport("fake", data, sections, None, ctx)


def _pairs(seeds: int, point: str = "eps=1", mechanism: str = "dpsgd-gaussian",
           tf: float = 0.80, torch: float = 0.80) -> list:
    return [fake_result(backend=b, seed=s, point=point, mechanism=mechanism,
                        accuracy=(tf if b == "tf" else torch) + s / 1000)
            for b in ("tf", "torch") for s in range(seeds)]


def test_five_seeds_catches_three() -> None:
    assert contract.five_seeds(_report(_pairs(5))) == []
    problems = contract.five_seeds(_report(_pairs(3)))
    assert problems and "3 seeds, fewer than 5" in problems[0]


def test_corrected_catches_an_uncorrected_verdict() -> None:
    report = _report(_pairs(5, "eps=1", tf=0.80, torch=0.83) + _pairs(5, "eps=8"))
    assert contract.corrected(report) == []
    paired = report.data.paired.copy()
    paired["p_holm"] = paired["p_value"]  # the uncorrected p-values passed off as Holm's
    paired.loc[paired.index[0], "p_value"] = 0.03
    broken = dataclasses.replace(report, data=dataclasses.replace(report.data, paired=paired))
    assert any("not the adjustment" in p for p in contract.corrected(broken))
    assert list(holm_adjusted(paired["p_value"])) != list(paired["p_holm"])
    silent = dataclasses.replace(report, sections={**report.sections,
                                                   "headline": "1 differ, 1 agree."})
    assert any("without saying they are Holm-corrected" in p
               for p in contract.corrected(silent))


def test_published_verdicts_catch_a_table_without_them() -> None:
    entry = {"paper": "library_benchmark_kotevska", "table": "mnist_table_I",
             "cells": [{"row": {"library": "opacus", "epochs": 15, "private": True},
                        "column": "accuracy_pct", "setting": "mnist5k · eps=1",
                        "backend": "torch", "metric": "accuracy"}]}
    report = _report(_pairs(5), published=(entry,))
    assert contract.published_verdicts(report) == []
    text = report.sections["published"]
    stripped = text.replace("| verdict |", "| note |").split("Verdict per row:")[0]
    broken = dataclasses.replace(report, sections={**report.sections, "published": stripped,
                                                   "headline": "no verdicts here"})
    problems = contract.published_verdicts(broken)
    assert any("does not end in its verdict" in p for p in problems)
    assert any("headline does not give the published" in p for p in problems)


def test_privacy_catches_a_missing_table_and_headline() -> None:
    report = _report(_pairs(5))
    assert contract.privacy(report) == []
    broken = dataclasses.replace(report, sections={**report.sections, "privacy": "",
                                                   "headline": "Accuracy only."})
    assert len(contract.privacy(broken)) == 3
    public = _report(_pairs(5, "non-private", mechanism="none"))
    assert contract.privacy(public) == []  # nothing private: nothing to claim


def test_labels_catch_a_library_name_for_the_harmonised_step() -> None:
    report = _report(_pairs(5))
    assert contract.labels(report) == []
    broken = dataclasses.replace(report, sections={
        **report.sections, "headline": "Opacus minus TF Privacy test accuracy: 1 agree."})
    assert contract.labels(broken) == [
        "the headline labels the harmonised step 'Opacus minus TF Privacy'"]


def test_no_issue_references_catches_one() -> None:
    report = _report(_pairs(5), notes="Issue 18's targets: 0.87.")
    assert contract.no_issue_references(report) == ["cites 'Issue 18'"]
    assert contract.no_issue_references(_report(_pairs(5), notes="Targets: 0.87.")) == []


def test_baselines_catch_a_non_private_model_below_dp_sgd() -> None:
    good = _pairs(5, "eps=1", tf=0.80, torch=0.80) + _pairs(5, "non-private", "none", 0.85,
                                                            0.85)
    assert contract.baselines(_report(good)) == []
    below = _pairs(5, "eps=1", tf=0.85, torch=0.85) + _pairs(5, "non-private", "none", 0.82,
                                                             0.82)
    problems = contract.baselines(_report(below))
    assert len(problems) == 2 and "not a tuned baseline" in problems[0]


def test_regenerated_catches_an_out_of_date_context() -> None:
    from compare.grid import expand_grid, load_preset

    grid = expand_grid(load_preset("demo"))
    report = dataclasses.replace(
        _report(_pairs(5)), grid=grid,
        committed_context=ReportContext(command="x", description=grid.description,
                                        notes=grid.notes, published=tuple(grid.published)))
    assert contract.regenerated(report) == []
    stale = dataclasses.replace(report, committed_context=dataclasses.replace(
        report.committed_context, notes="older notes"))
    assert contract.regenerated(stale) == ["the committed notes is not the preset's current one"]


def test_a_grid_with_no_committed_run_is_named_by_five_seeds_only() -> None:
    """A report none of whose grid runs has a committed record (every config hash moved) has
    no text to check: five_seeds names the missing runs, the checks of text pass vacuously."""
    ctx = ReportContext(command="test")
    empty = ContractReport("fake", report_data([], ctx), dict.fromkeys(contract.TEXT_SECTIONS, ""),
                           None, ctx, missing=("0123456789abcdef-tf",))
    assert contract.five_seeds(empty) == [
        "none of the grid's 1 run(s) has a committed record (e.g. 0123456789abcdef-tf): "
        "nothing to report until they train"]
    assert contract.privacy(empty) == [] and contract.baselines(empty) == []
