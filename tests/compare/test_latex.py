"""``dpcompare report --latex``: paper-ready booktabs tables (the committed reports' tables are
compiled by tests/compare/test_latex_reports.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from compare.latex import (
    human_name,
    interval_caption,
    latex_interval,
    latex_number,
    latex_scientific,
    latex_signed,
    latex_text,
    paper_cell_name,
    report_slug,
    write_latex_tables,
)
from dpcore.errors import DataError


def _report(folder: Path, *, seeds: int = 3, collapsed: tuple[int, int, int] = (0, 0, 0),
            sigmas: tuple[float, float] = (1.1, 1.1)) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({
        "setting": ["eps=1 · C=1", "eps=1 · C=1", "non-private"],
        "backend": ["tf", "torch", "tf"], "seeds": [seeds] * 3,
        "mechanism": ["dpsgd-gaussian", "dpsgd-gaussian", "none"],
        "collapsed": list(collapsed),
        "accuracy_mean": [0.912, 0.905, 0.97], "accuracy_low": [0.905, 0.89, 0.96],
        "accuracy_high": [0.918, 0.915, 0.98],
        "accuracy_text": ["0.912 [0.905, 0.918]", "0.905 [0.890, 0.915]", "0.970 [0.960, 0.980]"],
        "auc_mean": [0.99, 0.98, 1.0], "auc_low": [0.985, 0.97, 0.999],
        "auc_high": [0.995, 0.99, 1.0],
        "epsilon_mean": [1.0, 1.0, float("inf")],
    }).to_csv(folder / "summary.csv", index=False)
    pd.DataFrame({"setting": ["eps=1 · C=1"] * 2, "backend": ["tf"] * 2, "seed": [0, 1],
                  "n_test": [1000, 1000]}).to_csv(folder / "runs.csv", index=False)
    pd.DataFrame({  # two seeds of one DP setting, one non-private run
        "setting": ["eps=1 · C=1", "eps=1 · C=1", "non-private"], "backend": ["tf"] * 3,
        "noise_multiplier": [*sigmas, 0.0], "steps": [300] * 3, "sampling_rate": [0.05] * 3,
        "delta": [1e-5] * 3, "epsilon_rdp": [1.0, 1.0, None], "epsilon_pld": [0.9, 0.9, None],
        "epsilon_opacus_rdp": [None] * 3, "epsilon_opacus_prv": [None] * 3,
        "epsilon_tf_privacy": [1.0, 1.0, None], "epsilon_proved": [1.0, 1.0, None],
    }).to_csv(folder / "epsilon.csv", index=False)
    return folder


def _rows(text: str) -> list[list[str]]:
    body = text.split(r"\midrule")[1].split(r"\bottomrule")[0]
    return [[c.strip() for c in line.rstrip("\\").split("&")]
            for line in body.strip().split("\\\\\n") if line.strip()]


def _header(text: str) -> list[str]:
    head = text.split(r"\toprule")[1].split(r"\midrule")[0]
    return [c.strip() for c in head.strip().rstrip("\\").split("&")]


def test_headline_tables_are_booktabs_with_human_headings(tmp_path: Path) -> None:
    folder = _report(tmp_path / "my-report")
    written = {p.name: p.read_text() for p in write_latex_tables(folder)}
    assert set(written) == {"accuracy.tex", "privacy.tex"}  # no records: no published table
    for name, text in written.items():
        text.encode("ascii")  # plain pdflatex: ASCII only
        assert re.findall(r"\\(toprule|midrule|bottomrule)", text) == [
            "toprule", "midrule", "bottomrule"]
        assert re.findall(r"\\label\{([^}]*)\}", text) == [f"tab:my-report-{name[:-4]}"]
        assert "booktabs" in text.splitlines()[0]  # the preamble it needs, as a comment
    accuracy = written["accuracy.tex"]
    assert _header(accuracy) == ["Setting", "Backend", "Seeds", "Test accuracy", "AUC",
                                 r"$\varepsilon$"]
    rows = _rows(accuracy)
    assert len(rows) == 3
    assert rows[0] == [r"eps=1 $\cdot$ C=1", "TensorFlow", "3", "0.912 [0.905, 0.918]",
                       "0.990 [0.985, 0.995]", "1"]
    assert rows[2][-1] == r"$\infty$" and "inf" not in accuracy.replace(r"\infty", "")
    assert "No run collapsed." in accuracy and "accuracy_mean" not in accuracy
    privacy = written["privacy.tex"]
    assert _header(privacy) == ["Setting", "Backend", r"$\sigma$", "Steps", "$q$", r"$\delta$",
                                "RDP", "PLD", "TF Privacy", "Proved"]  # empty columns left out
    (row,) = _rows(privacy)  # one DP-SGD setting; non-private left out
    assert row[5] == "$10^{-5}$" and "0.0000" not in privacy
    assert "Every seed of a setting has the same figures." in privacy


def test_collapsed_runs_are_counted_and_explained(tmp_path: Path) -> None:
    text = {p.name: p.read_text() for p in write_latex_tables(
        _report(tmp_path / "r", seeds=5, collapsed=(2, 0, 0)))}["accuracy.tex"]
    assert _header(text)[-1] == "Collapsed runs"
    assert [r[-1] for r in _rows(text)] == ["2 of 5", "", ""]
    assert "Collapsed runs predict (almost) one class" in text


def test_a_per_seed_calibration_shows_the_range_over_seeds(tmp_path: Path) -> None:
    text = {p.name: p.read_text() for p in write_latex_tables(
        _report(tmp_path / "r", sigmas=(1.1, 1.2)))}["privacy.tex"]
    assert _rows(text)[0][2] == "1.1--1.2" and "the range over seeds" in text


def test_captions_name_the_interval_shown() -> None:
    one = interval_caption([1, 1], [10000, 10000])
    assert one.startswith("One seed per setting") and "Wilson interval over the 10000 test" in one
    assert interval_caption([1], wilson=False) == "One seed per setting: no interval."
    five = interval_caption([5, 5])
    assert five == r"Mean over 5 seeds with its 95\% percentile bootstrap interval over seeds."
    few = interval_caption([3])
    assert "Mean over 3 seeds" in few and "fewer than 5 seeds" in few
    mixed = interval_caption([1, 5])
    assert "column Seeds" in mixed and "one seed: test accuracy with its 95\\% Wilson" in mixed


def test_text_is_escaped_and_ascii() -> None:
    assert latex_text("C=1 & 50%_x #1 {a} ~ ^") == \
        r"C=1 \& 50\%\_x \#1 \{a\} \textasciitilde{} \textasciicircum{}"
    text = latex_text('eps=1 · σ −0.5 ± 2 ∞ ε δ – "Title" café')
    text.encode("ascii")
    assert text == (r"eps=1 $\cdot$ $\sigma$ $-$0.5 $\pm$ 2 $\infty$ $\varepsilon$ $\delta$ -- "
                    "``Title'' cafe")
    assert latex_text("漢") == "?"  # nothing pdflatex cannot read gets through
    assert latex_text("eps=inf, info") == r"eps=$\infty$, info"


def test_numbers_for_a_paper() -> None:
    assert latex_scientific(1e-5) == "$10^{-5}$"
    assert latex_scientific(2.5e-4) == r"$2.5 \times 10^{-4}$"
    assert latex_number(1e-5) == "$10^{-5}$" and latex_number(0.0) == "0"
    assert latex_number(float("inf")) == r"$\infty$" and latex_number(float("nan")) == "--"
    assert latex_number(3.44230602) == "3.442" and latex_number(23438.0) == "23438"
    assert latex_number(-1.5) == "$-$1.5"
    assert latex_interval(0.5, float("nan"), float("nan")) == "0.500"
    assert latex_interval(-0.5, -0.6, -0.4, 2) == "$-$0.50 [$-$0.60, $-$0.40]"
    assert latex_signed(0.07) == "+0.07" and latex_signed(-1.594) == "$-$1.59"


def test_paper_cells_are_named_for_a_reader() -> None:
    assert paper_cell_name({"library": "opacus", "epochs": 15, "private": True},
                           "accuracy_pct") == "Opacus, 15 epochs, private: accuracy (%)"
    assert paper_cell_name({"library": "tf_privacy", "epochs": 60, "private": False},
                           "epsilon") == "TF Privacy, 60 epochs, non-private: ε"
    assert human_name("eps_0.5") == "ε = 0.5" and human_name("eps_inf") == "ε = ∞"
    assert human_name("ldp_b2") == "LDP b = 2" and human_name("dpsgd_b4") == "DP-SGD b = 4"
    assert human_name("average_drop_pct") == "average drop (%)"
    assert report_slug(Path("reports/Mnist Tuned_2")) == "mnist-tuned-2"


def test_a_folder_without_a_report_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="summary.csv"):
        write_latex_tables(tmp_path)
