"""Audit companion runs: one extra, audited run per configuration of a grid.

A one-run audit (:mod:`dpcore.audit`) changes what trains (its canaries are extra examples), so
auditing a grid's own runs would change their configs and hashes. A grid section
``audit_companions`` instead adds, for every configuration, a *companion*: the same config
with ``audit_canaries`` set, at the companion seeds only. The report sets each companion's
audited epsilon beside the claimed and proved epsilon of the configuration it audits
(:mod:`compare.reporting.audited_column`); the configuration's own runs keep their configs,
hashes and committed records. :func:`compare.grid.expand_grid` makes the companion cells;
they come after every main run in :meth:`compare.grid.Grid.runs`, so an interrupted grid
finishes its main runs first.

The section::

    audit_companions:
      seeds: [0]                       # companion seeds (default [0]); an integer K: 0..K-1
      canaries:                        # recipe -> the canaries its configurations audit with
        harmonised: {count: 5000, kind: gradient, guesses: 500}
        library: {count: 5000, kind: input, guesses: 500}

A configuration whose recipe has no entry, or that already audits, gets no companion.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dpcore.config import RECIPES, AuditCanarySpec, RunConfig
from dpcore.errors import ConfigError

#: The label key that marks a companion run (its setting reads e.g.
#: ``"harmonised · audit companion: gradient canaries"``), so that a report made without the
#: grid (``dpcompare report`` on a store) never pools a companion with the runs it audits.
COMPANION_AXIS = "audit companion"

COMPANION_KEYS = ("seeds", "canaries")


@dataclass(frozen=True)
class CompanionSpec:
    """A grid's ``audit_companions`` section, checked.

    Attributes:
        seeds: the seeds of the main runs that get a companion (same seed: same batches and
            initial weights as that main run, plus the canaries).
        canaries: recipe name -> the canaries of its configurations' companions.
    """

    seeds: tuple[int, ...]
    canaries: Mapping[str, AuditCanarySpec]


def parse_companions(raw: Any) -> CompanionSpec | None:
    """The checked ``audit_companions`` section; None when the grid has none.

    Raises:
        ConfigError: not a mapping, an unknown key or recipe, bad seeds, or canaries that
            do not audit (count 0) or are invalid.
    """
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ConfigError(f"grid 'audit_companions' must be a mapping, got {raw!r}")
    unknown = sorted(set(raw) - set(COMPANION_KEYS), key=str)
    if unknown:
        raise ConfigError(f"unknown audit_companions key(s) {', '.join(map(str, unknown))}; "
                          f"valid: {', '.join(COMPANION_KEYS)}")
    seeds = raw.get("seeds", [0])
    if isinstance(seeds, int) and not isinstance(seeds, bool) and seeds >= 1:
        seeds = list(range(seeds))
    if not (isinstance(seeds, list) and seeds
            and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds)):
        raise ConfigError(f"audit_companions.seeds={seeds!r} is not valid; valid: an integer "
                          ">= 1 or a list of seeds")
    canaries = raw.get("canaries")
    if not isinstance(canaries, Mapping) or not canaries:
        raise ConfigError(f"audit_companions.canaries={canaries!r} is not valid; valid: a "
                          f"mapping of recipe ({', '.join(RECIPES)}) to "
                          "{count, kind, guesses}")
    specs: dict[str, AuditCanarySpec] = {}
    for recipe, spec in canaries.items():
        if recipe not in RECIPES:
            raise ConfigError(f"audit_companions.canaries: recipe {recipe!r} is not known; "
                              f"valid: {', '.join(RECIPES)}")
        if not isinstance(spec, Mapping):
            raise ConfigError(f"audit_companions.canaries.{recipe}={spec!r} is not valid; "
                              "valid: a mapping {count, kind, guesses}")
        try:
            specs[recipe] = AuditCanarySpec(**spec)
        except TypeError as exc:
            raise ConfigError(f"audit_companions.canaries.{recipe}: {exc}") from exc
        if not specs[recipe].active:
            raise ConfigError(f"audit_companions.canaries.{recipe}.count=0 audits nothing; "
                              "valid: an integer >= 1")
    return CompanionSpec(seeds=tuple(dict.fromkeys(seeds)), canaries=specs)


def companion_of(config: RunConfig, spec: CompanionSpec | None) -> AuditCanarySpec | None:
    """The canaries of ``config``'s companion: its recipe's, when ``config`` is at a
    companion seed and does not audit already; None when it gets no companion."""
    if spec is None or config.seed not in spec.seeds or config.audit_canaries.active:
        return None
    return spec.canaries.get(config.recipe)


def companion_labels(labels: Mapping[str, str], canaries: AuditCanarySpec) -> dict[str, str]:
    """A companion's labels: the configuration's, plus :data:`COMPANION_AXIS`."""
    return {**labels, COMPANION_AXIS: f"{canaries.kind} canaries"}


__all__ = ["COMPANION_AXIS", "CompanionSpec", "companion_labels", "companion_of",
           "parse_companions"]
