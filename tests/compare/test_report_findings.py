"""The "Findings about the published figures" section (the IMDB epsilon finding) and the
"Privacy claims" section."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from compare.grid import load_preset
from compare.report import ReportContext, write_report
from compare.reporting import findings_section as findings_module
from compare.reporting.claims_section import claims_frame, claims_section
from compare.reporting.findings_section import (
    REPOSITORY,
    epsilon_table,
    findings_for,
    findings_section,
)
from dpcore.accounting import dpsgd_event, epsilon_rdp
from dpcore.errors import ConfigError
from dpcore.results import ResultsStore
from tests.compare.attribution_fakes import EXPLAINED, make_grid, make_run

PAPER = "library_benchmark_kotevska"


@pytest.mark.parametrize("preset", ["imdb-library-benchmark", "imdb-library-benchmark-15"])
def test_imdb_reports_carry_the_epsilon_finding(preset: str, tmp_path: Path) -> None:
    out = REPOSITORY / "reports" / preset  # where the committed report lives
    lines = findings_section(load_preset(preset)["published"], out)
    text = "\n".join(lines)
    assert lines[0] == "## Findings about the published figures"
    assert "not reproduced by any accountant input" in text
    # the paper's figures, read from the bundled table, beside ours
    assert "| 15 | 5,860 | 4.10 | 6.83 | 6.839 | 7.794 | 6.839 |" in text
    assert "| 60 | 23,438 | 9.32 | 11.73 | 11.749 | 12.871 | 11.740 |" in text
    assert "| 15 | 0.648 | 1.35 | 0.002 |" in text
    assert "[docs/findings/imdb-epsilon.md](../../docs/findings/imdb-epsilon.md)" in text
    assert (out / "../../docs/findings/imdb-epsilon.md").resolve().is_file()
    assert "`python -m benchmarks.imdb_epsilon_puzzle`" in text


def test_mnist_reports_have_no_imdb_finding(tmp_path: Path) -> None:
    assert findings_section(load_preset("mnist-library-benchmark")["published"], tmp_path) == []


def test_finding_figures_match_the_shared_accountant() -> None:
    """The bundled dp_accounting column is what dpcore's accountant gives for the stated
    setting (steps = ceil(epochs N / B), q = B / N)."""
    (finding,) = findings_for(PAPER, "imdb_table_II")
    setting = finding["setting"]
    n, batch = setting["n_train"], setting["batch_size"]
    columns = finding["computed"]["columns"]
    for row in finding["computed"]["rows"]:
        record = dict(zip(columns, row, strict=True))
        steps = math.ceil(record["epochs"] * n / batch)
        assert record["steps"] == steps
        event = dpsgd_event("dpsgd-gaussian", setting["noise_multiplier"], batch / n, steps)
        assert epsilon_rdp(event, setting["delta"]) == pytest.approx(
            record["dp_accounting_rdp"], abs=0.001)


def test_epsilon_table_reads_the_paper_not_the_finding() -> None:
    (finding,) = findings_for(PAPER, "imdb_table_II")
    table = epsilon_table(PAPER, finding)
    assert list(table["TF Privacy published"]) == ["4.10", "7.83", "9.32"]
    assert list(table["Opacus published"]) == ["6.83", "10.31", "11.73"]


@pytest.mark.parametrize("bad, message", [
    ({"table": "imdb_table_II"}, "missing title, document, summary, conclusion"),
    ({"table": "imdb_table_II", "title": "t", "document": "d", "summary": "s",
      "conclusion": "c", "colour": "red"}, "unknown colour"),
    ({"table": "imdb_table_II", "title": "t", "document": "d", "summary": "s",
      "conclusion": "c", "computed": {"columns": ["epochs", "x"], "rows": [[15]]}},
     "computed must be"),
    ({"table": "imdb_table_II", "title": "t", "document": "d", "summary": "s",
      "conclusion": "c", "computed": {"columns": ["epochs"], "labels": [], "rows": [[15]]}},
     "one label and one value per column"),
])
def test_bad_finding_is_a_one_line_error(bad: dict, message: str,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(findings_module, "load_paper", lambda name: {"findings": [bad]})
    with pytest.raises(ConfigError, match=message):
        findings_for(PAPER, "imdb_table_II")


def test_claims_section_lists_what_is_not_proved() -> None:
    runs = make_grid(EXPLAINED)
    frame = claims_frame(runs)
    assert set(frame["setting"]) == {"TF Privacy stock (library)",
                                     "TF Privacy stock, train accuracy",
                                     "flip: shuffled fixed batches"}
    lines = claims_section(runs)
    assert lines[0] == "## Privacy claims" and "claimed, not proved" in lines[2]
    proved_only = make_grid({"harmonised tf": [0.8], "Opacus stock (library)": [0.8]})
    assert claims_section(proved_only) == []


def test_write_report_of_an_imdb_grid_has_the_finding(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path / "runs")
    for label in ("harmonised tf", "harmonised torch"):
        run = make_run(label, 0, 0.68)
        run.labels = {"epochs": "15 epochs", "privacy": "DP (noise 0.56)"}
        store.save(run)
    published = tuple(load_preset("imdb-library-benchmark-15")["published"])
    report = write_report(tmp_path / "runs", tmp_path / "report",
                          ReportContext(command="test", published=published))
    text = report.read_text()
    assert text.index("## Published vs ours") < text.index(
        "## Findings about the published figures") < text.index("## Accuracy and AUC")
    assert "| 45 | 17,579 | 7.83 | 10.31 | 10.450 | 11.572 | 10.313 |" in text

