"""Rules across sections: factor and recipe combinations no recipe can run, and the audit's
canary and fault combinations (run by ``RunConfig.__post_init__`` through
:data:`dpcore.config.specs.COMBINATION_RULES`; the recipes' privacy claims are in
:mod:`dpcore.recipes`).
"""

from __future__ import annotations

from dpcore.config.specs import COMBINATION_RULES, RunConfig
from dpcore.datasets import DATASETS
from dpcore.errors import ConfigError, PrivacyConfigError
from dpcore.mechanisms import dpsgd_names, get_mechanism, is_non_private, mechanism_names


@COMBINATION_RULES.register()
def check_combination(config: RunConfig) -> None:
    """(Run by ``RunConfig.__post_init__``; the recipes' claims are in :mod:`dpcore.recipes`.)

    Refuse factor combinations no recipe can run (one-line ConfigError naming the field).

    Raises:
        ConfigError: microbatches with Poisson sampling or not dividing the batch; a harmonised
            factor or an ``augment`` section under ``recipe: library`` (whose step and loop
            are the library's own); a library recipe with a mechanism or optimizer the
            libraries' public APIs lack. (Augmentation of a text data set is refused where the
            data set is known: :func:`dpcore.augment.check_augment_data`.)
    """
    factors, privacy, train = config.factors, config.privacy, config.train
    check_audit_combination(config)
    k = factors.microbatch_size
    if k > 1:
        if privacy.sampling != "shuffle":
            raise ConfigError(
                f"factors.microbatch_size={k} needs privacy.sampling=shuffle: a Poisson batch "
                "has a random size that microbatches of a fixed size cannot divide; valid: "
                "microbatch_size 1, or sampling shuffle"
            )
        if train.batch_size % k:
            raise ConfigError(
                f"factors.microbatch_size={k} does not divide train.batch_size="
                f"{train.batch_size}; valid: a divisor of {train.batch_size}"
            )
        if not get_mechanism(privacy.mechanism).microbatches:
            raise ConfigError(
                f"factors.microbatch_size={k} is not available with privacy.mechanism="
                f"{privacy.mechanism}; valid: 1"
            )
    if config.recipe != "library":
        return
    if privacy.noise_source != "framework":
        raise ConfigError(
            f"privacy.noise_source={privacy.noise_source!r} applies to recipe=harmonised only: "
            "recipe=library runs each library as its users run it, with its own noise; valid "
            "under recipe=library: noise_source framework")
    model_extras = [f"model.{key}" for key in ("pretrained", "freeze")
                    if getattr(config.model, key)]
    if model_extras:
        raise ConfigError(
            f"{model_extras[0]} applies to recipe=harmonised only: recipe=library builds and "
            "trains each library's tutorial model from its own initialisation; valid under "
            "recipe=library: no model.pretrained, no model.freeze")
    augment = config.augment.non_default()
    if augment:
        key, value = next(iter(augment.items()))
        raise ConfigError(
            f"augment.{key}={value!r} applies to recipe=harmonised only: recipe=library runs "
            "each library's own tutorial loop (TF Privacy through model.fit, Opacus through "
            "make_private's data loader), which trains on the images unchanged; valid under "
            "recipe=library: no augment section (hflip false, crop_padding 0)"
        )
    changed = sorted(set(factors.non_default())
                     - {"microbatch_size", "eval_split", "input_scaling"})
    if changed:
        raise ConfigError(
            f"factors.{changed[0]} applies to recipe=harmonised only (recipe=library runs each "
            "library's own step); valid under recipe=library: factors.microbatch_size, "
            "factors.eval_split, factors.input_scaling"
        )
    if not get_mechanism(privacy.mechanism).library_recipe:
        library = [name for name in mechanism_names() if get_mechanism(name).library_recipe]
        raise ConfigError(
            f"privacy.mechanism={privacy.mechanism!r} has no library recipe (TF Privacy's and "
            "Opacus's public APIs run Gaussian DP-SGD only); valid under recipe=library: "
            f"{', '.join(library)}"
        )
    if train.optimizer != "sgd":
        raise ConfigError(
            f"train.optimizer={train.optimizer!r} has no library recipe here; valid under "
            "recipe=library: sgd"
        )
    if train.ema_decay is not None:
        raise ConfigError(
            f"train.ema_decay={train.ema_decay!r} is not part of either library's recipe; "
            "valid under recipe=library: null"
        )


def check_audit_combination(config: RunConfig) -> None:
    """Refuse a fault without an audit, input canaries on a text data set, and gradient
    canaries without DP-SGD (under ``recipe: library`` they enter the library's own step,
    where its API allows: ``tfpipe.library`` / ``torchpipe.library`` refuse the rest).

    Raises:
        ConfigError: ``factors.fault`` other than ``none`` without ``audit_canaries.count``;
            gradient canaries without DP-SGD (no per-example clipping to take them).
    """
    canaries, fault = config.audit_canaries, config.factors.fault
    if fault != "none" and not canaries.active:
        raise ConfigError(
            f"factors.fault={fault!r} deliberately breaks DP and is for audit checks only; "
            "valid: factors.fault=none, or an audit (audit_canaries.count > 0, "
            "--audit-canaries M)"
        )
    if canaries.active and canaries.kind == "input":
        info = DATASETS.get(config.data.name)
        if info is not None and info.task != "image":
            raise ConfigError(
                f"audit_canaries.kind='input' (mislabelled training images) needs an image "
                f"data set; data.name={config.data.name!r} is {info.task}; valid there: no "
                "audit_canaries")
    if not canaries.active or canaries.kind != "gradient":
        return
    if not config.privacy.is_dpsgd:
        raise ConfigError(
            f"audit_canaries.kind='gradient' needs DP-SGD (the canaries are per-example "
            f"records the step clips); privacy.mechanism={config.privacy.mechanism!r}; valid: "
            f"{', '.join(dpsgd_names())}, or audit_canaries.kind=input"
        )


@COMBINATION_RULES.register()
def check_class_weights_combination(config: RunConfig) -> None:
    """Refuse ``train.class_weights`` on a private run or under ``recipe: library``.

    Raises:
        PrivacyConfigError: class weights other than ``none`` with a mechanism that promises
            privacy (the weights are computed from the training labels, which no mechanism
            here accounts for).
        ConfigError: class weights under ``recipe: library`` (whose losses are the
            libraries' own).
    """
    rule = config.train.class_weights
    if rule == "none":
        return
    if not is_non_private(config.privacy.mechanism):
        raise PrivacyConfigError(
            f"train.class_weights={rule!r} weights each loss by a statistic of the training "
            f"labels, which privacy.mechanism={config.privacy.mechanism!r} does not account "
            "for; valid: train.class_weights=none, or privacy.mechanism=none")
    if config.recipe != "harmonised":
        raise ConfigError(
            f"train.class_weights={rule!r} is not part of either library's recipe; valid "
            "under recipe=library: none")
