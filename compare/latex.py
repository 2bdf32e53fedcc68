"""Booktabs LaTeX tables of a report's headline tables, for papers (``dpcompare report
--latex``).

Written from the report's own CSV tables (so a table in the paper is the table in the
report), with pandas' ``Styler.to_latex`` (``hrules=True`` gives ``\\toprule``, ``\\midrule``
and ``\\bottomrule``: load ``booktabs``). Files, in ``REPORT/latex/``:

* ``accuracy.tex``: per setting and backend, seeds, accuracy and AUC with their intervals as
  the report prints them, epsilon (``summary.csv``);
* ``privacy.tex``: per DP-SGD setting and backend (first seed), noise multiplier, steps,
  sampling rate, delta and every epsilon: shared accountant (RDP, PLD) and the libraries' own
  (``epsilon.csv``);
* ``published.tex``: the published figures beside ours, when the report has them (from the
  report's records: each ``published:`` entry's comparison rows, as the report prints them).

Nothing is compiled.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from dpcore.errors import DataError
from dpcore.io import atomic_write_text

__all__ = ["LATEX_FOLDER", "TABLES", "write_latex_tables"]

LATEX_FOLDER = "latex"
#: Table file -> (source CSV of the report, {CSV column: LaTeX column heading}, caption).
TABLES: dict[str, tuple[str, dict[str, str], str]] = {
    "accuracy.tex": ("summary.csv", {
        "setting": "setting", "backend": "backend", "seeds": "seeds",
        "accuracy_text": "accuracy", "auc_text": "AUC", "epsilon_mean": "epsilon"},
        "Test accuracy and AUC (mean and 95\\% interval over seeds) per setting and backend."),
    "privacy.tex": ("epsilon.csv", {
        "setting": "setting", "backend": "backend", "noise_multiplier": "noise",
        "steps": "steps", "sampling_rate": "q", "delta": "delta",
        "epsilon_rdp": "eps (RDP)", "epsilon_pld": "eps (PLD)",
        "epsilon_opacus_rdp": "eps Opacus RDP", "epsilon_opacus_prv": "eps Opacus PRV",
        "epsilon_tf_privacy": "eps TF Privacy"},
        "Privacy of each DP-SGD setting: the shared accountant (dp\\_accounting) beside each "
        "library's own."),
}
PUBLISHED_FILE = "published.tex"


def write_latex_tables(report_dir: str | Path) -> list[Path]:
    """Write the booktabs tables of the report in ``report_dir`` (see the module docstring)
    into ``report_dir/latex``; a table whose CSV the report lacks is not written. Returns the
    paths written.

    Raises:
        DataError: ``report_dir`` holds no ``summary.csv`` (no report with finished runs).
    """
    folder = Path(report_dir)
    if not (folder / "summary.csv").is_file():
        raise DataError(f"{folder} holds no summary.csv; valid: a report folder with finished "
                        "runs (written by dpcompare compare or dpcompare report)")
    written = []
    for name, (csv, columns, caption) in TABLES.items():
        if not (folder / csv).is_file():
            continue
        table = pd.read_csv(folder / csv)
        if table.empty:
            continue
        if name == "privacy.tex":  # one row per DP-SGD setting and backend (first seed)
            table = table[table["noise_multiplier"].fillna(0) > 0]
            table = table.drop_duplicates(["setting", "backend"])
        if columns:
            keep = [c for c in columns if c in table]
            table = table[keep].rename(columns=columns)
        path = folder / LATEX_FOLDER / name
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, to_booktabs(table, caption, f"tab:{Path(name).stem}"))
        written.append(path)
    published = published_table(folder)
    if not published.empty:
        path = folder / LATEX_FOLDER / PUBLISHED_FILE
        atomic_write_text(path, to_booktabs(
            published, "Published figures beside ours (mean and 95\\% interval over seeds).",
            "tab:published"))
        written.append(path)
    return written


def published_table(report_dir: Path) -> pd.DataFrame:
    """Every ``published:`` entry's rows of "published vs ours" (paper and table first), from
    the report's records; empty when the report has none or no records."""
    from compare.records import has_records, read_records
    from compare.reporting.frames import results_frame
    from compare.reporting.published_section import comparison_rows

    if not has_records(report_dir):
        return pd.DataFrame()
    records = read_records(report_dir)
    frame = results_frame(records.results)
    parts = []
    for entry in records.context.published:
        if entry.get("table") is None or not entry.get("cells"):
            continue
        rows = comparison_rows(entry, frame)
        rows.insert(0, "paper", f"{entry['paper']} {entry['table']}")
        parts.append(rows)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def to_booktabs(table: pd.DataFrame, caption: str, label: str) -> str:
    """``table`` as a booktabs ``table`` environment (text escaped, numbers to 4 decimals,
    missing values as "--", "±" and "∞" as math so that pdflatex needs no Unicode setup)."""
    styler = table.style.hide(axis="index").format(precision=4, na_rep="--", escape="latex")
    styler = styler.format_index(escape="latex", axis=1)
    text = styler.to_latex(hrules=True, caption=caption, label=label, position="htbp",
                           position_float="centering", column_format="l" * len(table.columns))
    return text.replace("±", r"$\pm$").replace("∞", r"$\infty$")
