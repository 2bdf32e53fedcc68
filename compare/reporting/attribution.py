"""Gap attribution: which difference between the two libraries' stock recipes moves accuracy.

Computed for any set of runs that differ in their recipe or in a factor (:func:`has_recipe_axis`,
detected from the runs' configs, so no preset key and no special label is needed); the preset
``mnist-gap-attribution`` is the grid made for it. Every role is read from the runs' configs
(:func:`dpcore.recipes.effective_factors`: every factor as the step ran it):

* the **baseline** of a backend: its ``harmonised`` DP-SGD configuration with every factor at
  its default (test accuracy);
* the **stock recipe** of a backend: its ``library`` configuration with the library's own
  sampling and every factor at its default, measured on the test set (when there is none, its
  only ``library`` configuration measured on the test set); other ``library`` configurations
  (the training set, a microbatch count) are tabled, and checked against the published
  figures, but are not stock recipes;
* a **factor run**: a ``harmonised`` configuration with some factors changed; its *effect* is
  its accuracy minus its backend's baseline, paired by seed;
* the **gap**: TF Privacy stock minus Opacus stock accuracy;
* the **published gap**: the paper's TF Privacy minus Opacus accuracy, set against every pair
  of *candidate* recipes (each library's ``library`` configurations: the stock recipe and its
  variants, e.g. microbatches or standardised inputs) with the epsilon proved for each
  (:class:`PublishedGap`): which pair is consistent with the published figures, at what proved
  privacy cost.

Differences are paired by seed only between two configurations that share their batches and
their initial weights for a seed (:func:`shares_batches_and_init`: both harmonised, on one
backend, with the same sampling and the same initialisation); every other difference (a stock
recipe, whose library draws its own batches and initialises its own way; a flip of the
sampling or of the initialisation) uses Welch's unpaired interval (scipy) and says so.
Each effect also has the p-value of the same test (paired t test or Welch's), and the
p-values of all the effects of one attribution (factors, stock recipes, the gap) are
Holm-adjusted together: an effect *moves accuracy* when its adjusted p is below
:data:`~compare.reporting.stats.ALPHA`.
A factor run counts toward the gap when every factor it changes moves from one stock
recipe's value (held by the baseline) to the other's: toward TF Privacy's it adds its
effect, toward Opacus's it subtracts it. Only effects that move accuracy are summed; the
rest of the gap is left unexplained. The sum assumes the factors add up: the share of the
gap they explain, its bootstrap interval and whether the grid tests that assumption come
from :mod:`compare.reporting.attribution_uncertainty`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats

from compare.grid import setting_label
from compare.reporting.collapse import collapse_reason
from compare.reporting.labels import FRAMEWORK_OF, LIBRARY_RECIPE
from compare.reporting.published import METRICS, find_row, paper_table
from compare.reporting.stats import (
    ALPHA,
    CONFIDENCE,
    Interval,
    bootstrap_interval,
    contrast_interval,
    difference_p_value,
    holm_adjusted,
    mean_interval,
)
from dpcore.errors import ConfigError
from dpcore.mechanisms import noises_gradients
from dpcore.recipes import FACTOR_NAMES, LIBRARY_SAMPLING, effective_factors
from dpcore.results import RunResult

#: A configuration "reaches" a published accuracy when its mean over seeds is at least the
#: published figure minus this many accuracy units (0.005 = half a percentage point).
REACH_TOLERANCE = 0.005
LIBRARY_NAMES = {"tf": "TF Privacy", "torch": "Opacus"}
#: Factors whose values the two stock recipes can differ in, for the gap (``eval_split`` is
#: a choice of what is measured, not of how the model is trained).
TRAINING_FACTORS = tuple(f for f in FACTOR_NAMES if f != "eval_split")


class AttributionError(ConfigError):
    """The runs cannot be attributed (a missing baseline, an unknown factor); one line."""


@dataclass(frozen=True)
class Configuration:
    """One (setting, backend) of DP-SGD runs, over its seeds."""

    setting: str
    backend: str
    recipe: str
    trainer: str
    factors: Mapping[str, Any]
    accuracy: Mapping[int, float]
    epsilon_shared: float | None
    library_epsilon: Mapping[str, float]
    claim: str
    reasons: tuple[str, ...]
    #: Seeds whose model collapsed to (almost) one class (:mod:`compare.reporting.collapse`).
    collapsed: int = 0
    #: The epsilon proved for what ran (``privacy.epsilon_proved`` of the record), or None.
    epsilon_proved: float | None = None
    #: Why no epsilon is proved (or the relation it assumes), as recorded.
    proved_note: str = ""

    @property
    def split(self) -> str:
        """``test`` or ``train``: the split the accuracy is measured on."""
        return str(self.factors["eval_split"])

    @property
    def interval(self) -> Interval:
        """Mean accuracy (fraction) with its 95% percentile bootstrap interval over seeds
        (never outside [0, 1]; differences between configurations keep t intervals)."""
        return bootstrap_interval(list(self.accuracy.values()))

    @property
    def at_defaults(self) -> bool:
        """True when every factor is the harmonised recipe's default (Poisson sampling)."""
        return not changed_factors(self.factors, harmonised_defaults(self.backend))

    @property
    def is_stock(self) -> bool:
        """True for a ``library`` run as its library's tutorials run it: their sampling
        (:data:`~dpcore.recipes.LIBRARY_SAMPLING`), every factor at its default, test set."""
        sampling = LIBRARY_SAMPLING.get(self.backend, "poisson")
        return self.recipe == "library" and self.factors == effective_factors(
            "library", self.backend, sampling, {})

    @property
    def name(self) -> str:
        """The setting, with what ran when the setting does not name it: its library for a
        library recipe, its framework for the harmonised step (never a library's name for
        the bench's own step: :func:`compare.reporting.labels.what_ran`)."""
        if self.recipe == LIBRARY_RECIPE:
            library = LIBRARY_NAMES.get(self.backend, self.backend)
            return self.setting if library in self.setting else f"{self.setting} ({library})"
        return f"{self.setting} ({FRAMEWORK_OF.get(self.backend, self.backend)} backend)"


@dataclass(frozen=True)
class Effect:
    """An accuracy difference (fraction) ``minuend - subtrahend`` with its 95% interval."""

    label: str
    kind: str  # "factor" or "stock"
    changed: str
    names: tuple[str, ...]  # the factors that differ between the two sides
    interval: Interval
    paired: bool
    per_seed: Mapping[int, float] | None
    direction: int = 0  # +1 toward TF Privacy's stock, -1 toward Opacus's, 0 neither
    why_not: str = ""
    #: ``((+1, minuend accuracy by seed), (-1, subtrahend accuracy by seed))``: the groups
    #: the effect is a contrast of (for :func:`contrast_interval`).
    parts: tuple[tuple[float, Mapping[int, float]], ...] = ()
    #: The p-value of the effect's test (paired t test or Welch's); NaN without one.
    p_value: float = math.nan
    #: ``p_value`` Holm-adjusted over the attribution's effects (:func:`attribute`).
    p_holm: float = math.nan
    #: The two configurations the effect compares (minuend, subtrahend), when it has them.
    sides: tuple[Configuration, Configuration] | None = None

    @property
    def significant(self) -> bool:
        """True when the effect moves accuracy: its Holm-adjusted p below
        :data:`~compare.reporting.stats.ALPHA` (where it has one; else its 95% interval
        excludes 0); never with fewer than 2 values."""
        i = self.interval
        if i.n < 2 or math.isnan(i.low):
            return False
        if not math.isnan(self.p_holm):
            return self.p_holm < ALPHA
        return i.low > 0 or i.high < 0


@dataclass(frozen=True)
class Target:
    """A published accuracy figure and the configurations that reach it."""

    description: str
    value: float  # fraction
    reached_by: tuple[Configuration, ...]
    closest: Configuration | None
    #: The library whose runs are compared with the figure ("" = every run).
    library: str = ""


@dataclass(frozen=True)
class CandidatePair:
    """One TF Privacy and one Opacus candidate recipe, and their accuracy difference."""

    tf: Configuration
    torch: Configuration
    gap: Effect
    #: True / False: the published gap lies inside / outside the pair's 95% interval; None
    #: when the pair has no interval (fewer than 2 seeds on a side).
    consistent: bool | None


@dataclass(frozen=True)
class PublishedGap:
    """The paper's TF Privacy minus Opacus accuracy, and every pair of candidate recipes."""

    description: str
    tf_value: float  # fraction
    torch_value: float  # fraction
    pairs: tuple[CandidatePair, ...]

    @property
    def value(self) -> float:
        """The published gap (fraction): TF Privacy's figure minus Opacus's."""
        return self.tf_value - self.torch_value

    def closest(self, backend: str) -> Configuration | None:
        """The candidate of ``backend`` whose mean accuracy is nearest its published figure."""
        value = self.tf_value if backend == "tf" else self.torch_value
        own = {id(c): c for p in self.pairs for c in (p.tf, p.torch) if c.backend == backend}
        return min(own.values(), key=lambda c: abs(c.interval.mean - value), default=None)


@dataclass(frozen=True)
class Attribution:
    """Everything the report's gap-attribution section shows."""

    configurations: tuple[Configuration, ...]
    baselines: Mapping[str, Configuration]
    stock: Mapping[str, Configuration]
    factor_effects: tuple[Effect, ...]
    stock_effects: tuple[Effect, ...]
    gap: Effect | None
    counted: tuple[Effect, ...] = ()
    explained: float | None = None
    unexplained: Interval | None = None
    untested: tuple[str, ...] = ()
    targets: tuple[Target, ...] = field(default=())
    published_gaps: tuple[PublishedGap, ...] = field(default=())


# -- reading the runs ------------------------------------------------------------------------
def run_factors(result: RunResult) -> dict[str, Any]:
    """Every factor of a run as its step ran it, from its stored config.

    Raises:
        AttributionError: the config names a factor this version does not know.
    """
    config = result.config
    try:
        return effective_factors(str(config.get("recipe", "harmonised")), result.backend,
                                 str(config.get("privacy", {}).get("sampling", "poisson")),
                                 dict(config.get("factors") or {}))
    except ConfigError as exc:
        raise AttributionError(f"run {result.run_id}: {exc}") from None


def proved_of(result: RunResult) -> tuple[float | None, str]:
    """The epsilon proved for what a run ran, and the reason (why none, or the basis).

    As recorded in the run (``privacy.epsilon_proved``), or computed from its stored config
    and privacy entry by the same rules (:func:`dpcore.proved.figures_of_result`) for a record
    without ``privacy.epsilon_proved``.
    """
    from dpcore.proved import figures_of_result

    figures = figures_of_result(result)
    value = figures.get("epsilon_proved")
    note = str(figures.get("epsilon_proved_reason") or "")
    return (None if value is None else float(value)), note


def _is_dpsgd(result: RunResult) -> bool:
    return noises_gradients(result.config.get("privacy", {}).get("mechanism"))


def configurations(results: Sequence[RunResult]) -> tuple[Configuration, ...]:
    """The finished DP-SGD runs grouped by (setting, backend), in the order first seen."""
    groups: dict[tuple[str, str], list[RunResult]] = {}
    for r in results:
        if r.status == "finished" and _is_dpsgd(r) and r.metrics.get("accuracy") is not None:
            setting = setting_label(r.labels) if r.labels else r.config_hash
            groups.setdefault((setting, r.backend), []).append(r)
    out = []
    for (setting, backend), runs in groups.items():
        first = min(runs, key=lambda r: r.seed)
        factors = run_factors(first)
        for r in runs:
            if run_factors(r) != factors:
                raise AttributionError(
                    f"the runs of {setting!r} on {backend} differ in their factors (run "
                    f"{r.run_id}: {describe_change(run_factors(r), factors)}); one setting "
                    "must be one configuration over seeds")
        record = first.recipe or {}
        claim = record.get("privacy_claim") or {}
        privacy = first.privacy or {}
        as_run = privacy.get("as_run") or {}
        shared = as_run.get("epsilon_rdp", privacy.get("epsilon_rdp"))
        own = {str(k): float(v) for k, v in (privacy.get("library_epsilon") or {}).items()
               if v is not None}
        proved, proved_note = proved_of(first)
        out.append(Configuration(
            setting=setting, backend=backend,
            recipe=str(first.config.get("recipe", "harmonised")),
            trainer=str(record.get("trainer", "")),
            factors=factors,
            accuracy={r.seed: float(r.metrics["accuracy"]) for r in runs},
            epsilon_shared=None if shared is None else float(shared),
            library_epsilon=own,
            claim=str(claim.get("status", "not recorded (no recipe.privacy_claim in the result)")),
            reasons=tuple(str(x) for x in claim.get("reasons") or ()),
            collapsed=sum(collapse_reason(r.metrics) is not None for r in runs),
            epsilon_proved=proved, proved_note=proved_note,
        ))
    return tuple(sorted(out, key=_reading_order))


def _reading_order(c: Configuration) -> tuple[int, str]:
    """Stock recipes (test, then training set), harmonised baselines, then factor runs; TF
    Privacy before Opacus within each; a stable sort keeps the runs' order otherwise."""
    if c.recipe == "library":
        return (0 if c.split == "test" else 1), c.backend
    return (2 if c.at_defaults else 3), c.backend


def has_recipe_axis(results: Sequence[RunResult]) -> bool:
    """True when the finished DP-SGD runs differ in recipe or in some factor."""
    try:
        configs = configurations(results)
    except AttributionError:
        return True  # the section will say what is wrong
    kinds = {(c.recipe, tuple(sorted(c.factors.items(), key=str))) for c in configs}
    return len(kinds) > 1


# -- differences -----------------------------------------------------------------------------
def shares_batches_and_init(a: Configuration, b: Configuration) -> bool:
    """True when one seed gives both configurations the same batches and initial weights.

    Only the harmonised recipe draws its batches from the bench's seeded sampler and its
    initial weights from the run seed, so two harmonised configurations on one backend with
    the same sampling and the same initialisation share both; a flip of either, or any
    ``library`` configuration (its library draws its own batches and initialises its own way),
    does not. (Each backend still draws its own noise, so even a shared pair differs in noise.)
    """
    return (a.backend == b.backend and a.recipe == b.recipe == "harmonised"
            and a.factors.get("sampling") == b.factors.get("sampling")
            and a.factors.get("init") == b.factors.get("init"))


def difference(a: Mapping[int, float], b: Mapping[int, float], *, pair: bool = True
               ) -> tuple[Interval, bool, dict[int, float] | None]:
    """``mean(a) - mean(b)`` with its 95% interval: paired by seed on the common seeds when
    ``pair`` (the two sides share batches and initial weights per seed), else Welch's unpaired
    t interval (NaN bounds with fewer than 2 values on a side).

    Returns:
        (interval, paired, per-seed differences or None).
    """
    common = sorted(set(a) & set(b)) if pair else []
    if common:
        diffs = {s: a[s] - b[s] for s in common}
        return mean_interval(list(diffs.values())), True, diffs
    xa, xb = np.asarray(list(a.values()), float), np.asarray(list(b.values()), float)
    mean = float(xa.mean() - xb.mean()) if xa.size and xb.size else math.nan
    n = int(min(xa.size, xb.size))
    if n < 2:
        return Interval(mean, math.nan, math.nan, n), False, None
    ci = stats.ttest_ind(xa, xb, equal_var=False).confidence_interval(CONFIDENCE)
    return Interval(mean, float(ci.low), float(ci.high), n), False, None


def changed_factors(run: Mapping[str, Any], base: Mapping[str, Any]) -> list[str]:
    """Names of the factors whose values differ, in :data:`FACTOR_NAMES` order."""
    return [f for f in FACTOR_NAMES if run.get(f) != base.get(f)]


def describe_change(run: Mapping[str, Any], base: Mapping[str, Any]) -> str:
    """``"sampling: poisson → shuffle; init: neutral → torch"`` (or ``"none"``)."""
    names = changed_factors(run, base)
    return "; ".join(f"{f}: {base.get(f)} → {run.get(f)}" for f in names) or "none"


def direction(run: Mapping[str, Any], base: Mapping[str, Any],
              stock: Mapping[str, Configuration]) -> tuple[int, str]:
    """+1 when the run moves every changed factor from Opacus's stock value (the baseline's)
    to TF Privacy's, -1 for the reverse, else 0 with the reason."""
    if "tf" not in stock or "torch" not in stock:
        return 0, "both stock recipes are needed to tell a factor's direction"
    tf, torch = stock["tf"].factors, stock["torch"].factors
    names = changed_factors(run, base)
    if "eval_split" in names:
        return 0, "it changes what is measured (the split), not how the model is trained"
    for sign, to, frm in ((1, tf, torch), (-1, torch, tf)):
        if all(run[f] == to[f] and base[f] == frm[f] for f in names):
            return sign, ""
    for f in names:
        if run[f] not in (tf[f], torch[f]):
            return 0, f"neither stock recipe uses {f}={run[f]}"
    for f in names:
        if tf[f] == torch[f]:
            return 0, f"both stock recipes use {f}={tf[f]}, the baseline {base[f]}"
    return 0, "its factors do not all move from one stock recipe's values to the other's"


# -- the attribution -------------------------------------------------------------------------
def attribute(configs: Sequence[Configuration],
              published: Sequence[Mapping[str, Any]] = ()) -> Attribution:
    """Baselines, effects, the gap and how much of it the significant factors explain.

    Args:
        configs: :func:`configurations` of the runs.
        published: the grid's ``published:`` entries; their accuracy cells become
            :class:`Target` figures.

    Raises:
        AttributionError: no baseline on a backend that has factor runs or a stock recipe,
            or no baseline at all.
    """
    baselines = _one_per_backend(
        "harmonised baselines", [c for c in configs if c.recipe == "harmonised"
                                 and c.at_defaults])
    library = [c for c in configs if c.recipe == "library" and c.split == "test"]
    stock = _one_per_backend("stock recipes (recipe=library, test accuracy)",
                             [c for c in library if c.is_stock] or library)
    needing = [c for c in configs if c.backend not in baselines
               and (c.recipe == "library" or not c.at_defaults)]
    if needing or not baselines:
        backend = needing[0].backend if needing else "any backend"
        names = "; ".join(c.setting for c in needing if c.backend == backend) or "none"
        raise AttributionError(
            f"no harmonised baseline on {backend} (a DP-SGD run with recipe=harmonised and "
            f"every factor at its default, measured on the test set); the configurations that "
            f"need it: {names}")
    factor_effects = []
    for c in configs:
        base = baselines[c.backend]
        if c.recipe != "harmonised" or c is base:
            continue
        sign, why = direction(c.factors, base.factors, stock)
        factor_effects.append(_effect(
            f"{c.setting} − harmonised ({FRAMEWORK_OF.get(c.backend, c.backend)} backend)",
            "factor",
            c, base, sign, why))
    stock_effects = [_effect(f"{LIBRARY_NAMES.get(b, b)} stock − harmonised", "stock", c,
                             baselines[b]) for b, c in stock.items()]
    gap = None
    if "tf" in stock and "torch" in stock:
        gap = _effect("TF Privacy stock − Opacus stock", "stock", stock["tf"], stock["torch"])
    factor_effects, stock_effects, gap = _holm(factor_effects, stock_effects, gap)
    explained = _explain(tuple(configs), baselines, stock, tuple(factor_effects),
                         tuple(stock_effects), gap, targets(published, configs))
    return dataclasses.replace(explained,
                               published_gaps=published_gaps(published, configs))


def _effect(label: str, kind: str, a: Configuration, b: Configuration, sign: int = 0,
            why: str = "") -> Effect:
    """``a - b`` as an :class:`Effect` (:func:`difference`, paired by seed only when the two
    share batches and initial weights), with the factors that differ and the p-value of the
    same test."""
    interval, paired, per_seed = difference(a.accuracy, b.accuracy,
                                            pair=shares_batches_and_init(a, b))
    if per_seed is not None:
        p_value = difference_p_value(list(per_seed.values()))
    else:
        xa, xb = (np.asarray(list(v.values()), float) for v in (a.accuracy, b.accuracy))
        p_value = (float(stats.ttest_ind(xa, xb, equal_var=False).pvalue)
                   if min(xa.size, xb.size) >= 2 and (np.ptp(xa) > 0 or np.ptp(xb) > 0)
                   else math.nan)
    return Effect(label=label, kind=kind, changed=describe_change(a.factors, b.factors),
                  names=tuple(changed_factors(a.factors, b.factors)), interval=interval,
                  paired=paired, per_seed=per_seed, direction=sign, why_not=why,
                  parts=((1.0, a.accuracy), (-1.0, b.accuracy)), p_value=p_value,
                  sides=(a, b))


def _holm(factor_effects: Sequence[Effect], stock_effects: Sequence[Effect],
          gap: Effect | None) -> tuple[list[Effect], list[Effect], Effect | None]:
    """The effects with their p-values Holm-adjusted together (the attribution's family)."""
    every = [*factor_effects, *stock_effects, *([gap] if gap is not None else [])]
    adjusted = holm_adjusted([e.p_value for e in every])
    every = [dataclasses.replace(e, p_holm=float(p)) for e, p in zip(every, adjusted,
                                                                      strict=True)]
    n, m = len(factor_effects), len(stock_effects)
    return every[:n], every[n:n + m], (every[n + m] if gap is not None else None)


def _one_per_backend(role: str, found: Sequence[Configuration]) -> dict[str, Configuration]:
    """The one configuration of each backend in ``found``.

    Raises:
        AttributionError: a backend has several (e.g. a grid that crosses the recipe axis
            with an epochs axis: each panel needs its own attribution).
    """
    out: dict[str, Configuration] = {}
    for c in found:
        if c.backend in out:
            names = "; ".join(x.setting for x in found if x.backend == c.backend)
            raise AttributionError(
                f"several {role} on {c.backend} ({names}); the attribution compares one of "
                "each per framework, so a grid that crosses the recipe axis with another axis "
                "needs one grid per value of that axis")
        out[c.backend] = c
    return out


def harmonised_defaults(backend: str) -> dict[str, Any]:
    """The factors of the harmonised recipe with every factor at its default (Poisson
    sampling): what a baseline has."""
    return effective_factors("harmonised", backend, "poisson", {})


def _explain(configs: tuple[Configuration, ...], baselines: dict[str, Configuration],
             stock: dict[str, Configuration], factor_effects: tuple[Effect, ...],
             stock_effects: tuple[Effect, ...], gap: Effect | None,
             found: tuple[Target, ...]) -> Attribution:
    """Sum the significant effects that point along the gap; the rest is unexplained."""
    counted: list[Effect] = []
    covered: set[str] = set()
    for effect in factor_effects:
        if effect.direction == 0:
            continue
        names = set(effect.names)
        # A factor isolated by an earlier counted run is not counted twice.
        if effect.significant and not names & {n for e in counted for n in e.names}:
            counted.append(effect)
        covered |= names  # isolated by some run, significant or not
    untested = ()
    if "tf" in stock and "torch" in stock:
        tf, torch = stock["tf"].factors, stock["torch"].factors
        untested = tuple(f"{f} ({tf[f]} in TF Privacy's, {torch[f]} in Opacus's)"
                         for f in TRAINING_FACTORS if tf[f] != torch[f] and f not in covered)
    explained = unexplained = None
    if gap is not None:
        explained = float(sum(e.direction * e.interval.mean for e in counted))
        unexplained = Interval(gap.interval.mean - explained, math.nan, math.nan,
                               gap.interval.n)
        seeds = set(gap.per_seed or ())
        for e in counted:
            seeds &= set(e.per_seed or ())
        if gap.per_seed is not None and all(e.per_seed is not None for e in counted) and \
                len(seeds) >= 2:
            rest = [gap.per_seed[s] - sum(e.direction * e.per_seed[s] for e in counted)
                    for s in sorted(seeds)]
            unexplained = mean_interval(rest)
        elif gap.parts and all(e.parts for e in counted):  # unpaired: a contrast of groups
            unexplained = contrast_interval(
                [*gap.parts, *[(-e.direction * c, v) for e in counted for c, v in e.parts]])
    return Attribution(configurations=configs, baselines=baselines, stock=stock,
                       factor_effects=factor_effects, stock_effects=stock_effects, gap=gap,
                       counted=tuple(counted), explained=explained, unexplained=unexplained,
                       untested=untested, targets=found)


# -- published figures -----------------------------------------------------------------------
def targets(published: Sequence[Mapping[str, Any]], configs: Sequence[Configuration]
            ) -> tuple[Target, ...]:
    """Each published accuracy cell of ``published`` and the configurations that reach it
    (:data:`REACH_TOLERANCE`), whatever split they are measured on; a cell that names a
    backend is compared with that backend's configurations only."""
    out = []
    seen: set[tuple[str, str, str]] = set()
    for entry in published:
        if entry.get("table") is None:
            continue
        table = paper_table(str(entry["paper"]), str(entry["table"]))
        for cell in entry.get("cells") or []:
            if METRICS[cell["metric"]][0] != "accuracy":
                continue
            key = (table.paper, table.name, repr(sorted(cell["row"].items())))
            if key in seen:
                continue
            seen.add(key)
            printed = table.rows[find_row(table, cell["row"])][
                table.columns.index(cell["column"])]
            if printed is None:
                continue
            value = float(printed) / METRICS[cell["metric"]][1]
            row = ", ".join(f"{k}={v}" for k, v in cell["row"].items())
            own = [c for c in configs if c.backend == cell.get("backend", c.backend)]
            reached = tuple(c for c in own if c.interval.mean >= value - REACH_TOLERANCE)
            closest = max(own, key=lambda c: c.interval.mean, default=None)
            library = LIBRARY_NAMES.get(str(cell.get("backend")), "")
            out.append(Target(description=f"{table.paper} {table.name} ({row})", value=value,
                              reached_by=reached, closest=closest, library=library))
    return tuple(out)


def candidates(configs: Sequence[Configuration], backend: str) -> list[Configuration]:
    """The recipes of ``backend`` that the paper's users may have run: every ``library``
    configuration (the stock recipe and its variants, on either split)."""
    return [c for c in configs if c.backend == backend and c.recipe == "library"]


def published_gaps(published: Sequence[Mapping[str, Any]], configs: Sequence[Configuration]
                   ) -> tuple[PublishedGap, ...]:
    """Each published TF Privacy / Opacus pair of accuracy cells (same row but for the
    library), set against every pair of candidate recipes (:func:`candidates`).

    A pair's difference is Welch's unpaired interval: two libraries' recipes share neither
    batches nor initial weights. A pair is *consistent* with the published gap when the gap
    lies inside that interval.
    """
    out = []
    for entry in published:
        if entry.get("table") is None:
            continue
        table = paper_table(str(entry["paper"]), str(entry["table"]))
        cells: dict[tuple[str, str], dict[str, tuple[float, str]]] = {}
        for cell in entry.get("cells") or []:
            if METRICS[cell["metric"]][0] != "accuracy" or cell.get("backend") not in (
                    "tf", "torch"):
                continue
            row = {k: v for k, v in cell["row"].items() if k != "library"}
            printed = table.rows[find_row(table, cell["row"])][
                table.columns.index(cell["column"])]
            if printed is None:
                continue
            key = (repr(sorted(row.items())), str(cell["column"]))
            described = ", ".join(f"{k}={v}" for k, v in row.items())
            cells.setdefault(key, {})[str(cell["backend"])] = (
                float(printed) / METRICS[cell["metric"]][1], described)
        for pair in cells.values():
            if set(pair) != {"tf", "torch"}:
                continue
            tf_c, torch_c = candidates(configs, "tf"), candidates(configs, "torch")
            value = pair["tf"][0] - pair["torch"][0]
            pairs = []
            for a in tf_c:
                for b in torch_c:
                    effect = _effect(f"{a.name} − {b.name}", "stock", a, b)
                    i = effect.interval
                    known = i.n >= 2 and not math.isnan(i.low)
                    pairs.append(CandidatePair(a, b, effect,
                                               (i.low <= value <= i.high) if known else None))
            out.append(PublishedGap(
                description=f"{table.paper} {table.name} ({pair['tf'][1]})",
                tf_value=pair["tf"][0], torch_value=pair["torch"][0], pairs=tuple(pairs)))
    return tuple(out)


__all__ = ["REACH_TOLERANCE", "Attribution", "AttributionError", "CandidatePair",
           "Configuration", "Effect", "PublishedGap", "Target", "attribute", "candidates",
           "changed_factors", "configurations", "describe_change",
           "difference", "direction", "harmonised_defaults", "has_recipe_axis", "proved_of",
           "published_gaps", "run_factors", "shares_batches_and_init", "targets"]
