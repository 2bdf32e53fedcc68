"""The headline's reproduction sentence names each difference of setting once.

Checked on every committed report's text (what a reader sees): the explanations of the trends
that do not hold in size are listed once each, although the two backends' verdicts of one
trend give the same ones (the medical report once listed all four twice).
"""

from __future__ import annotations

from pathlib import Path

import pytest

REPORTS = Path(__file__).resolve().parents[2] / "reports"
LEAD = "differences of setting that could explain those that do not hold in size: "
WITH_TRENDS = sorted(p.parent.name for p in REPORTS.glob("*/report.md")
                     if LEAD in p.read_text(encoding="utf-8"))


def test_some_committed_report_explains_its_trends() -> None:
    assert "medical-ldp-vs-dpsgd-cnn4" in WITH_TRENDS


@pytest.mark.parametrize("name", WITH_TRENDS)
def test_each_explanation_is_listed_once(name: str) -> None:
    text = (REPORTS / name / "report.md").read_text(encoding="utf-8")
    for segment in text.split(LEAD)[1:]:
        reasons = segment.split(".\n")[0].rstrip(".").split("; ")
        repeated = sorted({r for r in reasons if reasons.count(r) > 1})
        assert not repeated, f"{name}: listed more than once: {repeated}"
