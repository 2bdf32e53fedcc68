"""How sure the gap attribution is: the share of the gap its factors explain, with a bootstrap
interval, and whether the grid tests that the factors add up.

**Share** (:func:`gap_share`). The factors counted toward the gap explain
``sum(direction * effect)`` accuracy points of the stock TF Privacy - Opacus gap; their share
is that sum over the gap. Both are ratios of means over seeds, so the interval is a
percentile bootstrap over seeds (:data:`~compare.reporting.stats.BOOTSTRAP_RESAMPLES`
resamples, seeded): each configuration's seeds are resampled with replacement, and
configurations whose runs pair by seed (one seed gives both the same batches and initial
weights: :func:`~compare.reporting.attribution.shares_batches_and_init`) are resampled with
the same seeds, so a paired effect keeps its pairing. A resample whose gap is 0 has no share
and is left out (counted in :attr:`GapShare.undefined`). Hand-written: scipy's bootstrap
resamples independent samples or one paired set, not groups of which some pair.

**Additivity** (:func:`interaction_tests`). Adding effects measured one factor at a time
assumes that the factors do not interact. The grid tests it where it has an *interaction
run*: a factor run that changes several factors each of which another factor run changes
alone. Its effect minus the sum of theirs is the interaction, with its Welch-Satterthwaite t
interval (:func:`~compare.reporting.stats.contrast_interval`); an interval that excludes 0
shows the factors do not add up. Without such a run the additivity is an assumption, and the
report says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from compare.reporting.attribution import (
    Attribution,
    Configuration,
    Effect,
    shares_batches_and_init,
)
from compare.reporting.stats import (
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    CONFIDENCE,
    Interval,
    contrast_interval,
)


@dataclass(frozen=True)
class GapShare:
    """The gap, the points its counted factors explain and their share, each a mean with its
    95% percentile bootstrap interval over seeds (NaN bounds without one)."""

    gap: Interval
    explained: Interval
    share: Interval
    resamples: int
    undefined: int  #: resamples left out because their gap was 0


def _pairing_groups(configs: Sequence[Configuration]) -> list[list[Configuration]]:
    """``configs`` grouped so that configurations whose runs pair by seed share a group."""
    groups: list[list[Configuration]] = []
    for c in configs:
        for group in groups:
            if shares_batches_and_init(group[0], c):
                group.append(c)
                break
        else:
            groups.append([c])
    return groups


def gap_share(a: Attribution, resamples: int = BOOTSTRAP_RESAMPLES,
              seed: int = BOOTSTRAP_SEED) -> GapShare | None:
    """The share of the gap the counted factors explain (the module's bootstrap); None when
    there is no gap or no counted factor."""
    if a.gap is None or not a.counted or a.gap.sides is None or any(
            e.sides is None for e in a.counted):
        return None
    terms: list[tuple[float, Configuration]] = [(1.0, a.gap.sides[0]), (-1.0, a.gap.sides[1])]
    explained_terms: list[tuple[float, Configuration]] = []
    for e in a.counted:
        assert e.sides is not None
        explained_terms += [(float(e.direction), e.sides[0]), (-float(e.direction), e.sides[1])]
    configs = list({id(c): c for _, c in [*terms, *explained_terms]}.values())
    rng = np.random.default_rng(seed)
    draws: dict[int, np.ndarray] = {}  # id(config) -> [resamples] resampled means
    for group in _pairing_groups(configs):
        seeds = sorted(set.intersection(*(set(c.accuracy) for c in group)))
        if len(seeds) < 2:
            return None
        picks = rng.integers(0, len(seeds), size=(resamples, len(seeds)))
        for c in group:
            values = np.asarray([c.accuracy[s] for s in seeds], float)
            draws[id(c)] = values[picks].mean(axis=1)
    gap = sum(coef * draws[id(c)] for coef, c in terms)
    explained = sum(coef * draws[id(c)] for coef, c in explained_terms)
    defined = gap != 0
    share = explained[defined] / gap[defined]
    point_gap = a.gap.interval.mean
    point_explained = float(a.explained or 0.0)
    return GapShare(
        gap=_percentile(point_gap, gap), explained=_percentile(point_explained, explained),
        share=_percentile(point_explained / point_gap if point_gap else math.nan, share),
        resamples=resamples, undefined=int((~defined).sum()))


def _percentile(mean: float, draws: np.ndarray) -> Interval:
    if draws.size < 2:
        return Interval(mean, math.nan, math.nan, int(draws.size), "bootstrap")
    tail = 100 * (1 - CONFIDENCE) / 2
    low, high = np.percentile(draws, [tail, 100 - tail])
    return Interval(mean, float(low), float(high), int(draws.size), "bootstrap")


@dataclass(frozen=True)
class Interaction:
    """An interaction run's effect minus the sum of the single-factor effects it combines."""

    combined: Effect
    parts: tuple[Effect, ...]
    interval: Interval  #: the interaction, with its 95% Welch-Satterthwaite t interval

    @property
    def shown(self) -> bool:
        """True when the interval excludes 0: the factors do not add up here."""
        i = self.interval
        return not math.isnan(i.low) and (i.low > 0 or i.high < 0)


def interaction_tests(a: Attribution) -> list[Interaction]:
    """Every factor run that changes exactly the union of the factors of two or more other
    factor runs of the same backend, each changing one factor, tested against their sum."""
    effects = [e for e in a.factor_effects if e.parts and e.sides is not None]
    single = {}
    for e in effects:
        if len(e.names) == 1 and e.sides is not None:
            single.setdefault((e.sides[0].backend, e.names[0]), e)
    out = []
    for e in effects:
        if len(e.names) < 2 or e.sides is None:
            continue
        parts = [single.get((e.sides[0].backend, name)) for name in e.names]
        if any(p is None for p in parts):
            continue
        found = tuple(p for p in parts if p is not None)
        contrast = [*e.parts, *[(-coef, values) for p in found for coef, values in p.parts]]
        out.append(Interaction(e, found, contrast_interval(contrast)))
    return out


def additivity_sentence(a: Attribution) -> str:
    """What the report says of the factors adding up: the interaction tests the grid allows,
    or that it allows none and the sum is an assumption."""
    tests = interaction_tests(a)
    if not tests:
        return ("Additivity is assumed, not tested: the grid has no interaction run (a factor "
                "run that changes two or more factors each of which another run changes "
                "alone), so the explained points and share add effects measured one factor "
                "at a time.")
    parts = []
    for t in tests:
        i = t.interval
        interval = ("no interval" if math.isnan(i.low) else
                    f"95% t interval {100 * i.low:+.2f} to {100 * i.high:+.2f}")
        verdict = "the factors do not add up" if t.shown else "no interaction shown"
        parts.append(f"{t.combined.label} minus "
                     f"{' + '.join(p.label for p in t.parts)}: {100 * i.mean:+.2f} points "
                     f"({interval}; {verdict})")
    return "Additivity tested by the grid's interaction runs: " + "; ".join(parts) + "."


__all__ = ["GapShare", "Interaction", "additivity_sentence", "gap_share", "interaction_tests"]
