"""The two recipes (``harmonised`` and ``library``), their bad-input rules and privacy claims.

* :func:`dpcore.config.check_combination`: factor combinations that no recipe can run (raised
  from ``RunConfig.__post_init__``, so before any data is loaded or any step is taken; it lives
  with the config so that the config does not import this module);
* :func:`check_backend_recipe`: combinations one library's public API cannot run (e.g.
  Poisson sampling through TF Privacy's ``model.fit``), checked by the backend before
  training;
* :func:`privacy_claim`: whether the shared accountant's epsilon is a *proved* bound for what
  ran, or only "claimed, not proved", with the reasons (recorded in every RunResult);
* :func:`step_divisor`: the divisor of the noised gradient sum under ``factors.normalisation``;
* :func:`effective_factors`: every factor's value as the step actually ran it (a ``library``
  run takes its library's own choices, not the config's defaults), with the divisor put in
  words by :func:`divisor_rule` so that two recipes that divide by the same number compare
  equal (recorded in every RunResult; the report's gap attribution compares them).

Every rule is a one-line :class:`~dpcore.errors.ConfigError` naming the field and what would be
valid.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from dpcore.errors import ConfigError
from dpcore.mechanisms import is_non_private

if TYPE_CHECKING:
    from dpcore.config import RunConfig

PROVED = "proved"
CLAIMED_NOT_PROVED = "claimed, not proved"

#: What trains each backend under ``recipe: library`` (recorded in the RunResult).
LIBRARY_TRAINERS = {
    "tf": "VectorizedDPKerasSGDOptimizer via model.fit",
    "torch": "PrivacyEngine.make_private",
}
#: ... and under ``recipe: harmonised``.
HARMONISED_TRAINERS = {
    "tf": "dpcompare harmonised step on a TF Privacy DP query (tfpipe.dp)",
    "torch": "dpcompare harmonised step on an Opacus DPOptimizer (torchpipe.dp)",
}

# -- reasons a claimed epsilon is not proved --------------------------------------------------
SHUFFLE_REASON = (
    "privacy.sampling=shuffle: shuffled fixed-size batches are accounted as Poisson sampling "
    "with q = B/N; amplification by Poisson sampling is not proved for shuffling (known "
    "counter-examples give a larger epsilon)"
)
MICROBATCH_REASON = (
    "factors.microbatch_size={k}: the clipped unit is the mean gradient of {k} examples; under "
    "replace-one (the relation of fixed-size batches) one example moves that unit by up to 2C, "
    "and under add/remove-one it shifts the partition of every later microbatch, while the "
    "accountant assumes one example moves the sum by at most C"
)
ACTUAL_NORMALISATION_REASON = (
    "factors.normalisation={how} with Poisson sampling: the divisor is the batch's actual "
    "size (or microbatch count), which depends on who is in the batch, so dividing by it "
    "leaks membership beyond the sensitivity the accountant assumes"
)
STANDARDISED_REASON = (
    "factors.input_scaling=standardised: the pixel mean and std are computed from the private "
    "training set and released with the model without noise; the accountant does not cover "
    "them"
)
TRAIN_ACCURACY_REASON = (
    "factors.eval_split=train: the reported accuracy is a statistic of the private training "
    "set, released without noise; the accountant does not cover it"
)


def check_backend_recipe(config: RunConfig, backend: str) -> None:
    """Refuse what one library's public API cannot run (call before any training).

    Raises:
        ConfigError: ``recipe: library`` on ``tf`` with Poisson sampling (``model.fit`` batches
            a shuffled ``tf.data`` pipeline of fixed-size batches); ``microbatch_size > 1``
            on ``torch`` under ``recipe: library`` (Opacus clips per example only).
    """
    if config.recipe != "library":
        return
    if backend == "tf" and config.privacy.sampling != "shuffle":
        raise ConfigError(
            f"privacy.sampling={config.privacy.sampling!r} cannot run through TF Privacy's "
            "model.fit, which batches a shuffled tf.data pipeline of fixed-size batches; valid "
            "with recipe=library on tf: shuffle"
        )
    if backend == "torch" and config.factors.microbatch_size != 1:
        raise ConfigError(
            f"factors.microbatch_size={config.factors.microbatch_size} cannot run through "
            "Opacus's PrivacyEngine, which clips per example; valid with recipe=library on "
            "torch: 1"
        )


def library_normalisation(config: RunConfig, backend: str) -> str:
    """The divisor each library's own step uses (for the claim of a ``library`` run)."""
    return _library_normalisation(backend, config.privacy.sampling)


def _library_normalisation(backend: str, sampling: str) -> str:
    if backend == "tf":
        return "microbatches"  # DPKerasSGDOptimizer: noised sum / num_microbatches
    return "expected" if sampling == "poisson" else "actual"


def privacy_claim(config: RunConfig, backend: str | None = None) -> dict[str, Any]:
    """Whether the shared accountant's epsilon is a proved bound for what ran.

    Args:
        config: the run's configuration.
        backend: ``tf`` or ``torch``; under ``recipe: library`` the step is the library's own,
            so its normalisation depends on the backend (``None``: the harmonised factors).

    Returns:
        ``{"status": "proved" | "claimed, not proved" | "not private", "reasons": [...]}``;
        every reason names the setting and why the bound does not follow for it.
    """
    privacy, factors = config.privacy, config.factors
    if not privacy.is_dpsgd:
        return {"status": "not private" if is_non_private(privacy.mechanism) else PROVED,
                "reasons": []}
    reasons: list[str] = []
    if privacy.sampling == "shuffle":
        reasons.append(SHUFFLE_REASON)
    if factors.microbatch_size > 1:
        k = factors.microbatch_size
        reasons.append(MICROBATCH_REASON.format(k=k))
    how = (library_normalisation(config, backend)
           if config.recipe == "library" and backend else factors.normalisation)
    if privacy.sampling == "poisson" and how != "expected":
        reasons.append(ACTUAL_NORMALISATION_REASON.format(how=how))
    if factors.input_scaling == "standardised":
        reasons.append(STANDARDISED_REASON)
    if factors.eval_split == "train":
        reasons.append(TRAIN_ACCURACY_REASON)
    return {"status": CLAIMED_NOT_PROVED if reasons else PROVED, "reasons": reasons}


def step_divisor(normalisation: str, expected_batch_size: int, actual_batch_size: int,
                 microbatch_size: int = 1) -> float:
    """Divisor of one step's noised gradient sum.

    Args:
        normalisation: ``expected`` (B = qN), ``actual`` (the batch's size) or
            ``microbatches`` (the batch's number of microbatches, ``actual / k``).
        expected_batch_size: B = qN.
        actual_batch_size: examples in this batch (may be 0 under Poisson sampling).
        microbatch_size: k, examples per clipped unit.

    Returns:
        The divisor, >= 1 (an empty batch divides by 1: its update is noise only).
    """
    if normalisation == "expected":
        return float(expected_batch_size)
    if normalisation == "actual":
        return float(max(actual_batch_size, 1))
    if normalisation == "microbatches":
        return float(max(math.ceil(actual_batch_size / microbatch_size), 1))
    raise ConfigError(
        f"factors.normalisation={normalisation!r} is not known; valid: expected, actual, "
        "microbatches"
    )


#: The factors of one DP-SGD step, in the order reports show them (``sampling`` is
#: ``privacy.sampling``, ``divisor`` is :func:`divisor_rule`, the rest are ``factors.*``).
FACTOR_NAMES = ("sampling", "divisor", "microbatch_size", "init", "input_scaling",
                "calibration_accountant", "eval_split")
#: The batch sampling of each library's tutorials (``model.fit`` on a shuffled ``tf.data``
#: pipeline; Opacus's Poisson ``DPDataLoader``): a ``library`` run with it and every factor at
#: its default is that library's *stock* recipe.
LIBRARY_SAMPLING = {"tf": "shuffle", "torch": "poisson"}
#: What each library's own step does for the factors its recipe fixes (``effective_factors``).
#: The input scaling is the data's, not the step's: a ``library`` run may standardise its
#: inputs (``factors.input_scaling``) as Opacus's MNIST example does.
LIBRARY_FIXED = {
    # Keras' default initialisers are the bench's neutral scheme (Glorot-uniform, zero bias).
    "tf": {"init": "neutral"},
    "torch": {"init": "torch"},
}


def divisor_rule(sampling: str, normalisation: str, microbatch_size: int) -> str:
    """What one step's noised sum is divided by, in words that are equal when the numbers are.

    With shuffled fixed-size batches of B examples the actual size is B, so ``expected`` and
    ``actual`` both divide by the constant B, and ``microbatches`` by the constant B/k (B when
    k = 1, TF Privacy's per-example default). Under Poisson sampling ``actual`` and
    ``microbatches`` divide by a number that depends on who is in the batch.

    Returns:
        ``"B"``, ``"B/k"``, ``"actual batch size"`` or ``"actual microbatch count"``.
    """
    if normalisation == "expected":
        return "B"
    fixed = sampling == "shuffle"
    if normalisation == "actual" or microbatch_size == 1:
        return "B" if fixed else "actual batch size"
    if normalisation == "microbatches":
        return "B/k" if fixed else "actual microbatch count"
    raise ConfigError(
        f"factors.normalisation={normalisation!r} is not known; valid: expected, actual, "
        "microbatches"
    )


def effective_factors(recipe: str, backend: str, sampling: str,
                      factors: Mapping[str, Any]) -> dict[str, Any]:
    """Every factor (:data:`FACTOR_NAMES`) as the step ran it.

    Args:
        recipe: ``harmonised`` or ``library``.
        backend: ``tf`` or ``torch`` (a ``library`` step is the backend's own).
        sampling: ``privacy.sampling``.
        factors: the config's ``factors`` section (missing keys take their defaults).

    Returns:
        A mapping with one value per name in :data:`FACTOR_NAMES`.

    Raises:
        ConfigError: a factor name that is not a field of :class:`dpcore.config.FactorSpec`.
    """
    from dpcore.config import FactorSpec

    defaults = FactorSpec()
    unknown = sorted(set(factors) - set(defaults.__dataclass_fields__), key=str)
    if unknown:
        raise ConfigError(
            f"factor {unknown[0]!r} is not known; valid: "
            f"{', '.join(defaults.__dataclass_fields__)}"
        )
    values = {name: factors.get(name, getattr(defaults, name))
              for name in defaults.__dataclass_fields__}
    if values["init"] == "keras":
        values["init"] = "neutral"
    normalisation = values["normalisation"]
    if recipe == "library" and backend in LIBRARY_FIXED:
        values.update(LIBRARY_FIXED[backend])
        normalisation = _library_normalisation(backend, sampling)
    k = int(values["microbatch_size"])
    return {"sampling": sampling, "divisor": divisor_rule(sampling, normalisation, k),
            "microbatch_size": k, "init": values["init"],
            "input_scaling": values["input_scaling"],
            "calibration_accountant": values["calibration_accountant"],
            "eval_split": values["eval_split"]}


def recipe_record(config: RunConfig, backend: str, trainer: str | None = None
                  ) -> dict[str, Any]:
    """The RunResult ``recipe`` entry: name, the class and API that ran the step, the factors
    that differ from the harmonised defaults, every factor as the step ran it
    (``effective_factors``) and the privacy claim."""
    if trainer is None:
        table = LIBRARY_TRAINERS if config.recipe == "library" else HARMONISED_TRAINERS
        trainer = table[backend]
    factors = dataclasses.asdict(config.factors)
    return {"name": config.recipe, "trainer": trainer,
            "factors": {"sampling": config.privacy.sampling, **config.factors.non_default()},
            "effective_factors": effective_factors(config.recipe, backend,
                                                   config.privacy.sampling, factors),
            "privacy_claim": privacy_claim(config, backend)}


def library_schedule(config: RunConfig, n_train: int, backend: str) -> tuple[int, float]:
    """(steps per epoch, sampling rate) a ``recipe: library`` run takes through its library's
    own loader, known before training (the start line states the epsilon of these steps):

    * ``torch``: Opacus's ``make_private`` keeps the length of the ``DataLoader`` it wraps,
      ``ceil(N / B)`` batches, and samples at q = 1 / that length;
    * ``tf``: ``model.fit`` on ``N // B`` fixed batches of B (the last partial one dropped),
      q = B / N.

    The bench's own plan takes ``round(N / B)`` steps per epoch at q = B / N, so the two can
    differ (digits, B = 64: 22 planned, 23 run by Opacus). Checked against the runners in
    ``tests/cli/test_train_recipe_cli.py``.
    """
    batch = config.train.batch_size
    if backend == "torch":
        steps = max(1, math.ceil(n_train / batch))
        return steps, 1.0 / steps
    return max(1, n_train // batch), batch / n_train
