"""The written conclusion of the gap attribution, generated from its numbers.

Every sentence is built from an :class:`~compare.reporting.attribution.Attribution`; nothing is
hard-coded. Wording rules: a factor "explains" part of the gap only when it moves accuracy
(its Holm-adjusted p below 0.05, :attr:`Effect.significant`) and it points along the gap
(:attr:`Effect.direction`); an effect that does not is reported as "no effect shown", never as
an explanation. The explained points and share carry their bootstrap interval, and the
additivity they assume is stated or tested (:mod:`compare.reporting.attribution_uncertainty`).
"""

from __future__ import annotations

import math

from compare.reporting.attribution import (
    LIBRARY_NAMES,
    REACH_TOLERANCE,
    Attribution,
    Configuration,
    Effect,
    PublishedGap,
    Target,
)
from compare.reporting.attribution_uncertainty import additivity_sentence, gap_share
from compare.reporting.stats import ALPHA, CONFIDENCE, Interval


def points(value: float) -> str:
    """An accuracy difference (fraction) in signed percentage points: ``"+1.23"``."""
    return "–" if math.isnan(value) else f"{100 * value:+.2f}"


def interval_text(interval: Interval) -> str:
    """``"+1.23 points (95% CI +0.50 to +1.96, 3 seeds)"`` or ``"... (1 seed: no interval)"``."""
    if interval.n < 2 or math.isnan(interval.low):
        n = interval.n
        return f"{points(interval.mean)} points ({n} seed{'s' if n != 1 else ''}: no interval)"
    return (f"{points(interval.mean)} points ({100 * CONFIDENCE:g}% CI {points(interval.low)} "
            f"to {points(interval.high)}, {interval.n} seeds)")


def accuracy_text(c: Configuration) -> str:
    """``"96.80 % [96.60, 97.00] (training-set accuracy, 3 seeds)"``: the mean and its 95%
    percentile bootstrap interval over seeds."""
    i = c.interval
    split = "training-set" if c.split == "train" else "test"
    spread = ("" if i.n < 2 or math.isnan(i.high) else
              f" [{100 * i.low:.2f}, {100 * i.high:.2f}]")
    return f"{100 * i.mean:.2f} %{spread} ({split} accuracy, {i.n} seed{'s' * (i.n != 1)})"


def conclusion(a: Attribution) -> list[str]:
    """Markdown paragraphs (one string each) of the written attribution."""
    seeds = max((c.interval.n for c in a.configurations), default=0)
    out = [
        f"Rules used: an effect is a difference of mean accuracy in percentage points with its "
        f"{100 * CONFIDENCE:g}% t interval over seeds, paired by seed only where one seed "
        f"gives both sides the same batches and initial weights (harmonised runs of one "
        f"framework with the same sampling and initialisation), else Welch's unpaired "
        f"interval; a factor *moves accuracy* when the same test's p-value, Holm-adjusted "
        f"over this section's effects (corrected for its comparisons), is below {ALPHA:g}; a "
        f"configuration *reaches* a published figure when its mean "
        f"over seeds is at least the figure minus {100 * REACH_TOLERANCE:g} point "
        f"(tolerance). Factor effects are measured on the "
        f"harmonised recipe of one backend; summed, they are assumed to add up "
        f"(see below)."]
    collapsed = [c for c in a.configurations if c.collapsed]
    if collapsed:
        out.append("Collapsed (some seed's model predicts almost one class, so its accuracy "
                   "describes a near-constant model): " + "; ".join(
                       f"{c.name} ({c.collapsed} of {c.interval.n} seeds)" for c in collapsed)
                   + ".")
    if seeds < 2:
        out.append("With one seed per configuration there is no interval, so no factor is "
                   "judged to move accuracy and none is said to explain the gap.")
    out += _factor_sentences(a.factor_effects)
    out += _gap_sentences(a)
    out += [_target_sentence(t) for t in a.targets]
    out += [published_gap_paragraph(g) for g in a.published_gaps]
    return out


def epsilon_text(c: Configuration) -> str:
    """``"claimed epsilon 3.44, proved 22.5"`` or the reason nothing is proved."""
    claimed = "–" if c.epsilon_shared is None else f"{c.epsilon_shared:.3g}"
    if c.epsilon_proved is not None:
        return f"claimed epsilon {claimed}, proved {c.epsilon_proved:.3g}"
    why = c.proved_note or "no bound is known for what ran"
    return f"claimed epsilon {claimed}, no proved epsilon ({why})"


def published_gap_paragraph(g: PublishedGap) -> str:
    """One paragraph: what explains the published TF Privacy figure, at what proved privacy
    cost, which candidate pair is consistent with the published gap, and what is left."""
    head = (f"**The published gap** ({g.description}): TF Privacy {100 * g.tf_value:.2f} % − "
            f"Opacus {100 * g.torch_value:.2f} % = {points(g.value)} points.")
    if not g.pairs:
        return (head + " No candidate recipe of both libraries (recipe=library) was run, so "
                "nothing is set against it.")
    parts = [head]
    for backend, value in (("tf", g.tf_value), ("torch", g.torch_value)):
        c = g.closest(backend)
        if c is None:
            continue
        below = 100 * (value - c.interval.mean)
        reached = c.interval.mean >= value - REACH_TOLERANCE
        parts.append(
            f"The {LIBRARY_NAMES[backend]} candidate nearest its published "
            f"{100 * value:.2f} % is {c.name}: {accuracy_text(c)}, "
            + ("which reaches it" if reached else f"{below:.2f} points below it")
            + f"; {epsilon_text(c)}.")
    consistent = [p for p in g.pairs if p.consistent]
    unknown = [p for p in g.pairs if p.consistent is None]
    if consistent:
        parts.append("Pairs whose difference is consistent with the published gap (it lies in "
                     "their unpaired Welch interval): " + "; ".join(
                         f"{p.gap.label}: {interval_text(p.gap.interval)}"
                         for p in consistent) + ".")
    else:
        best = min(g.pairs, key=lambda p: abs(p.gap.interval.mean - g.value))
        parts.append("No pair of candidates is consistent with the published gap"
                     + (" (some pairs have one seed: no interval)" if unknown else "")
                     + f"; the nearest is {best.gap.label}: {interval_text(best.gap.interval)}"
                     f", {100 * (g.value - best.gap.interval.mean):+.2f} points from it.")
    parts.append("Left unexplained: whatever separates each published figure from its nearest "
                 "candidate above, and the paper's unstated settings (its notes list them).")
    return " ".join(parts)


def _factor_sentences(effects: tuple[Effect, ...]) -> list[str]:
    if not effects:
        return ["No factor run: only the stock recipes and the baseline were run."]
    moving = [e for e in effects if e.significant]
    within = [e for e in effects if not e.significant]
    out = []
    if moving:
        out.append("Factors that move accuracy (Holm-adjusted p below the level): "
                   + "; ".join(f"{e.label} ({e.changed}): {interval_text(e.interval)}"
                               f"{_holm_text(e)}" for e in moving) + ".")
    else:
        out.append("No factor moves accuracy (no Holm-adjusted p below the level).")
    if within:
        out.append("No effect shown: " + "; ".join(
            f"{e.label}: {interval_text(e.interval)}{_holm_text(e)}" for e in within) + ".")
    return out


def _holm_text(e: Effect) -> str:
    return "" if math.isnan(e.p_holm) else f", Holm p = {e.p_holm:.2g}"


def _gap_sentences(a: Attribution) -> list[str]:
    out = []
    if a.stock_effects:
        out.append("Each library's stock recipe against the harmonised recipe on the same "
                   "framework: " + "; ".join(f"{e.label}: {interval_text(e.interval)}"
                                             for e in a.stock_effects) + ".")
    if a.gap is None:
        missing = [n for b, n in (("tf", "TF Privacy"), ("torch", "Opacus")) if b not in a.stock]
        out.append("The stock TF Privacy − stock Opacus gap needs both stock recipes "
                   f"(recipe=library, test accuracy); missing: {', '.join(missing)}.")
        return out
    gap = a.gap
    out.append(f"The gap, stock TF Privacy − stock Opacus: {interval_text(gap.interval)}"
               f"{_holm_text(gap)}."
               + ("" if gap.significant or gap.interval.n < 2 else
                  " No difference between the stock recipes is shown (Holm-adjusted)."))
    if a.counted:
        parts = [f"{e.label} accounts for {points(e.direction * e.interval.mean)} points "
                 f"(it moves {e.changed}, toward "
                 f"{'TF Privacy' if e.direction > 0 else 'Opacus'}'s stock value)"
                 for e in a.counted]
        out.append("Of the gap, " + "; ".join(parts) + ". " + _share_text(a))
    else:
        out.append("No factor that moves accuracy by more than its interval lies along the "
                   "gap, so no part of the gap is explained by the factors run.")
    if a.unexplained is not None:
        out.append(f"Left unexplained: {interval_text(a.unexplained)}.")
    out.append(additivity_sentence(a))
    aside = [e for e in a.factor_effects if e.significant and e.direction == 0]
    if aside:
        out.append("Moving accuracy but not part of the stock difference: " + "; ".join(
            f"{e.label} ({e.why_not})" for e in aside) + ".")
    if a.untested:
        out.append("Differences between the two stock recipes that no run isolates: "
                   + "; ".join(a.untested) + ". The unexplained rest may come from them or "
                   "from what no factor describes (each library's own training loop).")
    return out


def _share_text(a: Attribution) -> str:
    """The explained points and their share of the gap, each with its 95% percentile
    bootstrap interval over seeds (:func:`~compare.reporting.attribution_uncertainty.
    gap_share`)."""
    share = gap_share(a)
    if share is None:
        return f"Together: {points(a.explained or 0.0)} points (no interval)."
    e, s = share.explained, share.share

    def pct(v: float) -> str:
        return f"{100 * v:.0f} %"

    undefined = (f"; {share.undefined} resamples with no gap left out"
                 if share.undefined else "")
    return (f"Together: {points(e.mean)} points (95% bootstrap interval {points(e.low)} to "
            f"{points(e.high)}), a share of {pct(s.mean)} of the gap (95% bootstrap interval "
            f"{pct(s.low)} to {pct(s.high)}; {share.resamples} resamples of each "
            f"configuration's seeds, the same seeds where runs pair{undefined}).")


def _target_sentence(t: Target) -> str:
    head = f"The published {100 * t.value:.2f} % ({t.description})"
    runs = f"{t.library} run" if t.library else "run"
    if t.reached_by:
        return (f"{head} is reached (within {100 * REACH_TOLERANCE:g} point) by: "
                + "; ".join(f"{c.name}, {accuracy_text(c)}" for c in t.reached_by) + ".")
    if t.closest is None:
        return f"{head}: no {runs} to compare."
    return (f"{head} is not reached by any {runs}, on the test or the training set (tolerance "
            f"{100 * REACH_TOLERANCE:g} point); the closest is {t.closest.name}: "
            f"{accuracy_text(t.closest)}, "
            f"{100 * (t.value - t.closest.interval.mean):.2f} points below.")


__all__ = ["accuracy_text", "conclusion", "epsilon_text", "interval_text", "points",
           "published_gap_paragraph"]
