"""Detection matrix: every bug of the test catalogue, on each backend and step, against both
checks: caught by ``dpcompare verify``, by the one-run audit, by both, or missed; and the
false alarms of both checks on the same steps without a bug.

``python -m tests.verify.detection_matrix [--out reports/audit-check] [--only BUG ...] [--fresh]``

It sits with the catalogue it runs, in the tests (the product's packages import no test
code). Runs from a clone of the repository (the catalogue is test code: ``tests/verify/bugs.py``,
patches of ``tfpipe`` / ``torchpipe`` applied with pytest's ``MonkeyPatch``, and
``tests/verify/library_bugs.py``, the same two bugs placed in TF Privacy's and Opacus's own
classes), with the ``test`` extra installed. For each (bug, backend, step) whose code path exists:

* **verify**: ``dpcompare verify`` of the catalogue's configuration (``tests/verify/helpers``:
  digits, cnn4, noise multiplier 1, expected batch 64, Poisson) with the bug installed; caught
  when a check fails (false-alarm rate of the whole set printed by verify, about 1e-3);
* **audit**: ``dpcompare train --dataset digits --epsilon 1 --audit-canaries 1000`` with the bug
  installed (gradient canaries through the step's own clipping); caught when the run's record
  says ``audit.one_run.violation`` (one-run bound above the proved epsilon, or a per-step check
  flagged: noise not fresh, canaries not clipped).

The honest rows (bug ``none``) are the same two checks without a bug, on every step: any
"caught" there is a false alarm. Each row is appended to ``detection-matrix.jsonl`` as it
finishes, so an interrupted run continues where it stopped (``--fresh`` starts again); the
Markdown table, the CSV and the figure are rewritten from all rows at the end. Nothing here
is hand-written where a library offers it: the checks are the product's own
(:mod:`compare.verify`, the CLI's ``train``); only the tabulation is this module's.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

#: Where the report goes by default (beside the audit-check grid's report).
DEFAULT_OUT = Path("reports/audit-check")
#: File names inside ``--out``.
ROWS_FILE = "detection-matrix.jsonl"
TABLE_FILE = "detection-matrix.md"
CSV_FILE = "detection-matrix.csv"
FIGURE_FILE = "detection-matrix.png"
#: The audited training command (the issue's own: 110 steps of cnn4 on digits).
AUDIT_COMMAND = ("train", "--dataset", "digits", "--epsilon", "1", "--audit-canaries", "1000",
                 "--faithfulness-subset", "0", "--quiet")
#: Bug name of the honest rows.
HONEST = "none"
#: The library-code bugs' names in the matrix (the catalogue's name plus where it sits).
LIBRARY_CODE = " (in the library's code)"
#: Verdicts, in the order the figure's colours use.
VERDICTS = ("both", "verify only", "audit only", "missed", "no false alarm", "false alarm")


@dataclass(frozen=True)
class Row:
    """One (bug, backend, step) of the matrix.

    Attributes:
        bug: catalogue name (``none``: no bug).
        backend: ``tf`` or ``torch``.
        step: ``fast``, ``reference`` (the bench's engines) or ``library`` (the recipe).
        verify_failed: the verify checks that failed (``engine:check``), empty when it passed.
        verify_seconds: wall time of the verify call.
        audit_violation: the run's ``audit.one_run.violation``.
        audit_flags: which parts flagged: ``bound`` (one-run epsilon lower bound above the
            proved epsilon), ``fresh`` (per-step noise check), ``clip`` (per-step clipping check).
        audit_bound: the one-run 95 % lower bound on epsilon; ``proved``: the proved epsilon.
        accuracy: the audited run's test accuracy (a bug that breaks privacy often shows here).
        audit_seconds: wall time of the audited training run.
    """

    bug: str
    backend: str
    step: str
    verify_failed: tuple[str, ...]
    verify_seconds: float
    audit_violation: bool
    audit_flags: tuple[str, ...]
    audit_bound: float | None
    proved: float | None
    accuracy: float | None
    audit_seconds: float

    @property
    def verdict(self) -> str:
        """``both`` / ``verify only`` / ``audit only`` / ``missed`` for a bug; ``false alarm`` or
        ``no false alarm`` for an honest row."""
        by_verify, by_audit = bool(self.verify_failed), self.audit_violation
        if self.bug == HONEST:
            return "false alarm" if by_verify or by_audit else "no false alarm"
        if by_verify and by_audit:
            return "both"
        return "verify only" if by_verify else "audit only" if by_audit else "missed"


def _catalogue() -> tuple[Any, Any, Any, Callable[..., Any]]:
    """The catalogue and the verify helper (test code: needs the clone and pytest)."""
    try:
        from tests.verify.bugs import BUGS, STEPS
        from tests.verify.helpers import run_verify
        from tests.verify.library_bugs import LIBRARY_BUGS
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise SystemExit(f"detection_matrix: the bug catalogue is test code; run from the "
                         f"repository's root with the 'test' extra installed ({exc})") from exc
    return BUGS, STEPS, LIBRARY_BUGS, run_verify


def planned_cases() -> list[tuple[str, str, str]]:
    """Every (bug, backend, step) of the matrix, honest rows first: the catalogue's cases
    whose code path exists, then the library-code bugs (step ``library``)."""
    from tests.verify.bugs import cases as catalogue_cases

    bugs, steps, library_bugs, _ = _catalogue()
    cases = [(HONEST, backend, step) for backend in ("tf", "torch") for step in steps]
    cases += [(name, backend, step) for name, backend, step in catalogue_cases()
              if bugs[name].skip_reason(backend, step) is None]
    cases += [(name + LIBRARY_CODE, backend, "library") for name, backend in library_bugs]
    return cases


@contextlib.contextmanager
def _installed(bug: str, backend: str, step: str) -> Iterator[tuple[tuple[str, ...],
                                                                    dict[str, Any]]]:
    """Install the bug (none for the honest rows); yields its settings and perf fields."""
    import pytest

    bugs, _, library_bugs, _ = _catalogue()
    if bug == HONEST:
        yield (), {}
    elif bug.endswith(LIBRARY_CODE):
        with pytest.MonkeyPatch.context() as mp:
            library_bugs[(bug.removesuffix(LIBRARY_CODE), backend)](mp)
            yield (), {}
    else:
        entry = bugs[bug]
        with entry.applied(backend, step):
            yield entry.settings, dict(entry.perf)


def _audit(backend: str, step: str, settings: tuple[str, ...],
           perf: dict[str, Any]) -> dict[str, Any]:
    """One audited training run in this process; the record's audit and privacy figures."""
    from compare.cli.main import main
    from dpcore.results import read_result

    with tempfile.TemporaryDirectory() as tmp:
        how = ["--recipe", "library"] if step == "library" else ["--engine", step]
        sets = [arg for setting in settings for arg in ("--set", setting)]
        perfs = [arg for key, value in perf.items()
                 for arg in (f"--{key.replace('_', '-')}", str(value))]
        with contextlib.redirect_stdout(io.StringIO()):
            code = main([*AUDIT_COMMAND, "--backend", backend, *how, *sets, *perfs,
                         "--out", tmp])
        if code != 0:
            raise RuntimeError(f"audited run of {backend}/{step} exited {code}")
        [path] = Path(tmp).glob("runs/*/result.json")
        result = read_result(path)
        if result is None or result.audit is None:
            raise RuntimeError(f"audited run of {backend}/{step} wrote no audit")
        one_run = result.audit["one_run"]
        per_step = one_run.get("per_step") or {}
        flags = []
        proved = result.privacy.get("epsilon_proved")
        bound = one_run.get("epsilon_lower_bound")
        if bound is not None and proved is not None and bound > proved:
            flags.append("bound")
        if per_step.get("flagged"):
            flags.append("fresh")
        if (per_step.get("clip") or {}).get("flagged"):
            flags.append("clip")
        return {"violation": bool(one_run.get("violation")), "flags": tuple(flags),
                "bound": bound, "proved": proved,
                "accuracy": result.metrics.get("accuracy")}


def measure(bug: str, backend: str, step: str) -> Row:
    """Both checks of one (bug, backend, step)."""
    _, _, _, run_verify = _catalogue()
    with _installed(bug, backend, step) as (settings, perf):
        start = time.perf_counter()
        report = run_verify(backend, step, settings, perf)
        verify_seconds = time.perf_counter() - start
        start = time.perf_counter()
        audit = _audit(backend, step, settings, perf)
        audit_seconds = time.perf_counter() - start
    return Row(bug, backend, step, tuple(report.failed()), round(verify_seconds, 1),
               audit["violation"], audit["flags"], audit["bound"], audit["proved"],
               audit["accuracy"], round(audit_seconds, 1))


def read_rows(path: Path) -> list[Row]:
    """The rows a previous (possibly interrupted) run appended to ``path``."""
    if not path.exists():
        return []
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            data["verify_failed"] = tuple(data["verify_failed"])
            data["audit_flags"] = tuple(data["audit_flags"])
            rows.append(Row(**data))
        except (json.JSONDecodeError, TypeError, KeyError) as exc:
            raise SystemExit(f"detection_matrix: {path} line {number} is no matrix row "
                             f"({exc}); remove it or start again with --fresh") from exc
    return rows


def tidy(rows: list[Row]) -> Any:
    """The rows as a tidy pandas frame, one row per (bug, backend, step), with the verdict."""
    import pandas as pd

    frame = pd.DataFrame([{**asdict(r), "verify_failed": " ".join(r.verify_failed),
                           "audit_flags": " ".join(r.audit_flags), "verdict": r.verdict}
                          for r in rows])
    return frame.sort_values(["bug", "backend", "step"], key=lambda s: s.map(
        lambda v: (v != HONEST, v) if isinstance(v, str) else v)).reset_index(drop=True)


def _cell(value: Any) -> str:
    if value is None or value != value:  # None or NaN
        return "-"
    return f"{value:.2f}" if isinstance(value, float) else str(value) or "-"


def markdown(frame: Any, command: str, commit: str) -> str:
    """The matrix as a Markdown report (command and commit in its header)."""
    bugs = frame[frame.bug != HONEST]
    honest = frame[frame.bug == HONEST]
    counts = bugs.verdict.value_counts()
    lines = [
        "# Detection matrix: catalogue bugs vs `dpcompare verify` and the one-run audit", "",
        f"Generated by `{command}` at commit {commit} "
        f"on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.", "",
        "Each bug is a patch of a backend's own code (`tests/verify/bugs.py`; "
        "`tests/verify/library_bugs.py`: the same two bugs in TF Privacy's `GaussianSumQuery` "
        "and Opacus's `DPOptimizer`), never `factors.fault`. **verify**: `dpcompare verify` of "
        "digits / cnn4 / noise multiplier 1 / expected batch 64 with the bug installed "
        "(the checks that failed). **audit**: `dpcompare train --dataset digits --epsilon 1 "
        "--audit-canaries 1000` with the bug installed: `bound` (one-run 95 % lower bound "
        "above the proved epsilon), `fresh` (per-step noise check), `clip` (per-step clipping "
        "check); each per-step check at false-alarm rate 1e-3, the bound at 5 %. Steps: "
        "`fast` / `reference` (the bench's engines), `library` (the library recipe's own "
        "step); a bug is listed only on the steps where its code path exists.", "",
        f"**{len(bugs)} (bug, backend, step) cases**: "
        + ", ".join(f"{counts.get(v, 0)} {v}" for v in VERDICTS[:4]) + ". "
        f"**Honest steps**: {len(honest)}, "
        f"{int((honest.verdict == 'false alarm').sum())} false alarm(s) "
        f"(verify: {int((honest.verify_failed != '').sum())}, "
        f"audit: {int(honest.audit_violation.sum())}).", "",
        "| bug | backend | step | verify: failed checks | audit: flagged by | audit bound "
        "| proved eps | test acc. | verdict |",
        "|---|---|---|---|---|---|---|---|---|"]
    for _, r in frame.iterrows():
        lines.append(f"| {r.bug} | {r.backend} | {r.step} | {_cell(r.verify_failed)} "
                     f"| {_cell(r.audit_flags)} | {_cell(r.audit_bound)} | {_cell(r.proved)} "
                     f"| {_cell(r.accuracy)} | {r.verdict} |")
    missed = bugs[bugs.verdict == "missed"]
    lines += ["", "Missed by both: " + (", ".join(f"{r.bug} ({r.backend}/{r.step})"
                                                  for _, r in missed.iterrows()) or "none") + ".",
              "", f"Figure: `{FIGURE_FILE}`; table: `{CSV_FILE}`; raw rows: `{ROWS_FILE}`.", ""]
    return "\n".join(lines)


def figure(frame: Any, path: Path) -> None:
    """One panel per backend: bugs down, steps across, each cell coloured by its verdict."""
    import matplotlib

    matplotlib.use("Agg")
    import seaborn as sns
    from matplotlib.colors import ListedColormap

    palette = dict(zip(VERDICTS, ("#1a9850", "#91cf60", "#d9ef8b", "#d73027", "#4575b4",
                                  "#f46d43"), strict=True))
    code = {v: i for i, v in enumerate(VERDICTS)}
    data = frame.assign(verdict_code=frame.verdict.map(code))
    order = [HONEST] + sorted(b for b in frame.bug.unique() if b != HONEST)

    def panel(data: Any, **_: Any) -> None:
        import matplotlib.pyplot as plt

        pivot = data.pivot(index="bug", columns="step", values="verdict_code")
        pivot = pivot.reindex(index=order, columns=["fast", "reference", "library"])
        pivot = pivot.rename(index={HONEST: "no bug (honest step)"})
        labels = pivot.map(lambda c: "" if c != c else VERDICTS[int(c)])
        sns.heatmap(pivot, cmap=ListedColormap(list(palette.values())), vmin=-0.5,
                    vmax=len(VERDICTS) - 0.5, annot=labels, fmt="", cbar=False,
                    linewidths=0.5, linecolor="white", ax=plt.gca(),
                    annot_kws={"fontsize": 7})

    grid = sns.FacetGrid(data, col="backend", height=6.5, aspect=0.8, sharey=True)
    grid.map_dataframe(panel)
    grid.set_axis_labels("step", "")
    grid.set_titles("backend: {col_name}")
    grid.figure.suptitle("Catalogue bugs: caught by verify, by the audit, by both (blank: no "
                         "code path)", y=1.02)
    grid.savefig(path, dpi=120, bbox_inches="tight")


def _commit() -> str:
    try:
        done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return done.stdout.strip() + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder to write to")
    parser.add_argument("--only", nargs="+", metavar="BUG", default=None,
                        help="measure only these bugs (and 'none' for the honest rows)")
    parser.add_argument("--fresh", action="store_true",
                        help="forget the rows of an earlier run in --out")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    args.out.mkdir(parents=True, exist_ok=True)
    rows_path = args.out / ROWS_FILE
    if args.fresh and rows_path.exists():
        rows_path.unlink()
    done = {(r.bug, r.backend, r.step) for r in read_rows(rows_path)}
    plan = planned_cases()
    if args.only:
        unknown = set(args.only) - {bug for bug, _, _ in plan}
        if unknown:
            raise SystemExit(f"detection_matrix: no bug named {sorted(unknown)}; valid: "
                             f"{sorted({bug for bug, _, _ in plan})}")
        plan = [case for case in plan if case[0] in args.only]
    todo = [case for case in plan if case not in done]
    from tqdm.auto import tqdm

    for bug, backend, step in tqdm(todo, desc="detection matrix", unit="case"):
        row = measure(bug, backend, step)
        with rows_path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(asdict(row)) + "\n")
    rows = [r for r in read_rows(rows_path) if (r.bug, r.backend, r.step) in set(plan)]
    frame = tidy(rows)
    frame.to_csv(args.out / CSV_FILE, index=False)
    command = " ".join(["python -m tests.verify.detection_matrix",
                        *(sys.argv[1:] if argv is None else argv)])
    (args.out / TABLE_FILE).write_text(markdown(frame, command, _commit()), encoding="utf-8")
    figure(frame, args.out / FIGURE_FILE)
    print(f"detection matrix: {len(rows)} row(s) in {args.out / TABLE_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
