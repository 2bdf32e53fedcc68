"""The citable-report contract: what a committed report must say before a reviewer can cite it.

Each check is a function of a :class:`ContractReport` (a committed report folder rendered
from its records as regenerating it would: the bundled preset's current description, notes
and ``published:`` entries, the grid's runs taken from every committed report's records)
returning the problems it finds, one line each; none means the report meets that part:

* ``five_seeds``: every setting of the report has at least
  :data:`~compare.reporting.stats.MIN_SEEDS` finished seeds on each backend it ran, so that
  its claims can rest on intervals;
* ``corrected``: the backends' verdicts are the Holm-corrected ones
  (:func:`~compare.reporting.stats.corrected_verdict` of the Holm-adjusted p-values, which
  the check recomputes), no verdict below 5 seeds, and the headline and the backends section
  say they are corrected;
* ``published_verdicts``: every "Published vs ours" table gives a verdict per row and ends in
  one, under the stated rule, and the headline carries each table's verdicts and each trend's;
* ``privacy``: a report with private runs shows claimed, proved and audited epsilon (the
  privacy table) and its headline says what was proved and what was audited;
* ``labels``: our runs are named by what ran (the harmonised step on a backend, or a
  library's own recipe), never by a library's name alone;
* ``no_issue_references``: the text cites no issue of the tracker;
* ``baselines``: in every panel and backend, a non-private setting is a baseline: none of its
  runs collapsed and its mean test accuracy is not below the best DP-SGD setting's;
* ``regenerated``: the records' context (description, notes, published figures) is the
  preset's current one, so the committed report.md says what the code would write now.

Figures quoted in prose (preset notes, the README, docs) are checked by
``tests/test_quoted_figures.py``.
"""

from __future__ import annotations

import dataclasses
import math
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from compare.grid import Grid, expand_grid, load_preset, preset_names
from compare.records import committed_records, read_records, record_folders_beside
from compare.report_context import ReportContext
from compare.reporting.labels import LIBRARY_OF, LIBRARY_RECIPE
from compare.reporting.pipeline import report_data, section_named
from compare.reporting.section import ReportData
from compare.reporting.stats import MIN_SEEDS, corrected_verdict, holm_adjusted
from dpcore.mechanisms import is_non_private, noises_gradients

#: The sections whose text the contract reads (rendered without the figure-heavy ones).
TEXT_SECTIONS = ("headline", "published", "findings", "privacy", "attribution", "backends",
                 "notes")


@dataclass(frozen=True)
class ContractReport:
    """A report folder rendered for the contract: its name, the report data, the markdown of
    :data:`TEXT_SECTIONS` by section name, the grid (None: no bundled preset of that name)
    and the records' own context (as committed)."""

    name: str
    data: ReportData
    sections: Mapping[str, str]
    grid: Grid | None
    committed_context: ReportContext
    missing: tuple[str, ...] = ()  #: the grid's run ids with no committed record

    @property
    def text(self) -> str:
        return "\n".join(self.sections.values())


def render_for_contract(folder: str | Path) -> ContractReport:
    """``folder`` (a committed report) as regenerating it would render it: with the bundled
    preset of the folder's name, its description, notes, ``published:`` entries, labels and
    axis order, and the grid's runs as every committed report's records hold them (what
    ``dpcompare compare --preset NAME --no-train`` reads); without one, its records as
    committed. Only :data:`TEXT_SECTIONS` are rendered."""
    from compare.reporting.audited_column import companion_view
    from dpcore.results import run_id
    from dpcore.scoring import rescored_results

    folder = Path(folder)
    records = read_records(folder)
    name = folder.name
    grid = expand_grid(load_preset(name)) if name in preset_names() else None
    results, context, missing = list(records.results), records.context, ()
    if grid is not None:
        runs = {run_id(c.config.config_hash, b): c for c, b in grid.runs()}
        known = committed_records(record_folders_beside(folder))
        results = [known[r] for r in sorted(runs) if r in known]
        missing = tuple(sorted(r for r in runs if r not in known))
        context = dataclasses.replace(
            context, description=grid.description, notes=grid.notes,
            published=tuple(grid.published), run_ids=frozenset(runs),
            axis_order=grid.axis_names,
            labels={r: dict(c.labels) for r, c in runs.items()},
            audit_companions=grid.companion_runs() or None)
        from compare.report import resolve_context

        results, context = resolve_context(results, context)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # re-scoring notes: the rebuild test's business
        scored, _ = rescored_results(sorted(results, key=lambda r: r.run_id))
    view = companion_view(scored, context)
    data = report_data(view.results, view.context, records.montages, folder=name,
                       weights=records.weights, companions=view.companions)
    if data.frame.empty:  # no run of the grid is committed: no text to render or check;
        # five_seeds names the missing runs
        return ContractReport(name, data, dict.fromkeys(TEXT_SECTIONS, ""), grid,
                              records.context, missing)
    sections = {s: "\n".join(section_named(s).render(data).lines) for s in TEXT_SECTIONS}
    return ContractReport(name, data, sections, grid, records.context, missing)


# -- the checks --------------------------------------------------------------------------------
def five_seeds(report: ContractReport) -> list[str]:
    if report.data.frame.empty:
        return [f"none of the grid's {len(report.missing)} run(s) has a committed record "
                f"(e.g. {report.missing[0] if report.missing else '-'}): nothing to report "
                "until they train"]
    done = report.data.frame[report.data.frame["status"] == "finished"]
    counts = done.groupby(["setting", "backend"])["seed"].nunique()
    few = counts[counts < MIN_SEEDS]
    problems = [f"{s} ({b}): {n} seed{'s' if n != 1 else ''}, fewer than {MIN_SEEDS}"
                for (s, b), n in few.items()]
    if report.missing:
        problems.append(f"{len(report.missing)} run(s) of the grid have no committed record "
                        f"(e.g. {report.missing[0]}): the report lacks them until they train")
    return problems


def corrected(report: ContractReport) -> list[str]:
    paired = report.data.paired
    if paired.empty:
        return []
    problems = []
    if "p_holm" not in paired:
        return ["the paired table has no Holm-adjusted p-values"]
    expected = holm_adjusted(paired["p_value"].to_numpy(float))
    equivalence = holm_adjusted(paired["equivalence_p"].to_numpy(float))
    for row, p_holm, e_holm in zip(paired.itertuples(), expected, equivalence, strict=True):
        same = (math.isnan(p_holm) and math.isnan(row.p_holm)) or math.isclose(
            p_holm, row.p_holm, rel_tol=1e-9)
        if not same:
            problems.append(f"{row.setting}: Holm p {row.p_holm} is not the adjustment "
                            f"{p_holm} of the table's p-values")
        want = corrected_verdict(int(row.pairs), float(p_holm), float(e_holm),
                                 collapsed=bool(row.collapsed))
        if row.verdict != want:
            problems.append(f"{row.setting}: verdict {row.verdict!r}, the corrected rule "
                            f"gives {want!r}")
    judged = paired[paired["verdict"].isin(["agree", "differ"])]
    if (judged["pairs"] < MIN_SEEDS).any():
        problems.append("a verdict rests on fewer than 5 seeds")
    if not judged.empty:
        for section in ("headline", "backends"):
            if "Holm" not in report.sections.get(section, ""):
                problems.append(f"the {section} gives verdicts without saying they are "
                                "Holm-corrected")
    return problems


_VERDICT_WORDS = ("reproduced", "not reproduced", "not comparable")


def published_verdicts(report: ContractReport) -> list[str]:
    entries = [e for e in report.data.context.published if e.get("table") is not None]
    if not entries:
        return []
    text = report.sections["published"]
    problems = []
    blocks = text.split("Our figure beside each cell:")[1:]
    tables = compared_tables(text)
    if len(blocks) != len(entries):
        problems.append(f"{len(entries)} published table(s), {len(blocks)} compared")
    for block, table in zip(blocks, tables, strict=True):
        for row in table:
            if not row.get("verdict", "").startswith(_VERDICT_WORDS):
                problems.append(f"a row's verdict reads {row.get('verdict')!r}")
        before = block.split("Deviations")[0]
        if "Verdict:" not in before or "Verdict per row:" not in before:
            problems.append("a 'Published vs ours' table does not end in its verdict and rule")
    headline = report.sections["headline"]
    if "Published figures beside ours" not in headline:
        problems.append("the headline does not give the published tables' verdicts")
    if any(e.get("trends") for e in entries) and "Reproduction of the paper's trends" \
            not in headline:
        problems.append("the headline does not give the trends' verdicts")
    return problems


def privacy(report: ContractReport) -> list[str]:
    frame = report.data.frame
    if frame.empty:  # no run to check (five_seeds names the missing ones)
        return []
    done = frame[frame["status"] == "finished"]
    private = done[~done["mechanism"].map(is_non_private).astype(bool)]
    if private.empty:
        return []
    problems = []
    section = report.sections["privacy"]
    if "claimed" not in section or "proved" not in section or "audited" not in section:
        problems.append("private runs without the claimed | proved | audited table")
    if done["mechanism"].map(noises_gradients).astype(bool).any():
        headline = report.sections["headline"]
        if "roved epsilon" not in headline:
            problems.append("the headline does not give the proved epsilon")
        if "audited" not in headline:
            problems.append("the headline does not say what was audited")
    return problems


def compared_tables(published_text: str) -> list[list[dict[str, str]]]:
    """The rows of each "Our figure beside each cell" table of a "Published vs ours" text, as
    header -> cell mappings."""
    tables = []
    for block in published_text.split("Our figure beside each cell:")[1:]:
        lines = []
        for line in block.strip().splitlines():
            if not line.startswith("|"):
                break  # the table ends at its first line that is not a row
            lines.append(line)
        if len(lines) < 2:
            tables.append([])
            continue
        header = [c.strip() for c in lines[0].strip().strip("|").split("|")]
        tables.append([dict(zip(header, (c.strip() for c in line.strip().strip("|")
                                         .split("|")), strict=False)) for line in lines[2:]])
    return tables


def labels(report: ContractReport) -> list[str]:
    frame = report.data.frame
    problems = []
    recipes = set(frame["recipe"].astype(str)) if "recipe" in frame else {"harmonised"}
    for table in compared_tables(report.sections["published"]):
        for row in table:
            label = row.get("our setting", "")
            if "harmonised step" not in label and "own recipe" not in label:
                problems.append(f"a published row does not name what ran: {label!r}")
    if LIBRARY_RECIPE not in recipes:
        for section in ("headline", "backends"):
            text = report.sections.get(section, "")
            for name in ("Opacus minus TF Privacy", *(f"({n})" for n in LIBRARY_OF.values())):
                if name in text:
                    problems.append(f"the {section} labels the harmonised step {name!r}")
    return problems


_ISSUE = re.compile(r"\b[Ii]ssue\s+#?\d+|\b[Ii]ssues?/\d+|#\d{2,}\b")


def no_issue_references(report: ContractReport) -> list[str]:
    text = "\n".join([report.text, report.data.context.description])
    return [f"cites {m.group(0)!r}" for m in _ISSUE.finditer(text)]


def baselines(report: ContractReport) -> list[str]:
    frame = report.data.frame
    if frame.empty:  # no run to check (five_seeds names the missing ones)
        return []
    done = frame[(frame["status"] == "finished") & frame["accuracy"].notna()]
    if "fault" in done:
        done = done[done["fault"].astype(str) == ""]
    problems = []
    for (panel, backend), group in done.groupby(["panel", "backend"], sort=False):
        public = group[group["mechanism"].map(is_non_private).astype(bool)]
        dp = group[group["mechanism"].map(noises_gradients).astype(bool)]
        if public.empty:
            continue
        for setting, runs in public.groupby("setting", sort=False):
            if runs["collapsed"].astype(bool).any():
                problems.append(f"{setting} ({backend}): the non-private baseline has "
                                f"{int(runs['collapsed'].sum())} collapsed run(s)")
        if dp.empty:
            continue
        best_public = public.groupby("setting")["accuracy"].mean().max()
        best_dp = dp.groupby("setting")["accuracy"].mean()
        if best_public < best_dp.max():
            problems.append(f"{panel} ({backend}): the best non-private mean accuracy "
                            f"{best_public:.3f} is below DP-SGD's {best_dp.max():.3f} "
                            f"({best_dp.idxmax()}): not a tuned baseline")
    return problems


def regenerated(report: ContractReport) -> list[str]:
    if report.grid is None:
        return []
    committed, grid = report.committed_context, report.grid
    problems = []
    for what, ours, theirs in (("description", committed.description, grid.description),
                               ("notes", committed.notes, grid.notes),
                               ("published", list(committed.published), list(grid.published))):
        if ours != theirs:
            problems.append(f"the committed {what} is not the preset's current one")
    return problems


#: (report, check) -> why it fails until the lead retrains the report's missing runs (a
#: preset changed on purpose; ``tests/compare/test_report_contract.py`` expects exactly these
#: to fail, so the list shrinks as runs are trained). Anything else that fails is a defect.
#: Why every DP-SGD run of a grid trained before the noise key awaits retraining.
NOISE_KEY = ("the noise key (privacy.noise_key: the config hash mixed into seeded keys) and "
             "the default delta below 1/(10 N) changed every DP-SGD config's hash: the "
             "committed runs were trained under the seed-only key and stay in the report as "
             "trained, the grid's current runs are not trained yet")

AWAITING_RETRAINING: dict[tuple[str, str], str] = {
    ("interpretability-clip-sweep", "five_seeds"): (
        "cnn4 was retired from its cats vs dogs half: the 50 scatter-linear runs that replace "
        "it are new configs; and " + NOISE_KEY),
    ("interpretability-vs-epsilon-tuned", "five_seeds"): NOISE_KEY,
    ("mnist-gap-attribution", "five_seeds"): NOISE_KEY,
}

#: Check name -> check (the module's list).
CHECKS: dict[str, Callable[[ContractReport], list[str]]] = {
    "five_seeds": five_seeds, "corrected": corrected,
    "published_verdicts": published_verdicts, "privacy": privacy, "labels": labels,
    "no_issue_references": no_issue_references, "baselines": baselines,
    "regenerated": regenerated,
}


def contract_problems(report: ContractReport) -> dict[str, list[str]]:
    """Check name -> its problems (empty lists included) for ``report``."""
    return {name: check(report) for name, check in CHECKS.items()}


def problems_table(reports_root: str | Path) -> pd.DataFrame:
    """One row per (report, check) with problems, for every committed report with records:
    what ``python -m compare.reporting.contract`` prints."""
    from compare.records import has_records

    rows = []
    for folder in sorted(Path(reports_root).iterdir()):
        if not folder.is_dir() or not has_records(folder):
            continue
        for check, found in contract_problems(render_for_contract(folder)).items():
            rows += [{"report": folder.name, "check": check, "problem": p} for p in found]
    return pd.DataFrame(rows, columns=["report", "check", "problem"])


if __name__ == "__main__":  # pragma: no cover - a reading aid for the lead
    import sys

    table = problems_table(sys.argv[1] if len(sys.argv) > 1 else "reports")
    for (report, check), group in table.groupby(["report", "check"], sort=True):
        print(f"{report} / {check}:")
        for problem in group["problem"]:
            print(f"  - {problem}")

__all__ = ["AWAITING_RETRAINING", "CHECKS", "TEXT_SECTIONS", "ContractReport", "baselines",
           "compared_tables", "contract_problems", "corrected", "five_seeds", "labels",
           "no_issue_references", "privacy", "problems_table", "published_verdicts",
           "regenerated", "render_for_contract"]
