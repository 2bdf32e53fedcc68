"""The README's list of reports: which are citable, which wait for retraining, which are
retired and why, and each citable report's verdicts, generated from the committed records.

``python -m compare.reporting.digest [--write README.md]`` prints (or writes between the
README's :data:`BEGIN` and :data:`END` markers) one entry per committed report folder with
records, rendered as regenerating it would (:func:`compare.reporting.contract.
render_for_contract`): its status under the citable-report contract
(:mod:`compare.reporting.contract`), the backends' corrected verdicts, each published table's
verdicts and each trend's, all computed from the records and the bundled papers, and the
reports retired from ``reports/`` (:data:`RETIRED_REPORTS`) with their reasons.
``tests/compare/test_report_contract.py`` keeps the README's block equal to this output.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from compare.reporting.contract import (
    AWAITING_RETRAINING,
    ContractReport,
    contract_problems,
    render_for_contract,
)
from compare.reporting.labels import difference_label
from compare.reporting.published_section import cell_figures
from compare.reporting.reproduction import TrendVerdict, trend_verdicts, verdict_summary
from compare.reporting.selection_text import selection_summary
from compare.reporting.stats import verdict_word

BEGIN = ("<!-- reports-digest: generated from the committed records by "
         "`python -m compare.reporting.digest --write README.md`; do not edit by hand -->")
END = "<!-- /reports-digest -->"

#: Report folders retired from ``reports/`` (their records stay in git history): name ->
#: why it cannot meet the contract. Their presets are kept unless the reason says otherwise.
RETIRED_REPORTS: dict[str, str] = {
    "medical-ldp-vs-dpsgd-resnet18-short": (
        "one seed (no interval), and 18 of its 20 runs collapsed, the non-private baselines "
        "included, so it ranks nothing; its ResNet-18 baselines were never tuned, and 5 seeds "
        "of the full 20-epoch grid are beyond this machine (reports/benchmarks estimates one "
        "seed of `medical-ldp-vs-dpsgd`)"),
    "mnist-library-benchmark": (
        "one seed per setting, so no verdict; its 15-epoch column is "
        "`mnist-library-benchmark-15` (5 seeds); 5 seeds of its 45- and 60-epoch columns "
        "were not trained"),
    "mnist-gap-attribution-long": (
        "one seed per configuration, so no interval and no verdict; the attribution's "
        "verdicts are `mnist-gap-attribution`'s (5 seeds, 15 epochs)"),
}


def _backends_text(report: ContractReport) -> str:
    paired = report.data.paired
    if paired.empty:
        return "backends not compared"
    frame = report.data.frame
    recipes = sorted(set(frame.loc[frame["setting"].isin(set(paired["setting"])),
                                   "recipe"].astype(str)))
    words = paired["verdict"].map(verdict_word)
    counts = [f"{int((words == w).sum())} {w}" for w in ("agree", "differ", "inconclusive")
              if (words == w).any()]
    none = int((~words.isin(["agree", "differ", "inconclusive"])).sum())
    if none:
        counts.append(f"{none} without a verdict (fewer than 5 seeds)")
    tested = int(paired["p_value"].notna().sum())
    return (f"{difference_label(recipes)}: {', '.join(counts)} "
            f"(Holm over {tested} setting{'s' if tested != 1 else ''} with a test)")


def _published_text(report: ContractReport) -> list[str]:
    out = []
    frame = report.data.frame
    entries = report.data.context.published
    for entry in entries:
        if entry.get("table") is None or not entry.get("cells"):
            continue
        summary = verdict_summary([f.verdict for f in cell_figures(entry, frame)])
        out.append(f"{entry['paper']} {entry['table']}: "
                   f"{summary.removeprefix('Verdict: ').rstrip('.')}")
    by_claim: dict[str, list[TrendVerdict]] = {}
    for v in trend_verdicts(entries, frame):
        by_claim.setdefault(v.claim, []).append(v)
    for claim, group in by_claim.items():
        parts = []
        for v in group:
            if not v.comparable:
                parts.append(f"{v.backend} {v.verdict}")
                continue
            interval = ("" if math.isnan(v.ours.low) else
                        f" [{v.ours.low:+.2f}, {v.ours.high:+.2f}]")
            parts.append(f"{v.backend} {v.verdict}, ours {v.ours.mean:+.2f}{interval}"
                         f"{v.collapsed_note}")
        out.append(f"'{claim}' (the paper {group[0].published_change:+.2f}): "
                   + ", ".join(parts))
    return out


def status_of(name: str, problems: Mapping[str, Sequence[str]]) -> str:
    """``citable``, ``citable once regenerated`` (only the committed text is out of date) or
    ``not citable until retrained: <reasons>`` / ``not citable: <checks>``."""
    failing = sorted(check for check, found in problems.items() if found)
    if not failing:
        return "citable"
    if failing == ["regenerated"]:
        return "citable once regenerated (`dpcompare compare --preset NAME --no-train`)"
    waiting = [AWAITING_RETRAINING[(name, c)] for c in failing
               if (name, c) in AWAITING_RETRAINING]
    if waiting and len(waiting) == len([c for c in failing if c != "regenerated"]):
        return "not citable until retrained: " + "; ".join(dict.fromkeys(waiting))
    return "not citable: fails " + ", ".join(failing)


def report_entry(report: ContractReport) -> str:
    """The README entry of one report: its status and its verdicts."""
    status = status_of(report.name, contract_problems(report))
    raw = report.data.context.selection  # else the bundled preset's (records written before
    if raw is None and report.grid is not None:  # the block existed carry none)
        raw = report.grid.selection
    selection = selection_summary(raw, report.data.results)
    parts = [_backends_text(report), *_published_text(report),
             *([selection] if selection else [])]
    return (f"- [`{report.name}`](reports/{report.name}/report.md), {status}. "
            + "; ".join(parts) + ".")


def readme_block(reports_root: str | Path,
                 render: Callable[[Path], ContractReport] = render_for_contract) -> str:
    """The README's generated block (between :data:`BEGIN` and :data:`END`, markers
    included): every committed report with records (each rendered by ``render``), then the
    retired ones."""
    from compare.records import has_records

    root = Path(reports_root)
    lines = [BEGIN, "", "Committed reports (status under the contract above; verdicts from "
             "their records, corrected for each report's comparisons):", ""]
    for folder in sorted(root.iterdir()):
        if folder.is_dir() and has_records(folder):
            lines.append(report_entry(render(folder)))
    lines += ["", "Retired from `reports/` (their records stay in git history):", ""]
    lines += [f"- Retired: `{name}` report: {why}." for name, why in RETIRED_REPORTS.items()]
    lines += ["", END]
    return "\n".join(lines)


def replace_block(text: str, block: str) -> str:
    """``text`` with its generated block (:data:`BEGIN` ... :data:`END`) replaced by
    ``block``.

    Raises:
        ValueError: the markers are missing or out of order.
    """
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the text has no block between {BEGIN!r} and {END!r}")
    return text[:start] + block + text[end + len(END):]


def current_block(text: str) -> str:
    """The generated block of ``text``, markers included (ValueError without one)."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the text has no block between {BEGIN!r} and {END!r}")
    return text[start:end + len(END)]


def main(argv: Sequence[str] | None = None) -> int:
    """Print the block, or with ``--write FILE`` replace FILE's block with it."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reports", default="reports", help="the committed report folders")
    parser.add_argument("--write", help="replace this file's generated block (README.md)")
    args = parser.parse_args(argv)
    block = readme_block(args.reports)
    if args.write:
        path = Path(args.write)
        path.write_text(replace_block(path.read_text(encoding="utf-8"), block),
                        encoding="utf-8")
    else:
        print(block)
    return 0


if __name__ == "__main__":
    sys.exit(main())

__all__ = ["BEGIN", "END", "RETIRED_REPORTS", "current_block", "main", "readme_block",
           "replace_block", "report_entry", "status_of"]
