"""Grids of runs: a base config, axes of partial overrides, seeds and backends.

A grid file (YAML; the presets in ``compare/presets`` are grid files) looks like::

    name: demo
    description: what it reproduces
    base:                       # a partial RunConfig
      data: {name: mnist5k}
      model: {name: cnn4}
      train: {epochs: 3, batch_size: 128, lr: 0.5}
    axes:                       # the cartesian product of all axes is run
      privacy:
        - {label: "eps=1", privacy: {mechanism: dpsgd-gaussian, target_epsilon: 1.0}}
        - {label: non-private, privacy: {mechanism: none}}
        # an entry may add `backends: [tf]`: its cells run only on those backends
    seeds: 1                    # seeds 0..K-1 (or a list)
    backends: [tf, torch]
    perf: {physical_batch_size: 256}     # performance-only, not part of any config hash
    evaluation: {faithfulness_subset: 500, montage_images: 4}
    published: []               # optional: the papers' figures set beside ours in the report
                                # (see compare.reporting.published; checked here, before any
                                # training, against compare/published and the grid's settings)
    audit_companions: {...}     # optional: one audited extra run per configuration, run
                                # after the others (see compare.companions)
    selection: {...}            # optional: how the hyper-parameters were selected, and
                                # whether that selection's privacy is accounted (see
                                # dpcore.tuning.selection); said in the report, in no config

Every cell becomes one :class:`RunConfig`, run identically on each backend.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compare.bundled import bundled_names, load_bundled
from compare.companions import CompanionSpec, companion_labels, companion_of, parse_companions
from compare.reporting.published import validate_published
from dpcore.config import PerfSpec, RunConfig, apply_overrides, load_mapping_file
from dpcore.defaults import fill_defaults
from dpcore.errors import ConfigError
from dpcore.results import BACKENDS, RunResult, run_id
from dpcore.tuning import parse_selections

GRID_KEYS = {
    "name", "description", "base", "axes", "seeds", "backends", "perf", "evaluation",
    "published", "notes", "version", "audit_companions", "selection",
}
EVALUATION_DEFAULTS: dict[str, Any] = {"faithfulness_subset": 500, "montage_images": 4,
                                       "faithfulness": True, "audit": False}


#: Separator of a cell's axis labels in its setting name (not ``|``: it splits Markdown cells).
SETTING_SEPARATOR = " · "


def setting_label(labels: Mapping[str, str]) -> str:
    """A cell's axis labels joined into its setting name, e.g. ``"15 epochs · non-private"``."""
    return SETTING_SEPARATOR.join(labels.values())


def order_labels(labels: Mapping[str, str], axis_names: Sequence[str]) -> dict[str, str]:
    """``labels`` in the grid's axis order (``axis_names`` first, in order; any other axis
    after them, as stored). A stored RunResult's labels come back in alphabetical order (its
    JSON is written with sorted keys), while the setting name, the plot panels (every axis
    but the last) and the swept point (the last axis) follow the preset's order."""
    ordered = {name: labels[name] for name in axis_names if name in labels}
    ordered.update((k, v) for k, v in labels.items() if k not in ordered)
    return ordered


@dataclass(frozen=True)
class GridCell:
    """One configuration of a grid: its config, its labels along each axis, and its seed."""

    config: RunConfig
    labels: dict[str, str]
    #: the backends this cell runs on (an axis entry's ``backends:`` list), None = all
    backends: tuple[str, ...] | None = None
    #: dotted config key -> value of every key the bench's defaults filled in
    #: (:func:`dpcore.defaults.fill_defaults`; recorded in each run's ``defaults``)
    defaults: dict[str, Any] = field(default_factory=dict)
    #: the config hash of the main run this cell audits, for an audit companion
    #: (:mod:`compare.companions`); None for the grid's own cells
    audits: str | None = None

    @property
    def setting(self) -> str:
        """The cell's labels joined, e.g. ``"eps=1 · cnn4"`` (seed excluded)."""
        return setting_label(self.labels)


@dataclass(frozen=True)
class Grid:
    """An expanded grid: cells x backends, plus the grid-level options."""

    name: str
    description: str
    cells: tuple[GridCell, ...]
    backends: tuple[str, ...]
    perf: PerfSpec
    evaluation: dict[str, Any] = field(default_factory=dict)
    published: tuple[dict[str, Any], ...] = ()
    notes: str = ""
    #: how the hyper-parameters were selected: the checked ``selection:`` block, or list of
    #: blocks each naming its settings (:func:`dpcore.tuning.parse_selections`); None when the
    #: grid has none. It describes the grid and is never part of a cell's config, so it moves
    #: no config hash.
    selection: dict[str, Any] | list[dict[str, Any]] | None = None
    #: audit companion cells (:mod:`compare.companions`), run after every cell of ``cells``
    companions: tuple[GridCell, ...] = ()

    @property
    def axis_names(self) -> tuple[str, ...]:
        """The grid's axes in the preset's order (the last one is the swept axis)."""
        return tuple(self.cells[0].labels) if self.cells else ()

    def companion_runs(self) -> dict[str, str]:
        """Audit companion run id -> the run id of the main run it audits (same backend and
        seed; :mod:`compare.companions`)."""
        return {run_id(cell.config.config_hash, backend): run_id(cell.audits, backend)
                for cell, backend in self.runs() if cell.audits is not None}

    def runs(self) -> list[tuple[GridCell, str]]:
        """All (cell, backend) pairs, backends alternating within a cell; a cell whose axis
        entries name ``backends`` runs only on those. The audit companions come last."""
        return [(cell, backend) for cell in (*self.cells, *self.companions)
                for backend in self.backends
                if cell.backends is None or backend in cell.backends]


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``base`` with ``override`` merged in (mappings merged recursively)."""
    out = json.loads(json.dumps(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = json.loads(json.dumps(value))
    return out


def _seeds(raw: Any) -> list[int]:
    if isinstance(raw, int) and not isinstance(raw, bool):
        if raw < 1:
            raise ConfigError(f"seeds={raw} is not valid; valid: an integer >= 1 or a list")
        return list(range(raw))
    if isinstance(raw, list) and raw and all(isinstance(s, int) and s >= 0 for s in raw):
        return list(raw)
    raise ConfigError(f"seeds={raw!r} is not valid; valid: an integer >= 1 or a list of seeds")


def _backends(raw: Any) -> tuple[str, ...]:
    """The backends a grid, an axis entry or ``--backends`` names (aliases such as ``opacus``
    or ``tensorflow`` accepted), in order, without repeats."""
    from dpcore.names import resolve_backend

    if isinstance(raw, str):
        raw = [b.strip() for b in raw.split(",") if b.strip()]
    if isinstance(raw, tuple):
        raw = list(raw)
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"backends={raw!r} is not valid; valid: a list of {', '.join(BACKENDS)}")
    return tuple(dict.fromkeys(resolve_backend(b, BACKENDS) for b in raw))


def _evaluation(raw: Any) -> dict[str, Any]:
    """The grid's evaluation options over the defaults, checked (names, types, ranges)."""
    raw = raw or {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"grid 'evaluation' must be a mapping, got {raw!r}")
    unknown = sorted(set(raw) - set(EVALUATION_DEFAULTS), key=str)
    if unknown:
        raise ConfigError(
            f"unknown evaluation key(s) {', '.join(map(str, unknown))}; "
            f"valid: {', '.join(EVALUATION_DEFAULTS)}"
        )
    out = {**EVALUATION_DEFAULTS, **raw}
    for key, low in (("faithfulness_subset", 1), ("montage_images", 0)):
        value = out[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(
                f"evaluation.{key}={value!r} is not valid; valid: an integer >= {low}")
    for key in ("faithfulness", "audit"):
        if not isinstance(out[key], bool):
            raise ConfigError(f"evaluation.{key}={out[key]!r} is not valid; valid: true, false")
    return out


def expand_grid(
    raw: Mapping[str, Any], *, seeds: int | None = None, backends: Iterable[str] | None = None,
    overrides: Iterable[str] = (),
) -> Grid:
    """Expand a grid mapping into cells; ``seeds``/``backends`` override the file's values.

    ``overrides`` (``section.key=value``) apply to every cell after the axes.
    """
    if not isinstance(raw, Mapping):
        raise ConfigError(f"a grid must be a mapping, got {type(raw).__name__}")
    unknown = sorted(set(raw) - GRID_KEYS, key=str)
    if unknown:
        raise ConfigError(
            f"unknown grid key(s) {', '.join(map(str, unknown))}; "
            f"valid: {', '.join(sorted(GRID_KEYS))}"
        )
    base = raw.get("base") or {}
    if not isinstance(base, Mapping):
        raise ConfigError(f"grid 'base' must be a mapping (a partial run config), got {base!r}")
    axes = raw.get("axes") or {}
    if not isinstance(axes, Mapping):
        raise ConfigError("grid 'axes' must map axis names to lists of settings")
    axis_values: list[list[tuple[str, str, dict[str, Any], tuple[str, ...] | None]]] = []
    for axis_name, entries in axes.items():
        if not isinstance(entries, list) or not entries:
            raise ConfigError(f"grid axis {axis_name!r} must be a non-empty list")
        values = []
        for i, entry in enumerate(entries):
            if not isinstance(entry, Mapping):
                raise ConfigError(f"grid axis {axis_name!r} entry {i} must be a mapping")
            entry = dict(entry)
            label = str(entry.pop("label", f"{axis_name}={i}"))
            only = entry.pop("backends", None)
            if only is not None:
                only = _backends(only)
            values.append((axis_name, label, entry, only))
        axis_values.append(values)
    seed_list = list(range(seeds)) if seeds is not None else _seeds(raw.get("seeds", 1))
    if seeds is not None and seeds < 1:
        raise ConfigError(f"--seeds={seeds} is not valid; valid: an integer >= 1")
    grid_backends = _backends(list(backends) if backends is not None else raw.get(
        "backends", list(BACKENDS)))
    overrides = list(overrides)
    cells: list[GridCell] = []
    for combo in itertools.product(*axis_values) if axis_values else [()]:
        merged: dict[str, Any] = dict(base)
        labels: dict[str, str] = {}
        only: set[str] | None = None
        for axis_name, label, partial, entry_backends in combo:
            merged = deep_merge(merged, partial)
            labels[axis_name] = label
            if entry_backends is not None:
                only = set(entry_backends) if only is None else only & set(entry_backends)
        if only is not None and not only:
            continue  # axis entries restricted to disjoint backends: no run
        for seed in seed_list:
            given = apply_overrides(deep_merge(merged, {"seed": seed}), overrides)
            cells += _resolved_cells(given, labels, only, grid_backends)
    perf_raw = raw.get("perf") or {}
    if not isinstance(perf_raw, Mapping):
        raise ConfigError(f"grid 'perf' must be a mapping, got {perf_raw!r}")
    try:
        perf = PerfSpec(**{str(k): v for k, v in perf_raw.items()})
    except TypeError as exc:
        raise ConfigError(f"grid 'perf': {exc}") from exc
    evaluation = _evaluation(raw.get("evaluation"))
    published = raw.get("published") or ()
    if not isinstance(published, list | tuple) or not all(
            isinstance(p, Mapping) for p in published):
        raise ConfigError(f"grid 'published' must be a list of mappings, got {published!r}")
    validate_published(published, (cell.setting for cell in cells), BACKENDS)
    selection: Any = raw.get("selection")
    if selection is not None:
        parsed = parse_selections(selection, [cell.setting for cell in cells],
                                  "grid 'selection'")
        selection = ([p.to_dict() for p in parsed] if isinstance(selection, list)
                     else parsed[0].to_dict())
    main = Grid(name="", description="", cells=tuple(cells), backends=grid_backends, perf=perf)
    companions = companion_cells(main.runs(), parse_companions(raw.get("audit_companions")))
    return Grid(
        name=str(raw.get("name", "grid")),
        description=str(raw.get("description", "")),
        cells=tuple(cells),
        backends=grid_backends,
        perf=perf,
        evaluation=evaluation,
        published=tuple(published),
        notes=str(raw.get("notes", "")),
        selection=selection,
        companions=companions,
    )


def companion_cells(runs: Sequence[tuple[GridCell, str]], spec: CompanionSpec | None
                    ) -> tuple[GridCell, ...]:
    """One audit companion cell per main run (``runs``: (cell, backend) in the grid's order)
    that :func:`compare.companions.companion_of` gives canaries; each runs on its main run's
    backend only and names the config it audits (``GridCell.audits``)."""
    out = []
    for cell, backend in runs:
        canaries = companion_of(cell.config, spec)
        if canaries is not None:
            out.append(dataclasses.replace(
                cell, config=cell.config.replace(audit_canaries=canaries),
                labels=companion_labels(cell.labels, canaries), backends=(backend,),
                audits=cell.config.config_hash))
    return tuple(out)


def _resolved_cells(given: Mapping[str, Any], labels: dict[str, str],
                    only: set[str] | None, grid_backends: Sequence[str]) -> list[GridCell]:
    """The cell(s) of one grid point: the user's settings ``given`` completed by the bench's
    defaults (:func:`dpcore.defaults.fill_defaults`, as ``dpcompare train`` completes them).

    Defaults that depend on the backend (``recipe: library`` without a sampling: each library's
    own) can give the backends different configs; the point then becomes one cell per config,
    each restricted to its backends (same labels, so reports still pair them).
    """
    backends = [b for b in grid_backends if only is None or b in only] or sorted(only or ())
    by_hash: dict[str, tuple[RunConfig, dict[str, Any], list[str]]] = {}
    for backend in backends:
        completed, filled = fill_defaults(given, backend)
        config = RunConfig.from_dict(completed)
        by_hash.setdefault(config.config_hash, (config, filled, []))[2].append(backend)
    if len(by_hash) == 1:
        config, filled, _ = next(iter(by_hash.values()))
        return [GridCell(config=config, labels=labels, defaults=filled,
                         backends=None if only is None else tuple(sorted(only)))]
    return [GridCell(config=config, labels=labels, defaults=filled, backends=tuple(group))
            for config, filled, group in by_hash.values()]


def preset_names() -> list[str]:
    """Names of the bundled presets (``compare/presets/*.yaml``)."""
    return bundled_names("presets")


def load_preset(name: str) -> dict[str, Any]:
    """The raw grid mapping of a bundled preset; an unknown name is refused with the closest
    preset (``demoo`` -> ``demo``) and the valid ones."""
    from dpcore.names import did_you_mean

    names = preset_names()
    unknown = "is not known"
    if isinstance(name, str) and name not in names:
        unknown += did_you_mean(name, names)
    return load_bundled("presets", name, kind="preset", unknown=unknown)


@functools.lru_cache(maxsize=16)
def _expanded_preset(name: str) -> Grid:
    """The expanded bundled preset ``name`` (expanded once per process: a report asks for its
    axis order and its published figures)."""
    return expand_grid(load_preset(name))


def bundled_grid_of(results: Iterable[RunResult]) -> Grid | None:
    """The expanded bundled preset that wrote these runs (their RunResult ``grid`` name), or
    None when the runs come from several grids or from no bundled preset."""
    names = {r.grid for r in results}
    if len(names) != 1 or next(iter(names)) not in preset_names():
        return None
    return _expanded_preset(str(next(iter(names))))


def in_axis_order(results: Sequence[RunResult], axis_names: Sequence[str] = ()
                  ) -> list[RunResult]:
    """``results`` with their labels in the grid's axis order (``axis_names``; when empty, the
    order of the bundled preset that wrote them, if any; else as stored). Stored labels come
    back sorted by name, which would make setting names, plot panels and the swept point follow
    the alphabet instead of the preset (the clip-norm sweep's panels were its clip norms)."""
    if not axis_names:
        grid = bundled_grid_of(results)
        axis_names = () if grid is None else grid.axis_names
    if not axis_names:
        return list(results)
    return [dataclasses.replace(r, labels=order_labels(r.labels, axis_names))
            if r.labels else r for r in results]


def with_grid_labels(results: Sequence[RunResult],
                     labels: Mapping[str, Mapping[str, str]] | None) -> list[RunResult]:
    """``results`` named as the grid being reported names them (``labels``: run id -> that
    grid's labels of the run; a run it does not list keeps its stored labels).

    A run is stored once per config hash, with the labels of the grid that trained it: a run
    two presets share (the clip sweep's 'C=1' on cats vs dogs is interpretability-vs-epsilon's
    'gauss eps=1') would otherwise appear in the second preset's report under the first one's
    name, and its published cells would read "not run".
    """
    if not labels:
        return list(results)
    return [dataclasses.replace(r, labels=dict(labels[r.run_id])) if r.run_id in labels else r
            for r in results]


def load_grid_file(path: str | Path) -> dict[str, Any]:
    """A grid file (or a single RunConfig file, treated as a one-cell grid)."""
    raw = load_mapping_file(path)
    if "base" in raw or "axes" in raw:
        return raw
    return {"name": Path(path).stem, "base": raw}
