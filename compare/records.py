"""The compact run records a report folder holds, so that the report is a pure function of them.

Layout of ``REPORT/records/`` (written by every report writer, read by
``dpcompare report --records``)::

    records.jsonl.gz       one RunResult dict per line (no checkpoint), sorted by run id,
                           with the labels the report names each run by, and, for a small
                           test set, its test logits in the same line (``test_outputs``,
                           :mod:`dpcore.outputs`); gzip with mtime 0
    context.json           what the header and the sections need besides the runs: the
                           command, wall time, title, description, notes, published figures,
                           the grid's run ids and axis order
    figures.json           PNG path in the report -> digest of its plotted data
                           (:mod:`compare.figdigest`)
    montages/NAME.npz      the arrays of montage ``montages/NAME.png`` (:class:`MontageData`)
    weights/RUN_ID.npz     the final weights of a shared-noise run (``privacy.noise_source:
                           shared``), for the framework-equivalence section
                           (:mod:`compare.final_weights`)

Every file is written deterministically: the same records give byte-identical files, so an
unchanged report leaves git clean. Text that would name a folder of this machine (a data file's
location, a path inside an error message) is made portable first (:func:`portable_text`).

Records also let a grid resume on another machine: with ``--resume-from-records``
(:mod:`compare.resume`) :func:`committed_records` collects the final records of the committed
report folders (``reports/*/records``), keyed by run id, and the runner counts those runs as
finished; one run id then has one record shared by every report that shows it. Without it a
grid trains its runs and compares them with these records (:mod:`compare.reproduction`).
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
import os
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from compare.final_weights import (
    WEIGHTS_FOLDER,
    FinalWeights,
    load_final_weights,
    save_final_weights,
)
from compare.montage_data import (
    MONTAGE_DATA_SUFFIX,
    MontageData,
    load_montage_data,
    save_montage_data,
)
from compare.report_context import ReportContext
from compare.reporting.foreign import is_foreign
from dpcore.data import portable_location
from dpcore.errors import DataError, DpCompareError
from dpcore.io import atomic_write_bytes, json_safe, json_text
from dpcore.results import FINAL_STATUSES, RunResult

__all__ = [
    "CONTEXT_FILE", "FIGURES_FILE", "FINAL_STATUSES", "RECORDS_FILE", "RECORDS_FOLDER",
    "ReportRecords", "committed_records", "evaluations_held", "folder_bytes",
    "has_membership_audit", "has_records", "portable_text",
    "read_records", "record_folders_beside", "records_bytes", "report_differences",
    "write_records",
    "committed_montage_columns",
]

RECORDS_FOLDER = "records"
RECORDS_FILE = "records.jsonl.gz"
CONTEXT_FILE = "context.json"
FIGURES_FILE = "figures.json"
MONTAGES_FOLDER = "montages"
#: Version of the records layout (in ``context.json``).
RECORDS_VERSION = 1
T = TypeVar("T")

#: How a portable text names the data root (the variable that points the bench at it).
DATA_ROOT_NAME = "$DPCOMPARE_DATA_DIR"


@dataclass(frozen=True)
class ReportRecords:
    """What a report is rebuilt from: its runs, its context, its montages, the digests of
    the figures it was written with, and the final weights of its shared-noise runs."""

    results: tuple[RunResult, ...]
    context: ReportContext
    montages: tuple[MontageData, ...]
    figures: Mapping[str, str]
    weights: Mapping[str, FinalWeights] = field(default_factory=dict)


def portable_text(text: str, data_root: str | Path | None = None) -> str:
    """``text`` with the folders of this machine replaced: the data root (``data_root``, else
    ``$DPCOMPARE_DATA_DIR``) by ``$DPCOMPARE_DATA_DIR``, the current folder by nothing
    (paths become relative), the home folder by ``~``."""
    roots = [(data_root or os.environ.get("DPCOMPARE_DATA_DIR"), DATA_ROOT_NAME),
             (Path.cwd(), "."), (Path.home(), "~")]
    for root, name in roots:
        if not root:
            continue
        for form in {str(Path(root)), str(Path(root).resolve())}:
            if len(form) > 1:  # never replace "/"
                text = text.replace(form + "/", "" if name == "." else name + "/")
                text = text.replace(form, name)
    return text


def records_bytes(results: Sequence[RunResult]) -> bytes:
    """The ``records.jsonl.gz`` bytes of ``results``: one compact JSON line per run (no
    checkpoint; the data source relative to the data root,
    :func:`dpcore.data.portable_location`; other text through :func:`portable_text`), sorted
    by run id, gzip with mtime 0 and no file name."""
    lines = []
    for result in sorted(results, key=lambda r: r.run_id):
        raw = dataclasses.replace(result, checkpoint=None).to_dict()
        source = raw.get("dataset", {}).get("source")
        if source:  # relative to the data root whichever way the root was given
            raw["dataset"]["source"] = portable_location(raw["dataset"]["name"], str(source))
        # No sort_keys: the order of a run's labels is the grid's axis order.
        lines.append(portable_text(json.dumps(raw, allow_nan=False, separators=(",", ":"))))
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0, compresslevel=9) as gz:
        gz.write(("\n".join(lines) + "\n").encode("utf-8") if lines else b"")
    return buffer.getvalue()


def write_records(report_dir: str | Path, results: Sequence[RunResult],
                  context: ReportContext, montages: Sequence[MontageData],
                  figures: Mapping[str, str],
                  weights: Mapping[str, FinalWeights] | None = None) -> Path:
    """Write ``REPORT/records/`` (see the module docstring); returns the folder.

    Stale montage and weight files of an earlier version of the report are removed.
    """
    folder = Path(report_dir) / RECORDS_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(folder / RECORDS_FILE, records_bytes(results))
    # No sort_keys: the published entries keep the preset's order, which the report follows.
    context_text = json.dumps(json_safe(_context_dict(context)), indent=2, allow_nan=False)
    atomic_write_bytes(folder / CONTEXT_FILE, (portable_text(context_text) + "\n").encode())
    atomic_write_bytes(folder / FIGURES_FILE, json_text(dict(figures)).encode("utf-8"))
    keep = set()
    for data in montages:
        path = folder / MONTAGES_FOLDER / (Path(data.name).stem + MONTAGE_DATA_SUFFIX)
        path.parent.mkdir(exist_ok=True)
        save_montage_data(path, data)
        keep.add(path.name)
    for stale in sorted((folder / MONTAGES_FOLDER).glob(f"*{MONTAGE_DATA_SUFFIX}")):
        if stale.name not in keep:
            stale.unlink()
    kept_weights = set()
    for run, kept in sorted((weights or {}).items()):
        (folder / WEIGHTS_FOLDER).mkdir(exist_ok=True)
        save_final_weights(folder / WEIGHTS_FOLDER / f"{run}.npz", kept)
        kept_weights.add(f"{run}.npz")
    for stale in sorted((folder / WEIGHTS_FOLDER).glob("*.npz")):
        if stale.name not in kept_weights:
            stale.unlink()
    return folder


def has_records(report_dir: str | Path) -> bool:
    """True when ``report_dir`` holds records (its ``records/records.jsonl.gz``)."""
    return (Path(report_dir) / RECORDS_FOLDER / RECORDS_FILE).is_file()


def read_records(report_dir: str | Path) -> ReportRecords:
    """The records of the report folder ``report_dir``.

    Raises:
        DataError: the folder holds no records, or a file of them is unreadable (named).
    """
    folder = Path(report_dir) / RECORDS_FOLDER
    if not has_records(report_dir):
        raise DataError(f"{report_dir} holds no run records (expected {folder / RECORDS_FILE}, "
                        "written by `dpcompare compare --report` or `dpcompare report`)")
    results = _read_results(folder / RECORDS_FILE)
    try:
        context = _context_from(json.loads((folder / CONTEXT_FILE).read_text("utf-8")))
        figures = json.loads((folder / FIGURES_FILE).read_text("utf-8"))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DataError(f"{folder}: unreadable {CONTEXT_FILE} or {FIGURES_FILE} ({exc}); "
                        "rewrite the report with `dpcompare compare --report`") from exc
    montages = tuple(load_montage_data(p) for p in
                     sorted((folder / MONTAGES_FOLDER).glob(f"*{MONTAGE_DATA_SUFFIX}")))
    weights = {p.stem: load_final_weights(p)
               for p in sorted((folder / WEIGHTS_FOLDER).glob("*.npz"))}
    return ReportRecords(tuple(results), context, montages, figures, weights)


def _read_results(path: Path) -> list[RunResult]:
    results: list[RunResult] = []
    try:
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    results.append(RunResult.from_dict(json.loads(line)))
    except (OSError, EOFError, ValueError, DpCompareError, TypeError) as exc:
        raise DataError(f"{path}: unreadable run record after {len(results)} readable ones "
                        f"({exc}); the records must be rewritten by the command that wrote the "
                        "report") from exc
    return results


def has_membership_audit(result: RunResult) -> bool:
    """Whether ``result`` holds the empirical membership-inference audit of
    :func:`dpcore.evaluation.membership.audit_trained` (which always writes
    ``audit["backend"]``), as opposed to none or only the one-run canary audit
    (``audit["one_run"]``)."""
    return "backend" in (result.audit or {})


def evaluations_held(result: RunResult) -> int:
    """How many of the optional evaluations (Grad-CAM faithfulness, the membership-inference
    audit) a record holds: of two records of one run, the one with more is the more
    complete."""
    return int(result.faithfulness is not None) + int(has_membership_audit(result))


def committed_records(report_dirs: Iterable[str | Path]) -> dict[str, RunResult]:
    """Run id -> the final record (status finished or diverged) of that run in the first of
    ``report_dirs`` that holds one (folders without records are skipped), unless a later
    folder holds a record of the run with more evaluations (:func:`evaluations_held`): a run
    retrained for an evaluation its first grid did not ask for (:mod:`compare.runplan`)
    replaces its older record in every report regenerated after it.

    The first folder is the grid's own report (:func:`record_folders_beside`): its records
    must read (DataError otherwise, naming the file). The records of every later folder are
    other reports': an unreadable file there (truncated, not gzip, not records) is named in a
    warning and skipped, whole, so that one damaged report never stops an unrelated grid;
    the runs it may have held are then not taken from it."""
    known: dict[str, RunResult] = {}
    for index, folder in enumerate(report_dirs):
        if not has_records(folder):
            continue
        results = _of_report(index, "the records", _read_results,
                             Path(folder) / RECORDS_FOLDER / RECORDS_FILE)
        for result in results or ():
            if result.status not in FINAL_STATUSES:
                continue
            first = known.get(result.run_id)
            if first is None or evaluations_held(result) > evaluations_held(first):
                known[result.run_id] = result
    return known


def _of_report(index: int, what: str, read: Callable[[Path], T], path: Path) -> T | None:
    """``read(path)`` of the ``index``-th report folder (:func:`record_folders_beside`
    order). The grid's own report (index 0) must read; a file of another report that does not
    (any DpCompareError) is named in a warning, and None is returned: the caller skips it."""
    try:
        return read(path)
    except DpCompareError as exc:
        if index == 0:
            raise
        warnings.warn(f"skipping {what} of another report: {exc}", stacklevel=3)
        return None


def record_folders_beside(report_dir: str | Path) -> list[Path]:
    """``report_dir`` first, then every other folder beside it (``reports/*``) by name: the
    order :func:`committed_records` looks for a run's record in."""
    own = Path(report_dir)
    others = sorted(p for p in own.parent.glob("*") if p.is_dir() and p.resolve() != own.resolve())
    return [own, *others]


def committed_montage_columns(report_dirs: Iterable[str | Path]
                              ) -> dict[str, tuple[MontageData, dict[str, Any]]]:
    """Run id -> (the montage, its column of that run) in the committed montage arrays of
    ``report_dirs`` (first folder wins): how a grid resumed from records still draws the
    montage columns of runs whose checkpoints are not on this machine. A damaged montage file
    of a later folder (another report's) is named in a warning and skipped, as
    :func:`committed_records` skips its records; the first folder's must read."""
    columns: dict[str, tuple[MontageData, dict[str, Any]]] = {}
    for index, folder in enumerate(report_dirs):
        for path in sorted((Path(folder) / RECORDS_FOLDER / MONTAGES_FOLDER)
                           .glob(f"*{MONTAGE_DATA_SUFFIX}")):
            data = _of_report(index, "a montage", load_montage_data, path)
            for column in data.columns if data is not None else ():
                if column.get("run_id"):
                    columns.setdefault(str(column["run_id"]), (data, column))
    return columns


def folder_bytes(folder: str | Path) -> int:
    """Total size in bytes of the files under ``folder``."""
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())


def _context_dict(context: ReportContext) -> dict[str, Any]:
    raw = dataclasses.asdict(context)
    raw["run_ids"] = None if context.run_ids is None else sorted(context.run_ids)
    raw["labels"] = None if context.labels is None else {
        k: dict(v) for k, v in sorted(context.labels.items())}
    if context.audit_companions is None:  # the reports of grids without companions as before
        del raw["audit_companions"]
    else:
        raw["audit_companions"] = dict(sorted(context.audit_companions.items()))
    if context.faithfulness:  # the context of a grid asking for it, as before the key
        del raw["faithfulness"]
    if context.selection is None:  # the context of a grid without a selection block
        del raw["selection"]
    raw["records_version"] = RECORDS_VERSION
    return raw


def _context_from(raw: Mapping[str, Any]) -> ReportContext:
    fields = {f.name for f in dataclasses.fields(ReportContext)}
    values = {k: v for k, v in raw.items() if k in fields}
    if values.get("run_ids") is not None:
        values["run_ids"] = frozenset(values["run_ids"])
    values["published"] = tuple(values.get("published") or ())
    values["axis_order"] = tuple(values.get("axis_order") or ())
    return ReportContext(**values)



#: The header line of report.md that a rebuild rewrites (the time it was written).
WRITTEN_LINE_PREFIX = "- written: "


def report_differences(expected: str | Path, actual: str | Path) -> list[str]:
    """How the report folder ``actual`` (e.g. rebuilt from records) differs from ``expected``
    (e.g. the committed one); empty when they agree.

    The rule: the same set of files (the ``latex/`` tables, written on request only, and the
    files other generators write into a report folder,
    :data:`compare.reporting.foreign.FOREIGN_FILES`, are ignored); every file byte for byte
    (CSV, JSON, the records, the montage arrays), except
    ``report.md``, where the written-time line is ignored, and PNGs, which are compared by
    the digest of their plotted data (``records/figures.json``, which is compared byte for
    byte) rather than by their bytes, which depend on the matplotlib/FreeType/zlib build.
    """
    expected, actual = Path(expected), Path(actual)

    def files(root: Path) -> set[str]:
        names = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}
        return {name for name in names if not name.startswith("latex/")
                and not is_foreign(name)}

    mine, theirs = files(expected), files(actual)
    problems = [f"only in {expected}: {name}" for name in sorted(mine - theirs)]
    problems += [f"only in {actual}: {name}" for name in sorted(theirs - mine)]
    for name in sorted(mine & theirs):
        if name.endswith(".png"):
            continue  # by their data: records/figures.json
        a, b = (expected / name).read_bytes(), (actual / name).read_bytes()
        if name == "report.md":
            a, b = (_without_written_line(x) for x in (a, b))
        if a != b:
            problems.append(f"differs: {name}" + _first_difference(name, a, b))
    return problems


def _without_written_line(text: bytes) -> bytes:
    return b"\n".join(line for line in text.split(b"\n")
                      if not line.startswith(WRITTEN_LINE_PREFIX.encode()))


def _first_difference(name: str, a: bytes, b: bytes) -> str:
    """" (line N: 'expected' != 'actual')" for text files, "" for binary ones."""
    if not name.endswith((".md", ".csv", ".json")):
        return ""
    left, right = a.decode("utf-8", "replace").split("\n"), b.decode("utf-8", "replace").split("\n")
    for number, (x, y) in enumerate(zip(left, right, strict=False), start=1):
        if x != y:
            return f" (line {number}: {x[:120]!r} != {y[:120]!r})"
    return f" ({len(left)} lines != {len(right)} lines)"
