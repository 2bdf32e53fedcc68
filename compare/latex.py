"""Paper-ready LaTeX tables of a report (``dpcompare report --latex``).

Written from the report's own CSV tables and records (so a table in the paper is the table in
the report) into ``REPORT/latex/``, one file per table (:data:`LATEX_TABLES`):

* ``accuracy.tex``: per setting and backend, the seeds, test accuracy and AUC with the
  interval the report shows, epsilon, and the collapsed runs (``summary.csv``, ``runs.csv``);
* ``privacy.tex``: per DP-SGD setting and backend, noise multiplier, steps, sampling rate,
  delta and every epsilon: the shared accountant (RDP, PLD), the libraries' own and the
  proved one (``epsilon.csv``);
* ``published.tex``: per paper table a report compares with, the published figures beside
  ours (the report's records: each ``published:`` entry, as the report's "Published vs ours").

Guarantees, for a document with ``\\usepackage{booktabs, graphicx}`` compiled by plain
``pdflatex``: the source is ASCII only (every other character is written as a LaTeX command:
:func:`latex_text`), columns have human headings, each ``\\label`` is
``tab:<report>-<table>`` (unique across the reports of one paper), every caption names the
interval its figures carry (or that there is none), collapsed runs are counted in a column,
a table wider than the line is scaled down to it, delta is written in scientific notation and
infinity as ``$\\infty$``. Nothing is compiled here (``tests/compare/test_latex_reports.py``
compiles every committed report's tables).
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from dpcore.errors import DataError
from dpcore.io import atomic_write_text
from dpcore.mechanisms import privatises_images
from dpcore.registry import Registry

__all__ = ["BACKEND_NAMES", "LATEX_FOLDER", "LATEX_TABLES", "LatexTable", "latex_interval",
           "latex_number", "latex_scientific", "latex_signed", "latex_text", "report_slug",
           "to_booktabs", "write_latex_tables"]

LATEX_FOLDER = "latex"
#: RunResult backend -> the framework name the tables print.
BACKEND_NAMES = {"tf": "TensorFlow", "torch": "PyTorch"}
#: Runs of fewer seeds than this: the bootstrap interval over seeds is said to be narrow.
FEW_SEEDS = 5
#: What "collapsed" means, for the captions (the rule of :mod:`compare.reporting.collapse`).
COLLAPSED_MEANING = ("Collapsed runs predict (almost) one class or are not above the "
                     "majority-class rate (one-sided binomial test at 5\\%); their figures "
                     "describe no working classifier.")


@dataclass(frozen=True)
class LatexTable:
    """One ``table`` environment: ``cells`` and ``headings`` are LaTeX source already
    (:func:`latex_text`, :func:`latex_number`), ``align`` one ``l``/``r`` per column, ``key``
    the label's last part (``tab:<report>-<key>``)."""

    key: str
    headings: tuple[str, ...]
    cells: tuple[tuple[str, ...], ...]
    align: str
    caption: str


#: File name -> the function that builds its tables from a report folder (an empty list:
#: none), in registration order: ``@LATEX_TABLES.register("accuracy.tex")``.
LATEX_TABLES: Registry[str, Callable[[Path], list[LatexTable]]] = Registry(
    "LaTeX table builders", key="LaTeX file")


def write_latex_tables(report_dir: str | Path, out_dir: str | Path | None = None
                       ) -> list[Path]:
    """Write the LaTeX tables of the report in ``report_dir`` (see the module docstring) into
    ``(out_dir or report_dir)/latex``; a table whose source the report lacks is not written.
    Labels are named after ``report_dir``'s folder (:func:`report_slug`). Returns the paths
    written.

    Raises:
        DataError: ``report_dir`` holds no ``summary.csv`` (no report with finished runs).
    """
    folder = Path(report_dir)
    if not (folder / "summary.csv").is_file():
        raise DataError(f"{folder} holds no summary.csv; valid: a report folder with finished "
                        "runs (written by dpcompare compare or dpcompare report)")
    slug = report_slug(folder)
    target = Path(out_dir or folder) / LATEX_FOLDER
    written = []
    for name, builder in LATEX_TABLES.items():
        tables = builder(folder)
        if not tables:
            continue
        target.mkdir(parents=True, exist_ok=True)
        text = (f"% {Path(name).stem} tables of the report {slug} (dpcompare report --latex);"
                " needs \\usepackage{booktabs, graphicx}\n"
                + "\n".join(to_booktabs(table, f"tab:{slug}-{table.key}") for table in tables))
        atomic_write_text(target / name, text)
        written.append(target / name)
    return written


def report_slug(folder: Path) -> str:
    """The report's name as a label part: its folder name, lower case, every run of other
    characters than ASCII letters and digits as one ``-`` (``reports/mnist-tuned`` ->
    ``mnist-tuned``)."""
    ascii_name = unicodedata.normalize("NFKD", folder.resolve().name)
    return re.sub(r"[^a-z0-9]+", "-", ascii_name.lower()).strip("-") or "report"


def to_booktabs(table: LatexTable, label: str) -> str:
    """``table`` as a booktabs ``table`` environment (``\\toprule``, ``\\midrule``,
    ``\\bottomrule``; pandas' ``Styler.to_latex``) with its caption and ``label``."""
    frame = pd.DataFrame(list(table.cells), columns=list(table.headings))
    styler = frame.style.hide(axis="index")
    text = styler.to_latex(hrules=True, caption=table.caption, label=label, position="htbp",
                           position_float="centering", column_format=table.align)
    return text.replace("\\begin{tabular}", SHRINK_TO_FIT + "\\begin{tabular}", 1) \
        .replace("\\end{tabular}\n", "\\end{tabular}}\n", 1)


#: Opens a box that scales a tabular down to the line width when it is wider (graphicx's
#: ``\resizebox``, whose size argument may use the box's natural ``\width``), and leaves a
#: narrower one at its size; :func:`to_booktabs` closes it after ``\end{tabular}``.
SHRINK_TO_FIT = "\\resizebox{\\ifdim\\width>\\linewidth\\linewidth\\else\\width\\fi}{!}{%\n"


# --- text and numbers ------------------------------------------------------------------------

#: Characters LaTeX reserves, as text-mode commands.
_SPECIALS = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
             "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}",
             "^": r"\textasciicircum{}", "<": r"\textless{}", ">": r"\textgreater{}",
             "|": r"\textbar{}"}
#: Non-ASCII characters of labels, notes and paper sources, as ASCII LaTeX.
_UNICODE = {"·": r"$\cdot$", "–": "--", "—": "---", "−": r"$-$", "±": r"$\pm$",
            "∞": r"$\infty$", "×": r"$\times$", "≤": r"$\leq$", "≥": r"$\geq$",
            "≈": r"$\approx$", "→": r"$\rightarrow$", "…": r"\ldots{}", "°": r"$^\circ$",
            "ε": r"$\varepsilon$", "δ": r"$\delta$", "σ": r"$\sigma$", "β": r"$\beta$",
            "α": r"$\alpha$", "λ": r"$\lambda$", "μ": r"$\mu$", "µ": r"$\mu$",
            "‘": "`", "’": "'", "“": "``", "”": "''", "\u00a0": "~", "²": r"$^2$"}


def latex_text(value: Any) -> str:
    """``value`` as LaTeX text: LaTeX's special characters escaped, the known non-ASCII
    characters written as LaTeX (``·`` -> ``$\\cdot$``, ``ε`` -> ``$\\varepsilon$``...), the
    word ``inf`` as ``$\\infty$``, accented letters without their accent, double quotes as
    ``` `` ``` and ``''``. The result
    is ASCII: a character none of these covers becomes ``?``. (Written by hand: pandas'
    LaTeX escaping leaves non-ASCII characters, which plain pdflatex rejects.)"""
    text = re.sub(r'"([^"]*)"', "\u201c\\1\u201d", str(value))
    text = re.sub(r"(?<![A-Za-z])inf(?![A-Za-z])", "\u221e", text)  # eps=inf -> eps=$\infty$
    out = []
    for char in text:
        if char in _SPECIALS:
            out.append(_SPECIALS[char])
        elif char.isascii():
            out.append(char)
        elif char in _UNICODE:
            out.append(_UNICODE[char])
        else:
            bare = unicodedata.normalize("NFKD", char).encode("ascii", "ignore").decode()
            out.append(bare or "?")
    return "".join(out)


def latex_scientific(value: float, digits: int = 2) -> str:
    """``value`` in scientific notation as math: ``1e-5`` -> ``$10^{-5}$``, ``2.5e-4`` ->
    ``$2.5 \\times 10^{-4}$`` (``digits`` significant digits, trailing zeros dropped)."""
    mantissa, exponent = f"{float(value):.{digits - 1}e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".") if "." in mantissa else mantissa
    power = f"10^{{{int(exponent)}}}"
    return f"${power}$" if mantissa == "1" else f"${mantissa} \\times {power}$"


def latex_number(value: Any, digits: int = 4) -> str:
    """A number cell: ``--`` when missing, ``$\\infty$`` for infinity, 0 as ``0``, integers
    as such, others to ``digits`` significant digits (scientific notation below 1e-3 or from
    1e6), the minus sign as ``$-$``."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return "--"
    number = float(value)
    if math.isnan(number):
        return "--"
    if math.isinf(number):
        return r"$\infty$" if number > 0 else r"$-\infty$"
    if number == 0:
        return "0"
    if abs(number) < 1e-3 or abs(number) >= 1e6:
        return latex_scientific(number, digits)
    text = f"{number:.{digits}g}" if number != round(number) or abs(number) < 1e4 \
        else str(int(round(number)))
    return text.replace("-", "$-$")


def latex_interval(mean: float, low: float, high: float, digits: int = 3) -> str:
    """``mean [low, high]`` with ``digits`` decimals, or the mean alone without an interval
    (NaN bounds); ``--`` without a mean."""
    if mean is None or math.isnan(float(mean)):
        return "--"

    def number(v: float) -> str:
        return f"{float(v):.{digits}f}".replace("-", "$-$")

    if low is None or high is None or math.isnan(float(low)) or math.isnan(float(high)):
        return number(mean)
    return f"{number(mean)} [{number(low)}, {number(high)}]"


def latex_signed(value: float, digits: int = 2) -> str:
    """A difference with its sign and ``digits`` decimals (``+0.07``, ``$-$1.59``), ``--``
    when missing."""
    if value is None or math.isnan(float(value)):
        return "--"
    return f"{float(value):+.{digits}f}".replace("-", "$-$")


def _backend(name: Any) -> str:
    return latex_text(BACKEND_NAMES.get(str(name), str(name)))


def _collapsed_cell(collapsed: int, seeds: int) -> str:
    return f"{collapsed} of {seeds}" if collapsed else ""


# --- accuracy.tex --------------------------------------------------------------------------------

def interval_caption(seeds: Sequence[int], test_sizes: Sequence[Any] = (), *,
                     wilson: bool = True) -> str:
    """What the figures' intervals are, for a caption, from the seeds of each row: the 95%
    percentile bootstrap over seeds; for a setting of one seed, with ``wilson``, the 95%
    Wilson interval of its test accuracy over its test set (``test_sizes``: the runs' test-set
    sizes, named when they are one) and no interval for the other figures, else none."""
    values = sorted({int(s) for s in seeds})
    sizes = sorted({int(n) for n in test_sizes if not pd.isna(n)})
    test_set = f"the {sizes[0]} test images" if len(sizes) == 1 else "the test set"
    one = (f"test accuracy with its 95\\% Wilson interval over {test_set} (the test set's "
           "sampling error, not the run's randomness), the other figures without an interval"
           ) if wilson else "no interval"
    boot = "95\\% percentile bootstrap interval over seeds"
    if values == [1]:
        return f"One seed per setting: {one}."
    few = ""
    if min(values) < FEW_SEEDS and max(values) > 1:
        few = (f" With fewer than {FEW_SEEDS} seeds the bootstrap interval cannot leave the "
               "range of the seeds' values and understates the uncertainty.")
    if len(values) == 1:
        return f"Mean over {values[0]} seeds with its {boot}.{few}"
    tail = f"; a setting of one seed: {one}" if values[0] == 1 else ""
    return f"Mean over the seeds in column Seeds with its {boot}{tail}.{few}"


def _read(folder: Path, name: str) -> pd.DataFrame:
    path = folder / name
    return pd.read_csv(path) if path.is_file() else pd.DataFrame()


@LATEX_TABLES.register("accuracy.tex")
def accuracy_tables(folder: Path) -> list[LatexTable]:
    """Test accuracy and AUC per setting and backend, epsilon and collapsed runs."""
    summary = _read(folder, "summary.csv")
    if summary.empty:
        return []
    runs = _read(folder, "runs.csv")
    has_auc = "auc_mean" in summary and summary["auc_mean"].notna().any()
    any_collapsed = "collapsed" in summary and summary["collapsed"].fillna(0).sum() > 0
    headings = ["Setting", "Backend", "Seeds", "Test accuracy", *(["AUC"] if has_auc else []),
                "$\\varepsilon$", *(["Collapsed runs"] if any_collapsed else [])]
    cells = []
    for _, row in summary.iterrows():
        line = [latex_text(row["setting"]), _backend(row["backend"]), str(int(row["seeds"])),
                latex_interval(row["accuracy_mean"], row.get("accuracy_low"),
                               row.get("accuracy_high"))]
        if has_auc:
            line.append(latex_interval(row["auc_mean"], row.get("auc_low"), row.get("auc_high")))
        line.append(latex_number(row.get("epsilon_mean")))
        if any_collapsed:
            line.append(_collapsed_cell(int(row.get("collapsed") or 0), int(row["seeds"])))
        cells.append(tuple(line))
    mechanisms = set(summary["mechanism"].astype(str)) if "mechanism" in summary else set()
    local = ("local DP runs (their per-image epsilon is in the report's local-DP table) and "
             if any(privatises_images(m) for m in mechanisms) else "")
    caption = (f"Test accuracy{' and AUC' if has_auc else ''} per setting and backend. "
               + interval_caption(summary["seeds"], runs.get("n_test", ()))
               + " $\\varepsilon$: the shared accountant's epsilon (RDP) of the setting; "
               f"$\\infty$ for {local}non-private runs. "
               + (COLLAPSED_MEANING if any_collapsed else "No run collapsed."))
    return [LatexTable("accuracy", tuple(headings), tuple(cells),
                       "ll" + "r" * (len(headings) - 2), caption)]


# --- privacy.tex --------------------------------------------------------------------------------

#: epsilon.csv column -> (heading, digits); a column no row has is left out.
PRIVACY_COLUMNS: dict[str, tuple[str, int]] = {
    "noise_multiplier": ("$\\sigma$", 4), "steps": ("Steps", 6), "sampling_rate": ("$q$", 4),
    "delta": ("$\\delta$", 2), "epsilon_rdp": ("RDP", 4), "epsilon_pld": ("PLD", 4),
    "epsilon_opacus_rdp": ("Opacus RDP", 4), "epsilon_opacus_prv": ("Opacus PRV", 4),
    "epsilon_tf_privacy": ("TF Privacy", 4), "epsilon_proved": ("Proved", 4)}


def _over_seeds(values: pd.Series, digits: int) -> str:
    """One setting's value over its seeds: the value, or ``low--high`` when the seeds differ
    at ``digits`` significant digits (a per-seed calibration)."""
    shown = list(dict.fromkeys(latex_number(v, digits) for v in values))
    if len(shown) == 1:
        return shown[0]
    finite = values.dropna().astype(float)
    return f"{latex_number(finite.min(), digits)}--{latex_number(finite.max(), digits)}"


@LATEX_TABLES.register("privacy.tex")
def privacy_tables(folder: Path) -> list[LatexTable]:
    """Per DP-SGD setting and backend: sigma, steps, q, delta and every epsilon."""
    table = _read(folder, "epsilon.csv")
    if table.empty or "noise_multiplier" not in table:
        return []
    table = table[table["noise_multiplier"].fillna(0) > 0]
    if table.empty:
        return []
    columns = [c for c in PRIVACY_COLUMNS if c in table and table[c].notna().any()]
    cells = []
    varies = False
    for (setting, backend), group in table.groupby(["setting", "backend"], sort=False):
        shown = [_over_seeds(group[c], PRIVACY_COLUMNS[c][1]) for c in columns]
        varies = varies or any("--" in s and s != "--" for s in shown)
        cells.append((latex_text(setting), _backend(backend), *shown))
    opacus = [name for column, name in (("epsilon_opacus_rdp", "RDP"),
                                        ("epsilon_opacus_prv", "PRV")) if column in columns]
    libraries = ([f"Opacus: {' and '.join(opacus)}"] if opacus else []) + (
        ["TF Privacy: compute\\_dp\\_sgd\\_privacy, RDP"]
        if "epsilon_tf_privacy" in columns else [])
    caption = ("Privacy of each DP-SGD setting and backend: noise multiplier $\\sigma$ (noise "
               "standard deviation over the clip norm), steps, sampling rate $q$ and $\\delta$; "
               "epsilon from the shared accountant (dp\\_accounting: RDP, PLD)"
               + (f", from each library's own accountant for the same run "
                  f"({'; '.join(libraries)}; -- where that library did not run)"
                  if libraries else "")
               + (" and the proved epsilon (the tightest bound known for what ran; -- where "
                  "none is known)" if "epsilon_proved" in columns else "")
               + ". " + ("Where the seeds of a setting differ (a per-seed calibration): the "
                         "range over seeds. " if varies else "Every seed of a setting has the "
                         "same figures. ")
               + "No interval: these are computed, not measured.")
    headings = ("Setting", "Backend", *(PRIVACY_COLUMNS[c][0] for c in columns))
    return [LatexTable("privacy", headings, tuple(cells), "ll" + "r" * len(columns),
                       caption)]


# --- published.tex ------------------------------------------------------------------------------

#: Words of the bundled papers' row values and column names (their YAML keys, not the bench's
#: mechanism names), as the tables print them: (key word, printed word) pairs.
PAPER_WORDS: tuple[tuple[str, str], ...] = (
    ("opacus", "Opacus"), ("tf_privacy", "TF Privacy"), ("auc", "AUC"), ("ldp", "LDP"),
    ("dpsgd", "DP-SGD"), ("epsilon", "ε"), ("eps", "ε"), ("pct", "(%)"))
_WORDS = dict(PAPER_WORDS)


def human_name(key: Any) -> str:
    """A paper table's column name or row value for a reader (unicode; :func:`latex_text`
    makes it LaTeX): ``accuracy_pct`` -> ``accuracy (%)``, ``eps_0.5`` -> ``ε = 0.5``,
    ``ldp_b1`` -> ``LDP b = 1``, ``tf_privacy`` -> ``TF Privacy``."""
    text = str(key)
    if text in _WORDS:
        return _WORDS[text]
    match = re.fullmatch(r"eps_(.+)", text)
    if match:
        value = match.group(1)
        return f"ε = {'∞' if value == 'inf' else value}"
    match = re.fullmatch(r"([a-z]+)_b(\d+)", text)
    if match:
        return f"{_WORDS.get(match.group(1), match.group(1))} b = {match.group(2)}"
    return " ".join(_WORDS.get(word, word) for word in text.split("_"))


def paper_cell_name(row: Mapping[str, Any], column: str) -> str:
    """The paper's cell for a reader: its row (``True`` values by their column's name,
    ``False`` as ``non-`` it, numbers before their column's name, words alone) and its
    column: ``{library: opacus, epochs: 15, private: true}``, ``accuracy_pct`` ->
    ``Opacus, 15 epochs, private: accuracy (%)``."""
    parts = []
    for key, value in row.items():
        name = human_name(key)
        if isinstance(value, bool):
            parts.append(name if value else f"non-{name}")
        elif isinstance(value, int | float):
            parts.append(f"{value:g} {name}")
        else:
            parts.append(human_name(value))
    return f"{', '.join(parts)}: {human_name(column)}"


@LATEX_TABLES.register("published.tex")
def published_tables(folder: Path) -> list[LatexTable]:
    """One table per ``published:`` entry with a table: the paper's cells beside ours."""
    from compare.records import has_records, read_records
    from compare.reporting.frames import results_frame
    from compare.reporting.published import load_paper, paper_table
    from compare.reporting.published_section import cell_figures
    from compare.reporting.reproduction import CELL_RULE

    if not has_records(folder):
        return []
    records = read_records(folder)
    frame = results_frame(records.results)
    entries = [e for e in records.context.published if e.get("table") and e.get("cells")]
    tables = []
    for entry in entries:
        figures = cell_figures(entry, frame)
        if not figures:
            continue
        seeds = [f.ours.n for f in figures if f.ours.n]
        mixed = len(set(seeds)) > 1
        collapsed = any(f.collapsed for f in figures)
        headings = ["Paper's figure", "Published", "Ours", "Ours $-$ published", "Our setting",
                    *(["Seeds"] if mixed else []), *(["Collapsed runs"] if collapsed else []),
                    "Verdict"]
        cells = []
        for f in figures:
            line = [latex_text(paper_cell_name(f.cell["row"], f.cell["column"])),
                    "not reported" if f.printed is None else latex_number(f.printed),
                    "not run" if not f.ours.n else latex_interval(f.ours.mean, f.ours.low,
                                                                  f.ours.high, 2),
                    latex_signed(f.difference, 2), latex_text(f.label)]
            if mixed:
                line.append(str(f.ours.n) if f.ours.n else "--")
            if collapsed:
                line.append(_collapsed_cell(f.collapsed, f.ours.n))
            word, detail = f.verdict
            line.append(latex_text(word if word == "reproduced" else f"{word}: {detail}"))
            cells.append(tuple(line))
        table = paper_table(str(entry["paper"]), str(entry["table"]))
        source = " ".join(str(load_paper(table.paper).get("source", "")).split())
        interval = interval_caption(seeds or [1], wilson=False)
        caption = (f"Published figures beside ours. Paper: {latex_text(source)} Shown: its "
                   f"{latex_text(human_name(table.name))}, as printed (never corrected); ours "
                   f"in the paper's unit. {interval} "
                   + (COLLAPSED_MEANING + " " if collapsed else "")
                   + latex_text(CELL_RULE.replace("*", "")) + " "
                   + "The report lists the differences of setting.")
        key = "published" if len(entries) == 1 else \
            f"published-{re.sub(r'[^a-z0-9]+', '-', table.name.lower()).strip('-')}"
        tables.append(LatexTable(key, tuple(headings), tuple(cells),
                                 "l" + "r" * 3 + "l" + "r" * (len(headings) - 6) + "l",
                                 caption))
    return tables
