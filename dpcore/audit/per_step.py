"""The per-step canary audit: is the noise of every step fresh?

The one-run bound (:mod:`dpcore.audit.one_run`) reads the final weights only. Noise reused
across steps (one draw for the whole run, or per epoch) piles up as T sigma C instead of
sqrt(T) sigma C, which *lowers* the canaries' signal in the final weights, while an attacker
holding two consecutive updates cancels it exactly. So every step the step engine reports
the noised sum it hands the optimizer (before momentum or Adam, which correlate honest
updates) at the M canaries' own coordinates (:meth:`dpcore.stepengine.StepEngine.watched`),
and :class:`CanaryTrace` keeps the **residual** there: observed minus what an honest step adds
for the canaries sampled in it (their clipped gradients, :func:`~dpcore.audit.canary_records.
clipped_sum`). In an honest step t the residual is e_t = z_t + x_t: the fresh noise z_t
(variance ``v``: sigma^2 C^2 for Gaussian noise, 2 b^2 for Laplace of scale b = sigma C),
independent of everything before the step, plus the real examples' clipped gradients x_t
there, which depend on the past (the weights carry every earlier step's noise) and on the
step's fresh batch, never on z_t.

Statistic, per parameter tensor with n canary coordinates, over T steps: the lag-1
correlation of the residuals, ``rho_1 = sum e_t e_(t-1) / sum e_(t-1)^2`` (pooled over the
tensor's coordinates, t = 2..T), and what is left when each residual is predicted from the one
before it with that correlation, relative to the configured noise variance:

    S = sum_j sum_t (e_tj - rho_1 e_(t-1)j)^2 / (v (n (T - 1) - 1)).

Why it is robust: fresh noise cannot be predicted from the past, so for *any* predictor f
built from earlier steps E[(e_t - f)^2] = v + E[(x_t - f)^2] >= v, whatever the real
gradients do (drift, batch-to-batch change, their response to earlier noise through the
weights, momentum): an honest run has S >= 1 up to chance (rho_1 is fitted on the same data;
one parameter, hence the -1). Noise that does not change between steps (reused every step,
or within an epoch) is predicted almost exactly (S near 0), noise correlated at lag 1 with
rho leaves S ~ 1 - rho^2, and noise smaller than the configured sigma C by a factor f leaves
S ~ f^2 (up to the real gradients' part): flagged when S is below its threshold.

Null distribution (the lower tail of S for fresh i.i.d. noise, of which real gradients only
move S up): S ~ mean of N = n (T - 1) - 1 terms z^2 / v, mean 1 and variance
(mu_4 - 1) / N, with mu_4 the noise's standardised fourth moment (3 Gaussian: a
chi-square with N degrees of freedom over N; 6 Laplace), approximated by the Gamma
distribution of that mean and variance (exact for the Gaussian). Each tensor's threshold is
that distribution's quantile at its share of the family-wise false-alarm rate (Sidak: 1 -
(1 - alpha)^(1/K) for K tensors, whose noise is independent), so an honest run is flagged with
probability at most about alpha; ``tests/dpcore/test_per_step_audit.py`` checks the rate by
simulation, with real gradients that respond to earlier noise.

Limits: it sees noise predictable from the step before (a reuse at a longer lag, noise
recycled every other step, is not seen), and a step without a report is left out (the lag
then spans it).

**Clipping, per step** (:func:`clip_check`). The residual at canary j's own coordinate has
the same distribution whether or not canary j was sampled in the step, when the engine clips
the canary as an honest step does (its clipped contribution is what was subtracted): canary
sampling is independent of the step's batch and of the weights the step starts from. A step
that clips it less (not at all: its 100 C norm goes through) shifts the residual in the
direction of the canary's gradient there, in every step that samples it. Per canary sampled
in at least one reported step and missing from at least two, ``z_j = sign_j (mean of its
residuals in the steps that sampled it - mean in the others) / (s_j sqrt(1/n_1 + 1/n_0))``,
with ``s_j`` the residuals' standard deviation in the steps that did not sample it (so the
real gradients' variance is measured, not assumed) and ``sign_j`` the sign of the canary's
gradient at its coordinate; ``Z = sum_j z_j / sqrt(J)`` over the J such canaries is about
standard normal for an honest engine (the canaries' inclusions are independent) and is
flagged when ``|Z|`` is above its two-sided normal quantile at :data:`CLIP_FALSE_ALARM`: a
positive Z is a canary let through (a clip missing, too large, or counted more than once), a
negative one a canary clipped with others (a clip applied after summing, whose sensitivity
is then not one example's). This sees what the final weights may not: under shuffled
sampling the proved epsilon has no amplification, so a one-run bound of 100 guesses (at most
about 3) cannot exceed it even when nothing is clipped.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
from scipy import sparse
from scipy.stats import gamma, norm

from dpcore.audit.canary_records import CanaryRecord, clipped_sum
from dpcore.errors import ConfigError

#: Family-wise false-alarm rate of the per-step statistic over a run's parameter tensors.
PER_STEP_FALSE_ALARM = 1e-3

#: False-alarm rate of the per-step clipping check (two-sided, per run).
CLIP_FALSE_ALARM = 1e-3

#: Standardised fourth moment E[z^4] / E[z^2]^2 of each noise kind.
FOURTH_MOMENT = {"gaussian": 3.0, "laplace": 6.0}

STATISTIC = ("variance of the per-step noise residuals at the canary coordinates left after "
             "predicting each from the step before (lag-1 correlation rho_1), over the "
             "configured noise variance; >= 1 for fresh noise; the tensor of the smallest "
             "p-value")


def noise_variance(kind: str, scale: float) -> float:
    """Per-coordinate variance of one draw: ``scale^2`` (Gaussian std) or ``2 scale^2``
    (Laplace scale b)."""
    if kind not in FOURTH_MOMENT:
        raise ConfigError(f"noise kind {kind!r} has no per-step audit; valid: "
                          + ", ".join(FOURTH_MOMENT))
    return scale * scale * (2.0 if kind == "laplace" else 1.0)


def degrees_of_freedom(coordinates: int, steps: int) -> int:
    """N = n (T - 1) - 1: the predicted residuals of ``coordinates`` over ``steps`` steps,
    less the fitted correlation."""
    if steps < 2 or coordinates < 1 or coordinates * (steps - 1) < 2:
        raise ConfigError(f"the per-step statistic needs >= 2 steps and >= 1 coordinate, "
                          f"with >= 2 step-to-step pairs; got {steps} steps, {coordinates} "
                          "coordinates")
    return coordinates * (steps - 1) - 1


def null_moments(coordinates: int, steps: int, kind: str) -> tuple[float, float]:
    """Mean and variance of S (module docstring) for fresh i.i.d. noise alone, for
    ``coordinates`` coordinates over ``steps`` steps."""
    if kind not in FOURTH_MOMENT:
        raise ConfigError(f"noise kind {kind!r} has no per-step audit; valid: "
                          + ", ".join(FOURTH_MOMENT))
    n = degrees_of_freedom(coordinates, steps)
    return 1.0, (FOURTH_MOMENT[kind] - 1.0) / n


def null_cdf(ratio: float, coordinates: int, steps: int, kind: str) -> float:
    """P(S <= ratio) for fresh noise alone (the Gamma distribution of the module
    docstring): the p-value of an observed S."""
    mean, var = null_moments(coordinates, steps, kind)
    return float(gamma.cdf(ratio, a=mean * mean / var, scale=var / mean))


def threshold(coordinates: int, steps: int, kind: str, alpha: float) -> float:
    """The S below which a tensor is flagged at false-alarm rate ``alpha``."""
    mean, var = null_moments(coordinates, steps, kind)
    return float(gamma.ppf(alpha, a=mean * mean / var, scale=var / mean))


@dataclass(frozen=True)
class TensorCheck:
    """The statistic of one parameter tensor.

    Attributes:
        coordinates: canary coordinates in it (n).
        rho_1: the lag-1 correlation of its residuals.
        ratio: S, the variance left after the lag-1 prediction over the noise variance.
        threshold: S below this is flagged.
        p_value: P(S at most this small) for fresh noise.
    """

    coordinates: int
    rho_1: float
    ratio: float
    threshold: float
    p_value: float


CLIP_STATISTIC = ("mean shift of the per-step residual at each canary's coordinate in the "
                  "steps that sampled it over those that did not, towards its gradient, in "
                  "standard errors, summed over canaries / sqrt(canaries); about N(0, 1) when "
                  "the engine clips the canaries as an honest step does; flagged when |Z| is "
                  "above the threshold")


@dataclass(frozen=True)
class ClipCheck:
    """The per-step clipping check of one run (module docstring, **Clipping, per step**).

    Attributes:
        statistic: what is measured (words).
        value: Z.
        threshold: ``|Z|`` above this is flagged (the two-sided normal quantile at
            ``false_alarm_rate``).
        false_alarm_rate: the rate at which an honest run is flagged.
        flagged: ``|value| > threshold``: the canaries moved the noised sum by more (Z > 0)
            or less (Z < 0) than their clipped contribution in the steps that sampled them.
        canaries: J, the canaries tested.
        mean_shift: the mean over them of ``sign_j`` (mean residual when sampled - when not),
            in units of the clip norm C (0 for an honest engine; up to about the canary's norm,
            100, when nothing is clipped).
    """

    statistic: str
    value: float
    threshold: float
    false_alarm_rate: float
    flagged: bool
    canaries: int
    mean_shift: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def clip_check(residuals: np.ndarray, sampled: np.ndarray, signs: np.ndarray, clip_norm: float,
               alpha: float = CLIP_FALSE_ALARM) -> ClipCheck | None:
    """The clipping statistic of ``residuals`` [T, M] (column j: canary j's own coordinate),
    ``sampled`` [T, M] (whether canary j joined step t) and ``signs`` [M] (the sign of canary
    j's gradient at its coordinate); None when no canary was sampled in one reported step and
    missed in two."""
    residuals = np.asarray(residuals, np.float64)
    sampled = np.asarray(sampled, bool)
    if residuals.shape != sampled.shape or residuals.shape[1] != len(signs):
        raise ConfigError(f"residuals {residuals.shape}, sampled {sampled.shape} and "
                          f"{len(signs)} canary signs do not match")
    z, shifts = [], []
    for j in range(residuals.shape[1]):
        yes, no = residuals[sampled[:, j], j], residuals[~sampled[:, j], j]
        if len(yes) < 1 or len(no) < 2 or signs[j] == 0:
            continue
        spread = float(no.std(ddof=1))
        shift = float(np.sign(signs[j]) * (yes.mean() - no.mean()))
        shifts.append(shift)
        if spread > 0 and math.isfinite(spread):
            z.append(shift / (spread * math.sqrt(1.0 / len(yes) + 1.0 / len(no))))
        else:  # residuals that never change: any shift is the canary's alone
            z.append(math.inf if shift > 0 else 0.0)
    if not z:
        return None
    value = float(np.sum(z) / math.sqrt(len(z)))
    if math.isnan(value):
        value = math.inf
    limit = float(norm.isf(alpha / 2.0))
    return ClipCheck(statistic=CLIP_STATISTIC, value=value, threshold=limit,
                     false_alarm_rate=alpha, flagged=abs(value) > limit, canaries=len(z),
                     mean_shift=float(np.mean(shifts)) / float(clip_norm))


@dataclass(frozen=True)
class PerStepAudit:
    """The per-step audit of one run (the RunResult's ``audit.one_run.per_step``).

    Attributes:
        statistic: what is measured (words).
        value, threshold, rho_1, tensor: S, its threshold and the lag-1 correlation in the
            tensor of the smallest p-value.
        false_alarm_rate: the family-wise rate at which an honest run is flagged.
        flagged: some tensor's S is below its threshold.
        steps: steps with a report (T).
        noise_std: the configured per-coordinate noise std the residuals are measured
            against.
        tensors: every tensor's :class:`TensorCheck`, by neutral key.
        clip: the per-step clipping check (:class:`ClipCheck`; None when no canary could be
            tested).
    """

    statistic: str
    value: float
    threshold: float
    rho_1: float
    tensor: str
    false_alarm_rate: float
    flagged: bool
    steps: int
    noise_std: float
    tensors: dict[str, TensorCheck] = field(default_factory=dict)
    clip: ClipCheck | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def per_step_audit(residuals: np.ndarray, keys: Sequence[str], noise_kind: str,
                   noise_scale: float, alpha: float = PER_STEP_FALSE_ALARM) -> PerStepAudit:
    """The per-step statistic of ``residuals`` [T, M] (column j at coordinate j, of tensor
    ``keys[j]``), for noise of kind ``noise_kind`` and scale ``noise_scale`` (Gaussian std
    or Laplace b: sigma C), at family-wise false-alarm rate ``alpha``.

    Raises:
        ConfigError: fewer than 2 steps, a non-positive noise scale, or mismatched shapes.
    """
    residuals = np.asarray(residuals, np.float64)
    if residuals.ndim != 2 or residuals.shape[1] != len(keys):
        raise ConfigError(f"residuals of shape {residuals.shape} do not match {len(keys)} "
                          "canary coordinates")
    if not (noise_scale > 0 and math.isfinite(noise_scale)):
        raise ConfigError(f"per-step audit noise scale={noise_scale!r}; valid: a finite "
                          "number > 0 (the configured sigma C)")
    steps = residuals.shape[0]
    variance = noise_variance(noise_kind, noise_scale)
    names = sorted(set(keys))
    alpha_each = 1.0 - (1.0 - alpha) ** (1.0 / len(names))
    checks: dict[str, TensorCheck] = {}
    key_array = np.asarray(keys)
    for name in names:
        cols = key_array == name
        n = int(cols.sum())
        dof = degrees_of_freedom(n, steps)
        now, before = residuals[1:, cols], residuals[:-1, cols]
        energy = float((before * before).sum())
        rho = float((now * before).sum() / energy) if energy > 0 else 0.0
        ratio = float(((now - rho * before) ** 2).sum() / (variance * dof))
        if not (math.isfinite(ratio) and math.isfinite(rho)):
            ratio, rho = 0.0, 1.0  # a non-finite report is no fresh noise
        checks[name] = TensorCheck(
            coordinates=n, rho_1=rho, ratio=ratio,
            threshold=threshold(n, steps, noise_kind, alpha_each),
            p_value=null_cdf(ratio, n, steps, noise_kind))
    worst = min(names, key=lambda k: (checks[k].p_value, k))
    return PerStepAudit(
        statistic=STATISTIC, value=checks[worst].ratio, threshold=checks[worst].threshold,
        rho_1=checks[worst].rho_1, tensor=worst, false_alarm_rate=alpha,
        flagged=any(c.ratio < c.threshold for c in checks.values()), steps=steps,
        noise_std=math.sqrt(variance), tensors=checks)


@dataclass
class CanaryTrace:
    """The residuals of a run's steps at the canaries' coordinates.

    Per step: :meth:`sampled` with the canaries sampled (what an honest step adds there is
    then known), then :meth:`observed` with the engine's report of the noised sum there;
    a step without a report is left out.

    Attributes:
        keys: the neutral key of each canary's coordinate, in canary order.
        flats: its flat index.
        contribution: sparse [M coordinates, M canaries]: what canary c, clipped by an honest
            step, adds at coordinate j.
        signs: the sign of canary j's gradient at its own coordinate j.
        clip_norm: C.
        residuals: one float64 [M] per reported step.
        masks: the canaries sampled in each reported step (bool [M]).
    """

    keys: list[str]
    flats: np.ndarray
    contribution: sparse.csr_matrix
    signs: np.ndarray = field(default_factory=lambda: np.zeros(0))
    clip_norm: float = 1.0
    residuals: list[np.ndarray] = field(default_factory=list)
    masks: list[np.ndarray] = field(default_factory=list)
    _expected: np.ndarray | None = None
    _mask: np.ndarray | None = None

    @classmethod
    def of(cls, records: Sequence[CanaryRecord], clip_norm: float, kind: str) -> CanaryTrace:
        """The trace of canaries ``records`` (their own coordinates watched), clipped to
        ``clip_norm`` in ``kind`` by an honest step."""
        where = {(r.key, r.flat): j for j, r in enumerate(records)}
        rows, cols, values = [], [], []
        for c, record in enumerate(records):
            for key, entries in clipped_sum([record], clip_norm, kind).items():
                for flat, value in entries.items():
                    j = where.get((key, flat))
                    if j is not None:
                        rows.append(j)
                        cols.append(c)
                        values.append(value)
        m = len(records)
        signs = np.array([np.sign(sum(v for k, f, v in r.gradient if (k, f) == (r.key, r.flat)))
                          for r in records], np.float64)
        return cls(keys=[r.key for r in records],
                   flats=np.array([r.flat for r in records], np.int64),
                   contribution=sparse.csr_matrix((values, (rows, cols)), shape=(m, m)),
                   signs=signs, clip_norm=float(clip_norm))

    def sampled(self, mask: np.ndarray) -> None:
        """This step's sampled canaries (a bool mask over them)."""
        self._mask = np.asarray(mask, bool).copy()
        self._expected = np.asarray(self.contribution @ np.asarray(mask, np.float64))

    def observed(self, values: Mapping[str, np.ndarray]) -> None:
        """The engine's report for this step: neutral key -> the noised sum at the flat
        indices of :meth:`coordinates` (in that order)."""
        if self._expected is None:
            raise ConfigError("a canary report without a sampled step before it")
        out = np.empty(len(self.keys), np.float64)
        for key, idx in self.coordinates().items():
            got = np.asarray(values[key], np.float64).reshape(-1)
            out[self._columns(key)] = got
            if len(got) != len(idx):
                raise ConfigError(f"the engine reported {len(got)} values for {key!r}, "
                                  f"expected {len(idx)}")
        self.residuals.append(out - self._expected)
        self.masks.append(self._mask if self._mask is not None
                          else np.zeros(len(self.keys), bool))
        self._expected, self._mask = None, None

    def coordinates(self) -> dict[str, np.ndarray]:
        """Neutral key -> the flat indices watched there (canary order within a key)."""
        return {key: self.flats[self._columns(key)] for key in sorted(set(self.keys))}

    def _columns(self, key: str) -> np.ndarray:
        return np.flatnonzero(np.asarray(self.keys) == key)

    def audit(self, noise_kind: str, noise_scale: float,
              alpha: float = PER_STEP_FALSE_ALARM) -> PerStepAudit | None:
        """The per-step audit of the reported steps, with its clipping check (None with
        fewer than three)."""
        if len(self.residuals) < 3:
            return None
        residuals = np.stack(self.residuals)
        audit = per_step_audit(residuals, self.keys, noise_kind, noise_scale, alpha)
        clip = clip_check(residuals, np.stack(self.masks), self.signs, self.clip_norm)
        return replace(audit, clip=clip)


#: What each flag of a stored per-step audit means (``audit.one_run.per_step``).
NOT_FRESH_TEXT = "the noise at the canaries' coordinates is not fresh at every step"
CLIP_TEXT = "the canaries moved the noised sum by other than their clipped contribution"


def per_step_findings(per_step: Mapping[str, Any] | None) -> list[str]:
    """The privacy violations a stored per-step audit found (``audit.one_run.per_step`` of
    a record; none for a record without one, or without a clipping check)."""
    if not per_step:
        return []
    found = [NOT_FRESH_TEXT] if per_step.get("flagged") else []
    if (per_step.get("clip") or {}).get("flagged"):
        found.append(CLIP_TEXT)
    return found
