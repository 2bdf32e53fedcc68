"""The report's "Findings about the published figures" section.

A bundled paper file (``compare/published/<paper>.yaml``) may carry a ``findings:`` list: what
the bench found out about one of its tables (for example that the IMDB TF Privacy epsilons of
the library benchmark are reproduced by no accountant input). A report renders every finding
about a table its grid's ``published:`` entries name, so the text is generated from data the
project owns, never pasted into a generated report. A finding::

    findings:
      - table: imdb_table_II              # a table of the same file
        title: one line
        document: docs/findings/x.md      # the write-up, relative to the repository root
        command: the command that computed the figures
        setting: {n_train: 25000, batch_size: 64, noise_multiplier: 0.56, delta: 1.0e-5}
        summary: a paragraph
        computed: {columns: [epochs, steps, ...], labels: [...], rows: [[15, ...], ...]}
        one_input_changed: {columns: [...], labels: [...], rows: [...]}   # optional

``labels`` (optional) are the printed column names; numbers are printed as written.
        points: [sentences]
        conclusion: a paragraph

The paper's own epsilons are read from the table (rows ``library``, ``epochs``,
``private: true``), not copied into the finding.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from compare.reporting.published import load_paper, paper_table
from compare.reporting.published_section import LIBRARY_OF
from compare.reporting.section import ReportData, SectionOutput, section
from compare.reporting.tables import markdown_table
from dpcore.errors import ConfigError

FINDING_KEYS = {"table", "title", "document", "command", "setting", "summary", "computed",
                "one_input_changed", "points", "conclusion"}
REQUIRED_KEYS = ("table", "title", "document", "summary", "conclusion")
#: The repository root (the write-ups live under it; an installed package may lack them).
REPOSITORY = Path(__file__).resolve().parents[2]


def findings_for(paper: str, table: str) -> list[dict[str, Any]]:
    """The checked findings of ``paper`` about ``table`` (empty when it has none).

    Raises:
        ConfigError: a finding that is not a mapping, lacks a required key, has an unknown key
            or a ``computed`` / ``one_input_changed`` block whose rows do not match its columns.
    """
    raw = load_paper(paper).get("findings") or []
    if not isinstance(raw, list):
        raise ConfigError(f"paper {paper!r}: 'findings' must be a list, got {raw!r}")
    out = []
    for i, finding in enumerate(raw):
        where = f"paper {paper!r} finding {i}"
        if not isinstance(finding, Mapping):
            raise ConfigError(f"{where} must be a mapping, got {finding!r}")
        missing = [k for k in REQUIRED_KEYS if k not in finding]
        unknown = sorted(set(finding) - FINDING_KEYS, key=str)
        if missing or unknown:
            raise ConfigError(f"{where}: missing {', '.join(missing) or 'nothing'}, unknown "
                              f"{', '.join(map(str, unknown)) or 'nothing'}; keys: "
                              f"{', '.join(sorted(FINDING_KEYS))}")
        for block in ("computed", "one_input_changed"):
            _check_block(where, block, finding.get(block))
        if finding["table"] == table:
            out.append(dict(finding))
    return out


def _check_block(where: str, name: str, block: Any) -> None:
    if block is None:
        return
    columns = block.get("columns") if isinstance(block, Mapping) else None
    rows = block.get("rows") if isinstance(block, Mapping) else None
    labels = block.get("labels", columns) if isinstance(block, Mapping) else None
    if not isinstance(columns, list) or not isinstance(rows, list) or not all(
            isinstance(r, list) and len(r) == len(columns) for r in rows) or not (
            isinstance(labels, list) and len(labels) == len(columns)):
        raise ConfigError(f"{where}: {name} must be {{columns: [...], labels: [...], rows: "
                          "[[...], ...]}} with one label and one value per column in every "
                          "row")


def epsilon_table(paper: str, finding: Mapping[str, Any]) -> pd.DataFrame:
    """The finding's ``computed`` rows (epsilons to 3 decimals, steps with thousands
    separators) with the paper's printed epsilon of each library and epoch count set before
    them, all as text."""
    block = finding["computed"]
    table = paper_table(paper, str(finding["table"]))
    printed: dict[tuple[str, Any], Any] = {}
    col = table.columns.index
    for row in table.rows:
        if row[col("private")] is True:
            printed[(row[col("library")], row[col("epochs")])] = row[col("epsilon")]
    label_of = dict(zip(block["columns"], block.get("labels", block["columns"]),
                        strict=True))
    rows = []
    for values in block["rows"]:
        record = dict(zip(block["columns"], values, strict=True))
        epochs = record.pop("epochs")
        shown: dict[str, str] = {"epochs": str(epochs)}
        if "steps" in record:
            shown["steps"] = f"{int(record.pop('steps')):,}"
        for library in ("tf_privacy", "opacus"):
            name = LIBRARY_OF["tf" if library == "tf_privacy" else "torch"]
            value = printed.get((library, epochs))
            shown[f"{name} published"] = "not printed" if value is None else f"{value:.2f}"
        shown.update({str(label_of[k]): f"{v:.3f}" if isinstance(v, float) else str(v)
                      for k, v in record.items()})  # epsilons, to the 3 decimals computed
        rows.append(shown)
    return pd.DataFrame(rows)


def _as_written(value: Any) -> str:
    """A number as the YAML holds it (``6.839``, ``2.0e-3`` -> ``0.002``), not rounded."""
    return str(value)


def document_link(document: str, out: Path) -> str:
    """A Markdown link to the write-up as seen from ``reports/<name>/`` of the repository (where
    committed reports live, so that a report rebuilt anywhere else writes the same link), when
    the repository holds the write-up; else its path in the repository as text. (``out`` is
    kept for the callers; the link no longer depends on it.)"""
    path = REPOSITORY / document
    if path.is_file():
        report_folder = REPOSITORY / "reports" / (out.name or "report")
        return f"[{document}]({Path(os.path.relpath(path, report_folder)).as_posix()})"
    return f"`{document}` (in the dpcompare repository)"


def findings_section(entries: Sequence[Mapping[str, Any]], out: Path) -> list[str]:
    """Markdown lines of every finding about a table the ``published:`` entries name."""
    lines: list[str] = []
    seen: set[tuple[str, str]] = set()
    for entry in entries:
        if entry.get("table") is None:
            continue
        key = (str(entry["paper"]), str(entry["table"]))
        if key in seen:
            continue
        seen.add(key)
        for finding in findings_for(*key):
            lines += _render(key[0], finding, out)
    if lines:
        lines = ["## Findings about the published figures", "", *lines]
    return lines


def _render(paper: str, finding: Mapping[str, Any], out: Path) -> list[str]:
    lines = [f"### {finding['title']}", ""]
    setting = finding.get("setting") or {}
    if setting:
        lines += ["The paper's stated setting: "
                  + ", ".join(f"{k} {v}" for k, v in setting.items()) + ".", ""]
    lines += [" ".join(str(finding["summary"]).split()), ""]
    if finding.get("computed"):
        lines += ["Epsilon of the stated setting (the paper's figures as printed in "
                  f"{paper} {finding['table']}):", "",
                  markdown_table(epsilon_table(paper, finding)), ""]
    if finding.get("one_input_changed"):
        block = finding["one_input_changed"]
        frame = pd.DataFrame([[_as_written(v) for v in row] for row in block["rows"]],
                             columns=[str(c) for c in block.get("labels", block["columns"])])
        lines += ["The one input that, changed alone, gives each TF Privacy figure:", "",
                  markdown_table(frame), ""]
    lines += [f"- {' '.join(str(p).split())}" for p in finding.get("points") or []]
    if finding.get("points"):
        lines.append("")
    lines += [" ".join(str(finding["conclusion"]).split()), ""]
    source = f"Write-up: {document_link(str(finding['document']), out)}"
    if finding.get("command"):
        source += f"; figures computed by `{finding['command']}`"
    return lines + [source + ".", ""]


@section("findings")
def findings(data: ReportData) -> SectionOutput:
    """The write-ups' findings of the published entries (:func:`findings_section`; links
    relative to ``reports/<folder>/``)."""
    return SectionOutput(findings_section(data.context.published, Path(data.folder)))

__all__ = ["FINDING_KEYS", "document_link", "epsilon_table", "findings", "findings_for",
           "findings_section"]
