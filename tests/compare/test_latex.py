"""``dpcompare report --latex``: booktabs tables of the headline tables (structure only; nothing
is compiled)."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from compare.latex import to_booktabs, write_latex_tables
from dpcore.errors import DataError


def _summary(folder: Path) -> None:
    pd.DataFrame({
        "setting": ["eps=1", "eps=1", "non-private"], "backend": ["tf", "torch", "tf"],
        "seeds": [3, 3, 3], "accuracy_text": ["0.912 ± 0.004", "0.905 ± 0.010", "0.97 ± 0.01"],
        "auc_text": ["0.99 ± 0.00", "0.98 ± 0.01", "1.00 ± 0.00"],
        "epsilon_mean": [1.0, 1.0, float("inf")], "accuracy_mean": [0.912, 0.905, 0.97],
    }).to_csv(folder / "summary.csv", index=False)
    pd.DataFrame({  # two seeds of one DP setting, one non-private run
        "setting": ["eps=1", "eps=1", "non-private"], "backend": ["tf"] * 3,
        "noise_multiplier": [1.1, 1.1, 0.0], "steps": [300] * 3, "sampling_rate": [0.05] * 3,
        "delta": [1e-5] * 3, "epsilon_rdp": [1.0, 1.0, None], "epsilon_pld": [0.9, 0.9, None],
        "epsilon_opacus_rdp": [None] * 3, "epsilon_opacus_prv": [None] * 3,
        "epsilon_tf_privacy": [1.0, 1.0, None],
    }).to_csv(folder / "epsilon.csv", index=False)


def test_headline_tables_are_booktabs_with_the_report_columns(tmp_path: Path) -> None:
    _summary(tmp_path)
    written = {p.name: p.read_text() for p in write_latex_tables(tmp_path)}
    assert set(written) == {"accuracy.tex", "privacy.tex"}  # no records: no published table
    for text in written.values():
        rules = re.findall(r"\\(toprule|midrule|bottomrule)", text)
        assert rules == ["toprule", "midrule", "bottomrule"]
        assert text.index(r"\begin{tabular}") < text.index(r"\end{tabular}")
        assert r"\caption{" in text and r"\label{tab:" in text
    accuracy = written["accuracy.tex"]
    header = accuracy.split(r"\toprule")[1].split(r"\midrule")[0]
    assert [c.strip() for c in header.strip().rstrip("\\").split("&")] == [
        "setting", "backend", "seeds", "accuracy", "AUC", "epsilon"]
    body = accuracy.split(r"\midrule")[1].split(r"\bottomrule")[0]
    assert body.count(r"\\") == 3 and r"0.912 $\pm$ 0.004" in body  # a row per setting, backend
    assert "accuracy_mean" not in accuracy
    privacy = written["privacy.tex"]
    assert "eps (RDP)" in privacy and "eps TF Privacy" in privacy and "--" in privacy
    rows = privacy.split(r"\midrule")[1].split(r"\bottomrule")[0]
    assert rows.count(r"\\") == 1  # one DP-SGD setting, first seed; non-private left out


def test_text_is_escaped_for_latex() -> None:
    text = to_booktabs(pd.DataFrame({"setting": ["C=1 & 50%_x"]}), "A caption.", "tab:x")
    assert r"C=1 \& 50\%\_x" in text


def test_a_folder_without_a_report_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="summary.csv"):
        write_latex_tables(tmp_path)
