"""The two recipes (``harmonised`` and ``library``), their bad-input rules and privacy claims.

* :func:`dpcore.config.check_combination`: factor combinations that no recipe can run (raised
  from ``RunConfig.__post_init__``, so before any data is loaded or any step is taken; it lives
  with the config so that the config does not import this module);
* :func:`check_backend_recipe`: combinations one library's public API cannot run (e.g.
  Poisson sampling through TF Privacy's ``model.fit``), checked by the backend before
  training;
* :func:`privacy_claim`: whether the shared accountant's epsilon is a *proved* bound for what
  ran, or only "claimed, not proved", with the reasons (recorded in every RunResult);
* :func:`step_divisor`: the divisor of the noised gradient sum under ``factors.normalisation``.

Every rule is a one-line :class:`~dpcore.errors.ConfigError` naming the field and what would be
valid.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from dpcore.errors import ConfigError

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
    if backend == "tf":
        return "microbatches"  # DPKerasSGDOptimizer: noised sum / num_microbatches
    return "expected" if config.privacy.sampling == "poisson" else "actual"


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
        return {"status": "not private" if privacy.mechanism == "none" else PROVED,
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


def recipe_record(config: RunConfig, backend: str, trainer: str | None = None
                  ) -> dict[str, Any]:
    """The RunResult ``recipe`` entry: name, the class and API that ran the step, the factors
    that differ from the harmonised defaults, and the privacy claim."""
    if trainer is None:
        table = LIBRARY_TRAINERS if config.recipe == "library" else HARMONISED_TRAINERS
        trainer = table[backend]
    return {"name": config.recipe, "trainer": trainer,
            "factors": {"sampling": config.privacy.sampling, **config.factors.non_default()},
            "privacy_claim": privacy_claim(config, backend)}
