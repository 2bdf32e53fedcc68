"""Every committed report's ``dpcompare report --latex`` tables are paper-ready.

The tables of each report folder with records are written (:func:`compare.latex.
write_latex_tables`, what ``dpcompare report --latex`` calls after rendering; a committed
report equals its rebuild, tests/compare/test_report_rebuild.py) into a temporary folder.
Always checked, on the source: ASCII only, one label per table named after its report and
unique across all reports, a caption naming the interval shown, the collapsed runs counted
where some run collapsed, no internal keys in the published tables, delta in scientific
notation and no ``inf`` or ``nan``. Where ``pdflatex`` is installed, each report's tables are
compiled in a plain ``article`` with ``booktabs`` and ``graphicx`` (a TeX Live with
``texlive-latex-base`` and ``texlive-latex-recommended`` has both); without it the compile test
is skipped and says why.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from compare.latex import write_latex_tables
from compare.records import has_records, read_records

REPORTS = Path(__file__).resolve().parents[2] / "reports"
NAMES = sorted(p.name for p in REPORTS.iterdir() if p.is_dir() and has_records(p))

#: How a caption names what its figures carry (compare.latex.interval_caption and the
#: privacy table's "No interval").
INTERVAL_WORDS = ("bootstrap interval", "Wilson interval", "no interval", "No interval")


@pytest.fixture(scope="module")
def latex(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    """Report name -> {file name: LaTeX source} of every committed report with records."""
    root = tmp_path_factory.mktemp("latex")
    out: dict[str, dict[str, str]] = {}
    for name in NAMES:
        paths = write_latex_tables(REPORTS / name, root / name)
        out[name] = {p.name: p.read_text(encoding="utf-8") for p in paths}
    return out


def _labels(text: str) -> list[str]:
    return re.findall(r"\\label\{([^}]*)\}", text)


def _body_rows(text: str) -> list[list[str]]:
    rows = []
    for block in text.split(r"\midrule")[1:]:
        body = block.split(r"\bottomrule")[0]
        rows += [[c.strip() for c in line.strip().removesuffix("\\\\").split("&")]
                 for line in body.strip().split("\\\\\n") if line.strip()]
    return rows


def test_every_report_with_records_is_covered() -> None:
    assert len(NAMES) >= 10 and "demo" in NAMES


@pytest.mark.parametrize("name", NAMES)
def test_the_source_is_paper_ready(name: str, latex: dict[str, dict[str, str]]) -> None:
    files = latex[name]
    assert {"accuracy.tex"} <= set(files)
    for file, text in files.items():
        non_ascii = sorted({c for c in text if not c.isascii()})
        assert not non_ascii, f"{name}/{file}: non-ASCII {non_ascii} breaks plain pdflatex"
        tables = text.count(r"\begin{table}")
        labels = _labels(text)
        assert len(labels) == tables >= 1
        assert all(label.startswith(f"tab:{name}-{file[:-4]}") for label in labels), labels
        captions = re.findall(r"\\caption\{(.*)\}", text)
        assert len(captions) == tables
        for caption in captions:
            assert any(word in caption for word in INTERVAL_WORDS), f"{name}/{file}: {caption}"
        cells = [cell for row in _body_rows(text) for cell in row]
        assert not [c for c in cells if re.search(r"\b(inf|nan|NaN)\b", c)], f"{name}/{file}"
        assert not [c for c in cells if re.fullmatch(r"0\.0+", c)], f"{name}/{file}: 0.000"


@pytest.mark.parametrize("name", NAMES)
def test_collapsed_runs_are_marked(name: str, latex: dict[str, dict[str, str]]) -> None:
    summary = pd.read_csv(REPORTS / name / "summary.csv")
    accuracy = latex[name]["accuracy.tex"]
    collapsed = summary["collapsed"].fillna(0).astype(int)
    if collapsed.sum() == 0:
        assert "No run collapsed." in accuracy and "Collapsed runs" not in accuracy
        return
    assert "Collapsed runs" in accuracy
    marks = [row[-1] for row in _body_rows(accuracy)]
    expected = [f"{c} of {s}" if c else "" for c, s in zip(collapsed, summary["seeds"],
                                                            strict=True)]
    assert marks == expected


@pytest.mark.parametrize("name", NAMES)
def test_privacy_and_published_tables_speak_to_a_reader(
        name: str, latex: dict[str, dict[str, str]]) -> None:
    files = latex[name]
    if "privacy.tex" in files:
        assert re.search(r"\$(\d(\.\d+)? \\times )?10\^\{-\d+\}\$", files["privacy.tex"]), \
            "delta in scientific notation"
    published = files.get("published.tex")
    entries = [e for e in read_records(REPORTS / name).context.published if e.get("table")]
    assert (published is not None) == bool([e for e in entries if e.get("cells")])
    if published is None:
        return
    for entry in entries:
        for key in {entry["paper"], entry["table"],
                    *(cell["column"] for cell in entry["cells"])}:
            if "_" in key:  # a key of the bundled file, not a word
                assert key.replace("_", r"\_") not in published, f"{name}: internal key {key}"
    assert "Paper's figure" in published and "Ours $-$ published" in published


def test_labels_are_unique_across_reports(latex: dict[str, dict[str, str]]) -> None:
    labels = [label for files in latex.values() for text in files.values()
              for label in _labels(text)]
    assert len(labels) == len(set(labels))


def _pdflatex() -> str:
    found = shutil.which("pdflatex")
    if found is None:
        pytest.skip("pdflatex is not installed, so the tables are not compiled (the source "
                    "checks above still run); on Debian/Ubuntu: apt-get install "
                    "--no-install-recommends texlive-latex-base texlive-latex-recommended")
    return found


@pytest.mark.parametrize("name", NAMES)
def test_the_tables_compile_with_plain_pdflatex(name: str, latex: dict[str, dict[str, str]],
                                                tmp_path: Path) -> None:
    pdflatex = _pdflatex()
    for file, text in latex[name].items():
        (tmp_path / file).write_text(text, encoding="ascii")
    inputs = "\n".join(f"\\input{{{file}}}" for file in sorted(latex[name]))
    (tmp_path / "paper.tex").write_text(
        "\\documentclass{article}\n\\usepackage{booktabs, graphicx}\n\\begin{document}\n"
        f"{inputs}\n\\end{{document}}\n", encoding="ascii")
    done = subprocess.run([pdflatex, "-interaction=nonstopmode", "-halt-on-error",
                           "paper.tex"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, check=False)
    log = (tmp_path / "paper.log").read_text(encoding="latin-1")
    assert done.returncode == 0, f"{name}: pdflatex failed:\n{done.stdout[-3000:]}"
    assert (tmp_path / "paper.pdf").is_file()
    assert "multiply defined" not in log
    assert "Overfull \\hbox" not in log  # wide tables are scaled to the line
