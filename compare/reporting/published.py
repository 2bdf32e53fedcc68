"""Published figures beside ours: the papers' tables bundled in ``compare/published``.

A grid's ``published:`` key is a list of entries, each naming one paper table::

    published:
      - paper: library_benchmark_kotevska     # compare/published/<paper>.yaml
        table: mnist_table_I                  # a table of that file
        assumed: ["..."]                      # what we assumed where the paper is ambiguous
        deviations: ["..."]                   # one sentence per difference of setting
        cells:                                # table cells set beside our figures
          - {row: {library: opacus, epochs: 15, private: true}, column: accuracy_pct,
             setting: "15 epochs · DP (noise 1.0)", backend: torch, metric: accuracy}
        trends:                               # the paper's trends, checked against ours
          - {claim: "...", metric: accuracy, row: {...}, points: [{column, setting}, ...]}

``row`` picks exactly one row of the table by the values of some of its columns; ``column`` is
the printed figure; ``setting`` a setting of the grid (its axis labels joined); ``backend``
optional (without it the cell is compared with every backend of the grid); ``metric`` one of
:data:`METRICS` (our value is scaled to the paper's units); ``not_comparable`` optional: why the
cell cannot be judged (its verdict is then "not comparable" with that reason). A trend's points
are checked as :mod:`compare.reporting.reproduction` says. An entry without ``table`` states
instead, in ``no_table``, why no figure can be set beside ours. The paper's numbers are shown as
printed; nothing is corrected or invented.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from compare.bundled import bundled_names, load_bundled
from dpcore.errors import ConfigError

#: Our metric name -> (RunResult-frame column, factor to the paper's unit, description).
METRICS: dict[str, tuple[str, float, str]] = {
    "accuracy": ("accuracy", 100.0, "test accuracy, %"),
    "epsilon": ("epsilon", 1.0, "epsilon (shared accountant, RDP)"),
    "average_drop": ("average_drop", 1.0, "Average Drop, %"),
    "increase_in_confidence": ("increase_in_confidence", 1.0, "Increase in Confidence, %"),
    "masked_score": ("masked_score", 100.0, "score on saliency-masked inputs, %"),
    "auc": ("auc", 100.0, "test AUC, %"),
}
ENTRY_KEYS = {"paper", "table", "cells", "assumed", "deviations", "no_table", "trends"}
CELL_KEYS = {"row", "column", "setting", "backend", "metric", "not_comparable"}


@dataclass(frozen=True)
class PaperTable:
    """One table of a bundled paper file: its columns and rows as printed."""

    paper: str
    name: str
    source: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    setting: Mapping[str, Any]
    notes: tuple[str, ...]


def paper_names() -> list[str]:
    """Names of the bundled paper files (``compare/published/*.yaml``)."""
    return bundled_names("published")


def load_paper(name: str) -> dict[str, Any]:
    """The raw mapping of a bundled paper file; unknown names list the valid ones."""
    return load_bundled("published", name, kind="paper", unknown="is not bundled")


def paper_table(paper: str, table: str) -> PaperTable:
    """Table ``table`` of paper ``paper``; unknown tables list the valid ones."""
    raw = load_paper(paper)
    tables = {k: v for k, v in (raw.get("tables") or {}).items()
              if isinstance(v, Mapping) and "columns" in v and "rows" in v}
    if table not in tables:
        raise ConfigError(f"paper {paper!r} has no table {table!r}; valid: "
                          f"{', '.join(tables) or 'none'}")
    spec = tables[table]
    notes = raw.get("notes") or []
    return PaperTable(
        paper=paper, name=table, source=" ".join(str(raw.get("source", "")).split()),
        columns=tuple(str(c) for c in spec["columns"]),
        rows=tuple(tuple(row) for row in spec["rows"]),
        setting={**(raw.get("setting") or {}), **(spec.get("setting") or {})},
        notes=tuple(" ".join(str(n).split()) for n in (notes if isinstance(notes, list)
                                                        else [notes])),
    )


def find_row(table: PaperTable, row: Mapping[str, Any]) -> int:
    """Index of the one row of ``table`` whose columns equal ``row``'s values."""
    for key in row:
        if key not in table.columns:
            raise ConfigError(f"row key {key!r} is not a column of {table.paper}/{table.name}; "
                              f"valid: {', '.join(table.columns)}")
    hits = [i for i, values in enumerate(table.rows)
            if all(values[table.columns.index(k)] == v for k, v in row.items())]
    if len(hits) != 1:
        raise ConfigError(f"row {dict(row)} matches {len(hits)} rows of "
                          f"{table.paper}/{table.name}; it must match exactly one")
    return hits[0]


def validate_published(entries: Sequence[Mapping[str, Any]], settings: Iterable[str],
                       backends: Iterable[str]) -> None:
    """Check every ``published:`` entry against the bundled tables and the grid.

    Raises:
        ConfigError: one line naming the entry (and cell) and what would be valid: an unknown
            paper, table, row, column, setting, backend or metric, or a missing key.
    """
    settings, backends = list(dict.fromkeys(settings)), list(backends)
    for i, entry in enumerate(entries):
        where = f"published entry {i}"
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{where} must be a mapping, got {entry!r}")
        where = f"published entry {i} ({entry.get('paper')}/{entry.get('table')})"
        unknown = sorted(set(entry) - ENTRY_KEYS, key=str)
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {', '.join(map(str, unknown))}; "
                              f"valid: {', '.join(sorted(ENTRY_KEYS))}")
        for key in ("assumed", "deviations"):
            if not isinstance(entry.get(key, []), list):
                raise ConfigError(f"{where}: {key} must be a list of sentences")
        try:
            if "paper" not in entry:
                raise ConfigError("missing key 'paper'")
            if entry.get("table") is None:
                load_paper(str(entry["paper"]))
                if not entry.get("no_table"):
                    raise ConfigError("without 'table', say why in 'no_table'")
                continue
            table = paper_table(str(entry["paper"]), str(entry["table"]))
            cells = entry.get("cells")
            if not isinstance(cells, list) or not cells:
                raise ConfigError("'cells' must be a non-empty list")
            for j, cell in enumerate(cells):
                _validate_cell(j, cell, table, settings, backends)
            _validate_trends(entry.get("trends"), table, settings)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None


def _validate_trends(trends: Any, table: PaperTable, settings: list[str]) -> None:
    if trends is None:
        return
    if not isinstance(trends, list):
        raise ConfigError("'trends' must be a list of trends")
    for trend in trends:
        validate_trend(trend, table.columns, settings)
        try:
            for point in trend["points"]:
                find_row(table, point.get("row") or trend.get("row") or {})
        except ConfigError as exc:
            raise ConfigError(f"trend {trend['claim']!r}: {exc}") from None


def _validate_cell(j: int, cell: Any, table: PaperTable, settings: list[str],
                   backends: list[str]) -> None:
    if not isinstance(cell, Mapping):
        raise ConfigError(f"cell {j} must be a mapping, got {cell!r}")
    missing = sorted({"row", "column", "setting", "metric"} - set(cell))
    unknown = sorted(set(cell) - CELL_KEYS, key=str)
    if missing or unknown:
        raise ConfigError(f"cell {j}: missing {', '.join(missing) or 'nothing'}, unknown "
                          f"{', '.join(map(str, unknown)) or 'nothing'}; "
                          f"keys: {', '.join(sorted(CELL_KEYS))}")
    if not isinstance(cell["row"], Mapping):
        raise ConfigError(f"cell {j}: row must map columns to values, got {cell['row']!r}")
    try:
        find_row(table, cell["row"])
    except ConfigError as exc:
        raise ConfigError(f"cell {j}: {exc}") from None
    if cell["column"] not in table.columns:
        raise ConfigError(f"cell {j}: column {cell['column']!r} is not in the table; "
                          f"valid: {', '.join(table.columns)}")
    if cell["setting"] not in settings:
        raise ConfigError(f"cell {j}: setting {cell['setting']!r} is not in the grid; "
                          f"valid: {'; '.join(settings)}")
    if "backend" in cell and cell["backend"] not in backends:
        raise ConfigError(f"cell {j}: backend {cell['backend']!r} is not in the grid; "
                          f"valid: {', '.join(backends)}")
    if cell["metric"] not in METRICS:
        raise ConfigError(f"cell {j}: metric {cell['metric']!r} is not known; "
                          f"valid: {', '.join(METRICS)}")



# -- trends (checked here; judged by compare.reporting.reproduction) ------------------------
TREND_KEYS = {"claim", "metric", "row", "points", "explanations", "backend"}
POINT_KEYS = {"column", "columns", "setting", "settings", "row"}

#: Trend metrics: our metric -> (the runs' column, or for local-DP runs the column of the test
#: images named; factor to the paper's unit; unit). ``accuracy_clean_test`` and
#: ``accuracy_privatised_test`` score a local-DP run on clean / privatised test images and
#: every other run on its test images (which are clean).
TREND_METRICS: dict[str, tuple[str, float, str]] = {
    **METRICS,
    "accuracy_clean_test": ("accuracy_clean_test", 100.0, "test accuracy on clean test images, %"),
    "accuracy_privatised_test": ("accuracy_privatised_test", 100.0,
                                 "test accuracy, local DP on privatised test images, %"),
}


def points_of(trend: Mapping[str, Any]
              ) -> list[tuple[Mapping[str, Any], list[str], list[str]]]:
    """(the paper's row, its columns, our settings) of each point of a ``trends:`` entry."""
    out = []
    for point in trend["points"]:
        columns = point.get("columns") or [point["column"]]
        settings = point.get("settings") or [point["setting"]]
        out.append((point.get("row") or trend.get("row") or {}, [str(c) for c in columns],
                    [str(s) for s in settings]))
    return out


def validate_trend(trend: Any, table_columns: Sequence[str], settings: Sequence[str]) -> None:
    """Raise :class:`~dpcore.errors.ConfigError` (one line) for a malformed ``trends:``
    entry: unknown keys, fewer than 2 points, an unknown column, setting or metric."""
    if not isinstance(trend, Mapping):
        raise ConfigError(f"a trend must be a mapping, got {trend!r}")
    missing = sorted({"claim", "metric", "points"} - set(trend))
    unknown = sorted(set(trend) - TREND_KEYS, key=str)
    if missing or unknown:
        raise ConfigError(f"trend {trend.get('claim')!r}: missing {', '.join(missing) or 'nothing'}"
                          f", unknown {', '.join(map(str, unknown)) or 'nothing'}; keys: "
                          f"{', '.join(sorted(TREND_KEYS))}")
    if trend["metric"] not in TREND_METRICS:
        raise ConfigError(f"trend {trend['claim']!r}: metric {trend['metric']!r} is not known; "
                          f"valid: {', '.join(TREND_METRICS)}")
    points = trend["points"]
    if not isinstance(points, list) or len(points) < 2:
        raise ConfigError(f"trend {trend['claim']!r}: needs at least 2 points")
    for point in points:
        if not isinstance(point, Mapping) or set(point) - POINT_KEYS or not (
                {"column", "columns"} & set(point)) or not ({"setting", "settings"} & set(point)):
            raise ConfigError(f"trend {trend['claim']!r}: a point needs column(s) and "
                              f"setting(s), got {point!r}")
    for point in points:
        if "row" not in trend and "row" not in point:
            raise ConfigError(f"trend {trend['claim']!r}: a point needs a row (or the trend one)")
    for _, columns, names in points_of(trend):
        for column in columns:
            if column not in table_columns:
                raise ConfigError(f"trend {trend['claim']!r}: column {column!r} is not in the "
                                  f"table; valid: {', '.join(table_columns)}")
        for name in names:
            if name not in settings:
                raise ConfigError(f"trend {trend['claim']!r}: setting {name!r} is not in the "
                                  f"grid; valid: {'; '.join(settings)}")


__all__ = ["METRICS", "POINT_KEYS", "TREND_KEYS", "TREND_METRICS", "PaperTable", "find_row",
           "load_paper", "paper_names", "paper_table", "points_of", "validate_published",
           "validate_trend"]
