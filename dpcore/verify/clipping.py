"""The sensitivity and divisor checks of ``dpcompare verify``, measured on the step without
noise (its own code with the mechanism's noise scale set to 0).

Why the noise-free step and not two noisy steps with one noise key whose noise cancels in the
difference: the difference of two noisy steps cancels only if the noise does not depend on
the batch, which is one of the things under test (noise added once per physical chunk does
not cancel between batches of different sizes), and a float32 weight holds the noised sum to
about 1e-7 of the noise, not of the clipped sum; without noise every digit of the update is
the clipped sum. The noise itself is checked separately (:mod:`dpcore.verify.noise`).

* ``sensitivity``: adversarial neighbouring batches, at weights where every example's gradient
  is far above C (the last layer's kernel scaled up, which multiplies the gradient of every
  layer below it: measured, at least 1e3 C), move the clipped sum by no more than the proved
  rule assumes (:mod:`dpcore.proved`): under add-or-remove-one (Poisson sampling), one
  example added and one removed, each at most C (2C for microbatches); under replace-one
  (shuffled fixed-size batches), one example replaced, and one whole microbatch where they
  apply, at most 2C. The norm is the one clipped (L2 Gaussian, L1 Laplace). The threshold
  adds the float32 resolution of the weights the sums are read from (computed per coordinate)
  and a relative 1e-4 for the step's own float32 arithmetic.
* ``divisor``: ``n`` copies of one such example: each is clipped to exactly C, so the clipped
  sum has norm ``(n / k) C`` (k examples per microbatch) and the update ``(n / k) C / D``;
  ``D`` measured must be the configured divisor (:func:`dpcore.recipes.step_divisor`: B for
  ``expected``, whatever the batch's size, n for ``actual``), for two sizes n, at least one of
  them not B.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dpcore.trainloop import Chunk
from dpcore.verify.report import CheckResult
from dpcore.verify.steppers import Measurement, Stepper, difference, measure, norm

#: Relative allowance for the step's own float32 arithmetic (clip factors, sums of up to a
#: few hundred terms, the division), on top of the weights' resolution.
RELATIVE_SLACK = 1e-4


@dataclass(frozen=True)
class Batch:
    """A probe batch: its chunks as the step takes them and its number of examples."""

    chunks: Sequence[Chunk]
    n_examples: int
    label: str


def rounding_norm(m: Measurement, kind: str) -> float:
    """Bound on the float error of ``m``'s noised sum, in its norm."""
    return norm(m.rounding, kind) + RELATIVE_SLACK * norm(m.noised_sum(), kind)


def sensitivity(stepper: Stepper, weights: dict[str, np.ndarray], base: Batch,
                neighbours: Sequence[tuple[Batch, float]], clip: float, kind: str,
                divisor: float | None, relation: str) -> list[CheckResult]:
    """Each neighbour of ``base`` (with its bound in units of C) moves the clipped sum by
    at most its bound (plus the float allowance)."""
    reference = measure(stepper, weights, base.chunks, base.n_examples, divisor)
    out = []
    for batch, bound in neighbours:
        other = measure(stepper, weights, batch.chunks, batch.n_examples, divisor)
        move = norm(difference(other.noised_sum(), reference.noised_sum()), kind)
        slack = (rounding_norm(reference, kind) + rounding_norm(other, kind)) / clip
        stat = move / clip
        out.append(CheckResult(
            "sensitivity", f"{batch.label} ({relation}): {kind} move of the clipped sum / C",
            stat, f"<= {bound + slack:.6g}", 0.0, bool(stat <= bound + slack),
            f"the proved rule assumes at most {bound:g} C; float allowance {slack:.2g} C; "
            f"a step that does not clip moves it by the example's whole gradient"))
    return out


def divisor_check(stepper: Stepper, weights: dict[str, np.ndarray],
                  batches: Sequence[tuple[Batch, float]], clip: float, kind: str
                  ) -> list[CheckResult]:
    """``(batch of n copies, its number of clipped units)``: the measured divisor over the
    configured one."""
    out = []
    for batch, units in batches:
        m = measure(stepper, weights, batch.chunks, batch.n_examples)
        update_norm = norm(m.update, kind)
        expected = stepper.divisor_of(batch.n_examples)
        measured = units * clip / update_norm if update_norm > 0 else math.inf
        ratio = measured / expected
        tol = rounding_norm(m, kind) / max(units * clip, 1e-30) + RELATIVE_SLACK
        out.append(CheckResult(
            "divisor", f"{batch.label}: measured divisor / configured {expected:g}", ratio,
            f"[{1 - tol:.6g}, {1 + tol:.6g}]", 0.0, bool(abs(ratio - 1) <= tol),
            f"the update of {units:g} clipped units has norm {update_norm:.6g} "
            f"= {units:g} C / {measured:.6g}; dividing by the batch's size would give "
            f"{batch.n_examples}, a missing clip a much larger norm"))
    return out
