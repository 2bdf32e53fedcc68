"""The accounting check of ``dpcompare verify``: the step's DpEvent is what the accountant
was given.

* ``accounting-sigma``: the noise the step adds, measured (:mod:`dpcore.verify.noise`'s
  vectors before standardisation), over sigma C of the accountant's event: pooled over every
  coordinate and step, ``sum (n / sigma C)^2`` is chi-square(P T) for Gaussian noise and
  ``sum |n| / (sigma C)`` is Gamma(P T, 1) for Laplace noise (two-sided); the statistic shown
  is the measured noise multiplier over the event's.
* ``accounting-sampling``: the sampler that ran (the run's index batches, drawn again with
  the same code and seed) against the event's sampling rate q. Poisson: the number of
  inclusions over all batches is Binomial(batches N, q) (two-sided binomial test), and the
  per-example inclusion counts are not over- or under-dispersed (a standardised Pearson
  statistic; a weighted sampler fails it). Shuffled batches (accounted as Poisson at
  q = B / N, the claim; the proved rule composes one release per epoch under replace-one):
  every example is in at most one batch of an epoch and no batch holds more than B (exact).
* ``accounting-steps``: the event composes as many steps as the sampler draws batches, and
  its noise multiplier and sampling rate are the plan's (exact).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
from dp_accounting import dp_event as dpe
from scipy import stats

from dpcore.verify.report import CheckResult
from dpcore.verify.stats import Interval, binomial_interval, dispersion_statistic, normal_bound

#: Largest number of example draws (batches x N) the sampling test replays; beyond it, the
#: first batches up to this many draws are used (the test stays exact for those).
MAX_DRAWS = 300_000_000


@dataclass(frozen=True)
class AccountantView:
    """What the accountant was given for one step, and the sampler that ran it.

    Attributes:
        event: the DpEvent the epsilon was computed from.
        noise_multiplier: sigma of the plan (noise std or Laplace scale over C).
        sampling: ``poisson`` or ``shuffle`` (the sampler that ran).
        sampling_rate: q the accountant was given.
        steps: the steps the run takes.
        n_examples: N.
        batch_size: B (expected; the fixed size of shuffled batches).
        steps_per_epoch: batches of one epoch.
        index_batches: the run's batches of example indices, in order (a new iterator each
            call).
        source: where the batches come from, in words.
    """

    event: dpe.DpEvent
    noise_multiplier: float
    sampling: str
    sampling_rate: float
    steps: int
    n_examples: int
    batch_size: int
    steps_per_epoch: int
    index_batches: Callable[[], Iterator[np.ndarray]]
    source: str


def event_parts(event: dpe.DpEvent) -> tuple[int, float, float, str]:
    """(steps, sampling rate, noise multiplier, base event name) of a DP-SGD DpEvent:
    ``SelfComposed(PoissonSampled(q, Gaussian | Laplace), steps)`` (q = 1 without the
    sampling wrapper, steps = 1 without the composition)."""
    steps, rate = 1, 1.0
    if isinstance(event, dpe.SelfComposedDpEvent):
        steps, event = int(event.count), event.event
    if isinstance(event, dpe.PoissonSampledDpEvent):
        rate, event = float(event.sampling_probability), event.event
    sigma = float(getattr(event, "noise_multiplier", math.nan))
    return steps, rate, sigma, type(event).__name__


def sigma_result(total: float, count: int, law: str, view: AccountantView, alpha: float
                 ) -> CheckResult:
    """Measured noise multiplier over the event's, from ``total``: the sum over ``count``
    noise draws of ``(noise / (sigma C))^2`` (Gaussian) or ``|noise| / (sigma C)`` (Laplace),
    sigma being the plan's."""
    if law == "laplace":
        low = stats.gamma.ppf(alpha / 2, count) / count
        high = stats.gamma.isf(alpha / 2, count) / count
        measured = total / count
    else:
        low = math.sqrt(stats.chi2.ppf(alpha / 2, count) / count)
        high = math.sqrt(stats.chi2.isf(alpha / 2, count) / count)
        measured = math.sqrt(total / count)
    _, _, event_sigma, _ = event_parts(view.event)
    ratio = measured * view.noise_multiplier / event_sigma if event_sigma > 0 else math.inf
    what = "mean |noise| / C" if law == "laplace" else "noise std / C"
    region = Interval(float(low), float(high))
    return CheckResult(
        "accounting-sigma", f"measured {what} over the event's noise multiplier "
        f"{event_sigma:.6g} ({count} draws)", ratio, region.describe(), alpha,
        region.contains(ratio), "1 when the step adds the noise the accountant was told of")


@dataclass(frozen=True)
class Replay:
    """The run's batches drawn again once: what the sampling and step tests read.

    Attributes:
        counts: per example, its inclusions in the first ``used`` batches.
        used: batches counted (all of them, up to :data:`MAX_DRAWS` draws).
        drawn: every batch the sampler yields for the run.
        per_epoch_max: the most batches of one epoch any example is in (shuffle).
        batch_max: the largest batch.
    """

    counts: np.ndarray
    used: int
    drawn: int
    per_epoch_max: int
    batch_max: int


def replay(view: AccountantView) -> Replay:
    """Draw the run's batches once (every one of them; inclusions counted in the first
    :data:`MAX_DRAWS` draws)."""
    n = view.n_examples
    steps_used = max(1, MAX_DRAWS // max(n, 1))
    counts = np.zeros(n, dtype=np.int64)
    epoch_counts = np.zeros(n, dtype=np.int64)
    per_epoch_max, batch_max, drawn = 0, 0, 0
    for i, batch in enumerate(view.index_batches()):
        drawn += 1
        batch_max = max(batch_max, len(batch))
        if i >= steps_used:
            continue
        np.add.at(counts, batch, 1)
        if view.sampling == "shuffle":
            if i % view.steps_per_epoch == 0:
                epoch_counts[:] = 0
            np.add.at(epoch_counts, batch, 1)
            per_epoch_max = max(per_epoch_max, int(epoch_counts.max(initial=0)))
    return Replay(counts, min(drawn, steps_used), drawn, per_epoch_max, batch_max)


def sampling_results(view: AccountantView, alpha: float, batches: Replay | None = None
                     ) -> list[CheckResult]:
    """The sampler's batches against the event's q (Poisson) or the shuffle rule."""
    batches = batches or replay(view)
    n, drawn, counts = view.n_examples, batches.used, batches.counts
    _, event_rate, _, _ = event_parts(view.event)
    out = []
    if view.sampling == "poisson":
        trials = drawn * n
        region = binomial_interval(trials, event_rate, alpha / 2)
        inclusions = int(counts.sum())
        out.append(CheckResult(
            "accounting-sampling", f"inclusions in {drawn} batches of {view.source} "
            f"(N = {n}) against q = {event_rate:.6g} of the event",
            float(inclusions), region.describe(), alpha / 2, region.contains(inclusions),
            f"Binomial({trials}, q); the empirical rate is {inclusions / max(trials, 1):.6g}"))
        z = normal_bound(alpha / 2)
        stat = dispersion_statistic(counts, drawn, event_rate)
        out.append(CheckResult(
            "accounting-sampling", "dispersion of the per-example inclusion counts "
            "(standardised Pearson statistic)", stat,
            Interval(-z, z).describe(), alpha / 2, abs(stat) <= z,
            "N(0, 1) when every example joins every batch independently with probability q"))
        return out
    out.append(CheckResult(
        "accounting-sampling", f"most batches of one epoch holding one example "
        f"({drawn} batches of {view.source})", float(batches.per_epoch_max), "<= 1", 0.0,
        batches.per_epoch_max <= 1,
        "the proved rule for shuffled batches takes each example in one batch per epoch"))
    out.append(CheckResult(
        "accounting-sampling", "largest batch over B", batches.batch_max / view.batch_size,
        "<= 1", 0.0, batches.batch_max <= view.batch_size, f"B = {view.batch_size}"))
    accounted = abs(event_rate - view.batch_size / n) <= 1e-12
    out.append(CheckResult(
        "accounting-sampling", "q of the event over B / N", event_rate * n / view.batch_size,
        "1", 0.0, accounted, "shuffled batches are accounted at q = B / N (the claim)"))
    return out


def steps_results(view: AccountantView, batches: Replay | None = None) -> list[CheckResult]:
    """The event's steps, sigma and q against the plan and the sampler (exact)."""
    steps, rate, sigma, base = event_parts(view.event)
    drawn = (batches or replay(view)).drawn
    return [
        CheckResult("accounting-steps", f"steps composed by the event ({base}) over the "
                    "batches the sampler draws", steps / max(drawn, 1), "1", 0.0,
                    steps == drawn == view.steps,
                    f"event {steps}, sampler {drawn}, plan {view.steps}"),
        CheckResult("accounting-steps", "noise multiplier and q of the event over the plan's",
                    max(abs(sigma / view.noise_multiplier - 1) if view.noise_multiplier else
                        math.inf, abs(rate / view.sampling_rate - 1)), "<= 1e-12", 0.0,
                    abs(sigma - view.noise_multiplier) <= 1e-12 * max(1.0, sigma) and
                    abs(rate - view.sampling_rate) <= 1e-12,
                    f"event sigma {sigma:.6g} q {rate:.6g}; plan sigma "
                    f"{view.noise_multiplier:.6g} q {view.sampling_rate:.6g}"),
    ]
