"""Run configuration: frozen, validated, serialisable dataclasses and a stable config hash.

A :class:`RunConfig` holds everything that defines a run's *result* (data, model, privacy,
training, seed). Performance-only switches (engine, XLA, threads, physical chunk size) live in
:class:`PerfSpec`: they may change speed, never the result beyond float tolerance, and they are
not part of :attr:`RunConfig.config_hash`.

Config files are YAML or JSON mappings with the sections ``data``, ``model``, ``privacy``,
``train`` and the key ``seed`` (and optionally ``version``, ``recipe`` and the sections
``factors`` and ``augment``). Unknown keys are rejected.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from dpcore.errors import ConfigError, PrivacyConfigError, PrivacyWarning
from dpcore.layers import BATCHNORM_REASON, parse_layers

CONFIG_VERSION = 1

PRIVACY_MECHANISMS = ("none", "dpsgd-gaussian", "dpsgd-laplace", "ldp")
SAMPLING_MODES = ("poisson", "shuffle")
OPTIMIZERS = ("sgd", "adam")
ACTIVATIONS = ("relu", "tanh", "tempered_sigmoid")
LDP_MECHANISM_NAMES = ("laplace", "gaussian", "dp_pix")
#: Which test images a local-DP run's headline test metrics use (``data.ldp_test_inputs``);
#: the run records its metrics on both. The first is the default (the runs stored before the
#: option were evaluated on privatised images, and the default is left out of the hash).
LDP_TEST_INPUTS = ("privatised", "clean")
ENGINES = ("reference", "fast")
RECIPES = ("harmonised", "library")
NORMALISATIONS = ("expected", "actual", "microbatches")
INITIALISATIONS = ("neutral", "torch")
INPUT_SCALINGS = ("unit", "standardised")
CALIBRATION_ACCOUNTANTS = ("rdp", "pld", "prv")
EVAL_SPLITS = ("test", "train")
#: ``factors.fault``: deliberately broken DP steps, for audit checks only (issue 30).
FAULTS = ("none", "no_noise", "no_clip", "noise_div10")
#: ``audit_canaries.kind``: white-box gradient canaries or black-box mislabelled images.
CANARY_KINDS = ("gradient", "input")
#: Where a DP-SGD step's noise comes from: each library's own generator, or one vector per
#: step drawn in dpcore and added by both backends (:mod:`dpcore.shared_noise`).
NOISE_SOURCES = ("framework", "shared")

# -- settings refused for privacy reasons -----------------------------------------------------
# None of these is an option of the bench; they are named here so that a user who asks for one
# learns why it is refused (the reported epsilon would be false), not merely that it is unknown.

_SAMPLER_REASON = (
    "a weighted or class-balanced sampler makes an example's chance of joining a batch depend "
    "on its data (its label or weight), while the accountant charges every example the same "
    "sampling rate q = B/N; the reported epsilon would be false"
)
_NORMALISATION_REASON = (
    "under Poisson sampling the noised gradient sum is divided by the expected batch size "
    "B = qN, never by the actual batch size: the actual size depends on who is in the batch, so "
    "dividing by it leaks membership and breaks the sensitivity the accountant assumes; this "
    "normalisation is fixed, not an option"
)
_BATCHNORM_REASON = BATCHNORM_REASON

#: ``privacy.sampling`` values refused with the privacy reason (compared lower-case, ``-`` as
#: ``_``). Any other unknown value is simply "not known".
REFUSED_SAMPLING_MODES: dict[str, str] = {
    name: _SAMPLER_REASON
    for name in ("weighted", "weighted_random", "class_balanced", "balanced", "stratified",
                 "importance", "oversample", "oversampling", "undersample", "undersampling")
}

#: Keys that do not exist because they would make the guarantee false: ``section.key`` (or a
#: top-level key) -> the privacy reason given when a config names it.
REFUSED_KEYS: dict[str, str] = {
    **{f"{section}.{key}": _SAMPLER_REASON
       for section in ("privacy", "train", "data")
       for key in ("sampler", "weighted_sampler", "weighted_sampling", "sample_weights",
                   "sampling_weights", "class_balanced", "balanced_sampling",
                   "balance_classes")},
    **{f"{section}.{key}": _NORMALISATION_REASON
       for section in ("privacy", "train")
       for key in ("normalization", "normalisation", "normalize", "normalise", "normalize_by",
                   "normalise_by", "normalize_by_actual_batch", "normalise_by_actual_batch",
                   "divide_by", "divide_by_actual_batch", "actual_batch_size",
                   "noise_normalization", "noise_normalisation")},
    **{f"model.{key}": _BATCHNORM_REASON
       for key in ("batch_norm", "batchnorm", "batch_normalization", "batch_normalisation",
                   "use_batch_norm", "norm", "normalization", "normalisation")},
    **{key: _SAMPLER_REASON for key in ("sampler", "weighted_sampler", "sample_weights")},
    **{key: _NORMALISATION_REASON for key in ("normalization", "normalisation", "normalize_by")},
}


def refused_key_error(dotted: str) -> PrivacyConfigError | None:
    """The error for a config key refused for a privacy reason, or None if it is not one."""
    reason = REFUSED_KEYS.get(dotted.lower().replace("-", "_"))
    if reason is None:
        return None
    return PrivacyConfigError(f"{dotted} is refused: {reason}")


def check_delta_below_one_over_n(delta: float, n_train: int, *, key: str = "privacy.delta"
                                 ) -> bool:
    """Warn (:class:`~dpcore.errors.PrivacyWarning`) if ``delta >= 1/N``; True if it warned.

    A mechanism that publishes one randomly chosen example in the clear is (0, 1/N)-DP, so a
    delta of 1/N or more allows that and the (epsilon, delta) pair promises little. The run is
    not refused (the epsilon is computed correctly), only flagged.
    """
    if n_train >= 1 and delta * n_train >= 1.0:
        warnings.warn(
            f"{key}={delta:g} is not below 1/N = 1/{n_train} = {1.0 / n_train:.3g}: at such a "
            "delta, releasing one random example in the clear is allowed, so the guarantee is "
            "weak; use a delta well below 1/N (the default is 1/N rounded down to a power of "
            "ten)", PrivacyWarning, stacklevel=1,
        )
        return True
    return False


def _check_range(
    key: str,
    value: float | None,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    finite: bool = False,
    valid: str,
) -> None:
    """Raise ConfigError naming ``key`` if ``value`` lies outside the described interval.

    ``finite=True`` also refuses +-inf (e.g. an infinite noise multiplier, which no accountant
    can evaluate and which turns every weight into inf).
    """
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise ConfigError(f"{key}={value!r} is not a number; valid: {valid}")
    if finite and math.isinf(value):
        raise ConfigError(f"{key}={value!r} is not finite; valid: {valid}")
    bad = (
        (low is not None and (value <= low if low_open else value < low))
        or (high is not None and (value >= high if high_open else value > high))
    )
    if bad:
        raise ConfigError(f"{key}={value!r} is out of range; valid: {valid}")


def _integer_field(spec: Any, attr: str, key: str, *, low: int, valid: str) -> None:
    """Check that ``spec.attr`` is None or an integer >= ``low``; a whole float (``64.0``, as
    JSON or ``1e3`` may give) is stored as the int. Raises ConfigError naming ``key``."""
    value = getattr(spec, attr)
    _check_range(key, value, low=low, finite=True, valid=valid)
    if isinstance(value, float):
        if not value.is_integer():
            raise ConfigError(f"{key}={value!r} is not a whole number; valid: {valid}")
        object.__setattr__(spec, attr, int(value))


def _float_fields(spec: Any, *attrs: str) -> None:
    """Store int values of ``spec``'s real-valued fields as floats (after their range check),
    so that ``lr: 1`` and ``lr: 1.0`` (YAML, ``--set``) are one config with one hash. Every
    stored run already holds floats there, so no stored hash changes."""
    for attr in attrs:
        value = getattr(spec, attr)
        if isinstance(value, int) and not isinstance(value, bool):
            object.__setattr__(spec, attr, float(value))


def _check_choice(key: str, value: Any, choices: Iterable[str]) -> None:
    choices = tuple(choices)
    if value not in choices:
        raise ConfigError(f"{key}={value!r} is not known; valid: {', '.join(choices)}")


@dataclass(frozen=True)
class DataSpec:
    """Which data set, how it is loaded, and its optional local-DP perturbation.

    Attributes:
        name: registry name (``dpcompare datasets``), or ``medmnist:PATH`` for any MedMNIST npz.
        path: explicit file or folder; overrides the lookup under the data root.
        image_size: side length in pixels to resize to; ``None`` keeps the native size.
        channels: 1 (grayscale) or 3 (RGB); ``None`` keeps the native channel count.
        split_seed: seed of the train/test split for data sets that have no official split.
        ldp_mechanism: local-DP mechanism applied to every image before training, or ``None``.
        ldp_params: that mechanism's parameters (e.g. ``{"scale": 1.0}``).
        train_limit: use only this many training examples (a seeded subset), ``None`` for all.
        test_limit: use only this many test examples (a seeded subset), ``None`` for all.
        options: loader options (``dpcompare datasets --json`` lists each data set's, e.g.
            ``test_fraction`` and ``skip_unreadable`` of ``imagefolder:PATH``); unknown ones
            are refused when the data set is loaded. Left out of the config hash when empty.
        ldp_test_inputs: for a local-DP run, the test images its headline metrics use:
            ``privatised`` (noised like the training images; the default, left out of the
            config hash) or ``clean`` (the originals, as Singh et al. evaluate). The run
            records its test metrics on both either way.
    """

    name: str = "mnist5k"
    path: str | None = None
    image_size: int | None = None
    channels: int | None = None
    split_seed: int = 0
    ldp_mechanism: str | None = None
    ldp_params: dict[str, float] = field(default_factory=dict)
    train_limit: int | None = None
    test_limit: int | None = None
    options: dict[str, Any] = field(default_factory=dict)
    ldp_test_inputs: str = LDP_TEST_INPUTS[0]

    def __post_init__(self) -> None:
        _check_choice("data.ldp_test_inputs", self.ldp_test_inputs, LDP_TEST_INPUTS)
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"data.name={self.name!r} must be a non-empty data set name")
        if not isinstance(self.options, dict) or not all(isinstance(k, str)
                                                         for k in self.options):
            raise ConfigError(f"data.options={self.options!r} is not valid; valid: a mapping "
                              "of loader option names to values")
        _integer_field(self, "image_size", "data.image_size", low=1,
                       valid="an integer >= 1 or null")
        _integer_field(self, "split_seed", "data.split_seed", low=0, valid="an integer >= 0")
        if self.channels not in (None, 1, 3):
            raise ConfigError(f"data.channels={self.channels!r} is not valid; valid: 1, 3, null")
        if self.ldp_mechanism is not None:
            _check_choice("data.ldp_mechanism", self.ldp_mechanism, LDP_MECHANISM_NAMES)
        _integer_field(self, "train_limit", "data.train_limit", low=1,
                       valid="an integer >= 1 or null")
        _integer_field(self, "test_limit", "data.test_limit", low=1,
                       valid="an integer >= 1 or null")
        if isinstance(self.ldp_params, dict):  # ``scale: 1`` and ``scale: 1.0``: one hash
            object.__setattr__(self, "ldp_params", {
                k: float(v) if isinstance(v, int) and not isinstance(v, bool) else v
                for k, v in self.ldp_params.items()})


@dataclass(frozen=True)
class ModelSpec:
    """Architecture of the classifier, identical in both backends.

    Attributes:
        name: registry name (``cnn4``, ``resnet18``, ``vgg11``, ``vgg16``, ``alexnet``,
            ``textcnn``).
        activation: ``relu``, ``tanh`` or ``tempered_sigmoid``.
        tempered_scale: s in s * sigmoid(T * x) - o (tanh is s=2, T=2, o=1).
        tempered_inverse_temperature: T in the formula above.
        tempered_offset: o in the formula above.
        width: multiplier of every layer's channel count (1.0 = the published width).
        layers: for ``name: custom`` only, the network as a list of layer mappings
            (``{type: Conv2D, name: conv1, filters: 16, kernel: 3}``, ...; see
            :func:`dpcore.architectures.parse_layers`), built identically by both backends.
        pretrained: a weights file to start training from: the bench's neutral ``.npz``
            (:func:`dpcore.weights.save_weights`) or a PyTorch ``state_dict`` (``.pt``/``.pth``;
            :mod:`dpcore.pretrained`). The config hash sees the file's SHA-256, not its path.
        pretrained_skip: layers that keep their seeded initialisation instead of the file's
            weights (a head for another number of classes, torchvision's 7x7 stem).
        freeze: names of layers that are not trained: they get no update and their
            parameters are left out of the per-example clipping norm (DP fine-tuning of the
            rest, e.g. the head).

    ``layers``, ``pretrained``, ``pretrained_skip`` and ``freeze`` are left out of the config
    hash while unset, so every named model's hash is what it was before they existed.
    """

    name: str = "cnn4"
    activation: str = "relu"
    tempered_scale: float = 2.0
    tempered_inverse_temperature: float = 2.0
    tempered_offset: float = 1.0
    width: float = 1.0
    layers: list[dict[str, Any]] | None = None
    pretrained: str | None = None
    pretrained_skip: tuple[str, ...] = ()
    freeze: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"model.name={self.name!r} must be a non-empty model name")
        if (self.name == "custom") != (self.layers is not None):
            raise ConfigError(
                f"model.name={self.name!r} with model.layers="
                f"{'set' if self.layers is not None else 'unset'}; valid: name 'custom' with "
                "a list of layers, or a named model without layers"
            )
        if self.layers is not None:
            object.__setattr__(self, "layers", [dict(d) if isinstance(d, dict) else d
                                                for d in self.layers]
                               if isinstance(self.layers, list | tuple) else self.layers)
            parse_layers(self.layers)  # one-line ConfigError naming the bad layer
        if self.pretrained is not None and (not isinstance(self.pretrained, str)
                                            or not self.pretrained):
            raise ConfigError(f"model.pretrained={self.pretrained!r} is not valid; valid: the "
                              "path of a weights file (.npz or a PyTorch state_dict .pt)")
        for key in ("freeze", "pretrained_skip"):
            names = getattr(self, key)
            if isinstance(names, list):
                names = tuple(names)
                object.__setattr__(self, key, names)
            if not isinstance(names, tuple) or not all(isinstance(n, str) and n for n in names):
                raise ConfigError(f"model.{key}={names!r} is not valid; valid: a list of layer "
                                  "names")
        if self.pretrained_skip and self.pretrained is None:
            raise ConfigError(f"model.pretrained_skip={list(self.pretrained_skip)!r} needs "
                              "model.pretrained (a weights file)")
        _check_choice("model.activation", self.activation, ACTIVATIONS)
        _check_range("model.width", self.width, low=0, low_open=True, finite=True,
                     valid="a finite number > 0")
        for key in ("tempered_scale", "tempered_inverse_temperature", "tempered_offset"):
            _check_range(f"model.{key}", getattr(self, key), finite=True,
                         valid="a finite number")
        _float_fields(self, "width", "tempered_scale", "tempered_inverse_temperature",
                      "tempered_offset")


@dataclass(frozen=True)
class PrivacySpec:
    """The privacy-defining settings of a run.

    Attributes:
        mechanism: ``none`` (non-private), ``dpsgd-gaussian``, ``dpsgd-laplace``, or ``ldp``
            (local DP on the images, set in :class:`DataSpec`; training itself is non-private).
        noise_multiplier: std of the Gaussian noise (or scale of the Laplace noise) divided by
            the clip norm. Exactly one of ``noise_multiplier`` and ``target_epsilon`` is given
            for DP-SGD mechanisms.
        target_epsilon: epsilon to reach after the planned steps; the noise is calibrated to it.
        max_grad_norm: per-example clip norm C (L2 for Gaussian, L1 for Laplace), > 0.
        delta: target delta in (0, 1); ``None`` means 1/N rounded down to a power of ten.
        sampling: ``poisson`` (each example joins each batch independently with probability q)
            or ``shuffle`` (shuffled fixed-size batches).
        noise_source: ``framework`` (each library's own noise generator, what its users get)
            or ``shared`` (the noise of every step drawn once in dpcore from (seed, step) and
            added by both backends, :mod:`dpcore.shared_noise`: a paired difference then
            measures the frameworks alone). DP-SGD only; left out of the hash at its default.

    Not options, on purpose (a config naming them is refused with the privacy reason, see
    :data:`REFUSED_KEYS` and :data:`REFUSED_SAMPLING_MODES`): a weighted or class-balanced
    sampler; dividing the noised sum by the actual batch size (it is always divided by the
    expected batch size B = qN); BatchNorm in the model. A delta not below 1/N is allowed but
    warned about (:func:`check_delta_below_one_over_n`).
    """

    mechanism: str = "none"
    noise_multiplier: float | None = None
    target_epsilon: float | None = None
    max_grad_norm: float = 1.0
    delta: float | None = None
    sampling: str = "poisson"
    noise_source: str = "framework"

    def __post_init__(self) -> None:
        _check_choice("privacy.mechanism", self.mechanism, PRIVACY_MECHANISMS)
        _check_choice("privacy.noise_source", self.noise_source, NOISE_SOURCES)
        if self.noise_source != "framework" and not self.is_dpsgd:
            raise ConfigError(
                f"privacy.noise_source={self.noise_source!r} needs DP-SGD (it is the noise of "
                f"the clipped sum); privacy.mechanism={self.mechanism!r}; valid: noise_source "
                "framework, or mechanism dpsgd-gaussian / dpsgd-laplace")
        if isinstance(self.sampling, str) and (
                self.sampling.lower().replace("-", "_") in REFUSED_SAMPLING_MODES):
            raise PrivacyConfigError(
                f"privacy.sampling={self.sampling!r} is refused: "
                f"{REFUSED_SAMPLING_MODES[self.sampling.lower().replace('-', '_')]}; "
                f"valid: {', '.join(SAMPLING_MODES)}"
            )
        _check_choice("privacy.sampling", self.sampling, SAMPLING_MODES)
        _check_range(
            "privacy.noise_multiplier", self.noise_multiplier, low=0, finite=True,
            valid="a finite number >= 0",
        )
        _check_range(
            "privacy.target_epsilon", self.target_epsilon, low=0, low_open=True,
            valid="a number > 0",
        )
        _check_range(
            "privacy.max_grad_norm", self.max_grad_norm, low=0, low_open=True, finite=True,
            valid="a finite number > 0",
        )
        _check_range(
            "privacy.delta", self.delta, low=0, high=1, low_open=True, high_open=True,
            valid="a number in (0, 1)",
        )
        _float_fields(self, "noise_multiplier", "target_epsilon", "max_grad_norm", "delta")
        if self.is_dpsgd:
            if (self.noise_multiplier is None) == (self.target_epsilon is None):
                raise ConfigError(
                    f"privacy.mechanism={self.mechanism!r} needs exactly one of "
                    f"privacy.noise_multiplier and privacy.target_epsilon (got noise_multiplier="
                    f"{self.noise_multiplier!r}, target_epsilon={self.target_epsilon!r})"
                )
            if self.target_epsilon is not None and math.isinf(self.target_epsilon):
                raise ConfigError(
                    "privacy.target_epsilon=inf is not a DP-SGD setting; "
                    "use privacy.mechanism='none' for a non-private run"
                )

        elif self.noise_multiplier is not None or self.target_epsilon is not None:
            raise ConfigError(
                f"privacy.mechanism={self.mechanism!r} adds no gradient noise, but "
                f"noise_multiplier={self.noise_multiplier!r} / target_epsilon="
                f"{self.target_epsilon!r} is set; use mechanism dpsgd-gaussian or dpsgd-laplace"
            )

    @property
    def is_dpsgd(self) -> bool:
        """True for the mechanisms that clip and noise gradients."""
        return self.mechanism in ("dpsgd-gaussian", "dpsgd-laplace")

    def resolved_delta(self, n_train: int) -> float:
        """The delta used for accounting: the configured one, else 1/N rounded down to 10^-k.

        A configured delta not below 1/N is used but warned about (:class:`PrivacyWarning`).
        """
        if self.delta is not None:
            check_delta_below_one_over_n(self.delta, n_train)
            return self.delta
        return default_delta(n_train)


def default_delta(n_train: int) -> float:
    """1/N rounded down to a power of ten (N=60000 -> 1e-5; N=1000 -> 1e-3... then below 1/N).

    The result is the largest 10^-k that is strictly below 1/N, so delta < 1/N always holds.
    """
    if n_train < 1:
        raise ConfigError(f"cannot derive delta from a data set of {n_train} examples; need >= 1")
    k = math.floor(math.log10(n_train)) + 1
    return float(10.0 ** (-k))


@dataclass(frozen=True)
class TrainSpec:
    """Optimisation settings.

    Attributes:
        epochs: number of passes, in expected examples (steps = ceil(epochs / q)); or ``None``.
        steps: number of logical batches; exactly one of ``epochs`` and ``steps`` is given.
        batch_size: expected logical batch size (Poisson) or fixed batch size (shuffle).
        lr: learning rate.
        optimizer: ``sgd`` or ``adam``.
        momentum: SGD momentum in [0, 1).
        ema_decay: decay of the exponential moving average of the weights used for evaluation,
            in [0, 1); ``None`` evaluates the raw weights.
    """

    epochs: float | None = 1.0
    steps: int | None = None
    batch_size: int = 256
    lr: float = 0.1
    optimizer: str = "sgd"
    momentum: float = 0.0
    ema_decay: float | None = None

    def __post_init__(self) -> None:
        if (self.epochs is None) == (self.steps is None):
            raise ConfigError(
                f"exactly one of train.epochs and train.steps must be set "
                f"(got epochs={self.epochs!r}, steps={self.steps!r})"
            )
        _check_range("train.epochs", self.epochs, low=0, low_open=True, finite=True,
                     valid="a finite number > 0")
        _integer_field(self, "steps", "train.steps", low=1, valid="an integer >= 1")
        _integer_field(self, "batch_size", "train.batch_size", low=1, valid="an integer >= 1")
        _check_range("train.lr", self.lr, low=0, low_open=True, finite=True,
                     valid="a finite number > 0")
        _check_choice("train.optimizer", self.optimizer, OPTIMIZERS)
        _check_range(
            "train.momentum", self.momentum, low=0, high=1, high_open=True, valid="[0, 1)"
        )
        if self.optimizer != "sgd" and self.momentum:
            raise ConfigError(
                f"train.momentum={self.momentum!r} applies to SGD only, but "
                f"train.optimizer={self.optimizer!r} (which would ignore it); valid: "
                "train.momentum=0 with this optimizer, or train.optimizer=sgd")
        _check_range(
            "train.ema_decay", self.ema_decay, low=0, high=1, high_open=True,
            valid="[0, 1) or null",
        )
        # epochs keeps the type it was given: the default (1.0) and every stored preset run
        # (``epochs: 20``) already hash with different types, so no canonical form is free
        _float_fields(self, "lr", "momentum", "ema_decay")


@dataclass(frozen=True)
class FactorSpec:
    """The switches by which the two libraries' stock recipes differ (issue 14).

    Each field is one difference between TF Privacy's and Opacus's way of running DP-SGD, so
    the harmonised recipe can take it from either library and a grid can flip one at a time.
    The defaults are the harmonised recipe (today's behaviour); a config whose factors are all
    at their defaults hashes exactly as before the section existed. Batch sampling, the
    remaining factor, is ``privacy.sampling`` (``poisson`` or ``shuffle``).

    Attributes:
        normalisation: divisor of the noised gradient sum: ``expected`` (B = qN, Opacus),
            ``actual`` (the batch's actual size) or ``microbatches`` (the batch's number of
            microbatches, TF Privacy's ``num_microbatches``).
        microbatch_size: examples per clipping unit; 1 = per-example clipping (Opacus), k > 1 =
            the mean gradient of k consecutive examples is clipped (TF Privacy with
            ``num_microbatches = batch_size / k``). Needs shuffled fixed-size batches that k
            divides.
        init: ``neutral`` (the bench's seeded initialisation, which follows Keras' default
            scheme: Glorot-uniform kernels, zero biases; ``keras`` is accepted as the same) or
            ``torch`` (PyTorch's default scheme, kaiming-uniform(a=sqrt 5) kernels and
            uniform(+-1/sqrt(fan_in)) biases), seeded and identical in both frameworks.
        input_scaling: ``unit`` (pixels in [0, 1]) or ``standardised`` ((x - mean) / std with
            the training set's own pixel mean and std, as the Opacus MNIST example does).
        calibration_accountant: accountant that turns ``privacy.target_epsilon`` into a noise
            multiplier: ``rdp`` or ``pld`` (dp_accounting), or ``prv`` (Opacus's, as
            ``make_private_with_epsilon``; Gaussian only, on either backend: registered by the
            torch backend, which the compare layer loads for it, see
            :data:`dpcore.accounting.CALIBRATORS`); ``None`` = the bench's rule (RDP for
            Gaussian, PLD for Laplace).
        eval_split: the split whose accuracy the run reports: ``test`` or ``train``.
        fault: a deliberately broken DP step, for audit checks only: ``none``, ``no_noise``
            (no noise is added), ``no_clip`` (nothing is clipped) or ``noise_div10`` (a tenth
            of the noise). Refused unless the run audits (``audit_canaries``); every record
            and report row of such a run says "deliberately broken".
    """

    normalisation: str = "expected"
    microbatch_size: int = 1
    init: str = "neutral"
    input_scaling: str = "unit"
    calibration_accountant: str | None = None
    eval_split: str = "test"
    fault: str = "none"

    def __post_init__(self) -> None:
        if self.init == "keras":  # the neutral initialisation *is* Keras' default scheme
            object.__setattr__(self, "init", "neutral")
        _check_choice("factors.normalisation", self.normalisation, NORMALISATIONS)
        _integer_field(self, "microbatch_size", "factors.microbatch_size", low=1,
                       valid="an integer >= 1 (1 = per-example clipping)")
        _check_choice("factors.init", self.init, (*INITIALISATIONS, "keras"))
        _check_choice("factors.input_scaling", self.input_scaling, INPUT_SCALINGS)
        if self.calibration_accountant is not None:
            _check_choice("factors.calibration_accountant", self.calibration_accountant,
                          CALIBRATION_ACCOUNTANTS)
        _check_choice("factors.eval_split", self.eval_split, EVAL_SPLITS)
        _check_choice("factors.fault", self.fault, FAULTS)

    def non_default(self) -> dict[str, Any]:
        """The fields that differ from the harmonised defaults (what the config hash sees)."""
        default = FactorSpec()
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) != getattr(default, f.name)}


@dataclass(frozen=True)
class AugmentSpec:
    """Per-example augmentation of the training images, identical on both backends.

    Applied by :func:`dpcore.trainloop.run_training` to each logical training batch (see
    :mod:`dpcore.augment`), drawn from a generator seeded by ``(seed, step)``, so both
    backends train on the same augmented images in every step and a run is reproducible.
    Evaluation (test metrics, faithfulness, Grad-CAM) always sees the clean images. The
    defaults (no augmentation) are left out of the config hash, so every config written
    before this section existed keeps its hash.

    Privacy: no extra cost, and no change to the accounting. Each augmented image is a function
    of one training example only and of random choices that do not depend on the data (drawn
    independently and identically for each example of a batch), and its gradient is clipped as
    that example's gradient; adding or removing one example still changes the clipped sum by
    at most the clip norm, so the sensitivity, and hence the accountant's epsilon, is the same
    as without augmentation.

    Attributes:
        hflip: flip each training image left-right with probability 1/2, independently per
            example.
        crop_padding: pad each side of each training image with this many pixels of value 0
            (in the array's own units), then crop back to the original size at an offset drawn
            uniformly per example (``0`` = no crop). Must be smaller than the image's sides
            (checked when the data set is known).
    """

    hflip: bool = False
    crop_padding: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.hflip, bool):
            raise ConfigError(f"augment.hflip={self.hflip!r} is not valid; valid: true or false")
        if self.crop_padding is None:
            raise ConfigError("augment.crop_padding=None is not valid; valid: an integer >= 0 "
                              "(pixels of padding per side; 0 = no crop)")
        _integer_field(self, "crop_padding", "augment.crop_padding", low=0,
                       valid="an integer >= 0 (pixels of padding per side; 0 = no crop)")

    @property
    def active(self) -> bool:
        """True when any augmentation is asked for."""
        return self.hflip or self.crop_padding > 0

    def non_default(self) -> dict[str, Any]:
        """The fields that differ from no augmentation (what the config hash sees)."""
        default = AugmentSpec()
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) != getattr(default, f.name)}


@dataclass(frozen=True)
class AuditCanarySpec:
    """Canaries of a one-run privacy audit (Steinke, Nasr, Jagielski 2023; :mod:`dpcore.audit`).

    ``count`` canaries are each included in training independently with probability 1/2 by a
    generator seeded from the run seed; after training, the ``guesses`` highest-scoring ones
    are guessed "in" (and the lowest "out" when ``guess_out``), and the right guesses give an
    epsilon lower bound. Canaries change what trains, so a config with them has its own hash;
    the default (no canaries) is left out of the hash.

    Attributes:
        count: M, number of canaries (0 = no audit).
        kind: ``gradient`` (white-box, harmonised DP-SGD: a per-example gradient along its own
            weight coordinate, added to the clipped sum before the noise) or ``input``
            (black-box, any recipe: a training image with a fixed wrong label).
        guesses: k, "in" guesses (default M / 10).
        guess_out: also guess "out" for the k lowest scores.
    """

    count: int = 0
    kind: str = "gradient"
    guesses: int | None = None
    guess_out: bool = False

    def __post_init__(self) -> None:
        _integer_field(self, "count", "audit_canaries.count", low=0,
                       valid="an integer >= 0 (0 = no audit)")
        _check_choice("audit_canaries.kind", self.kind, CANARY_KINDS)
        if not isinstance(self.guess_out, bool):
            raise ConfigError(f"audit_canaries.guess_out={self.guess_out!r} is not valid; "
                              "valid: true or false")
        if self.guesses is not None:
            _integer_field(self, "guesses", "audit_canaries.guesses", low=1,
                           valid="an integer >= 1, or null (M / 10)")
            room = self.count // 2 if self.guess_out else self.count
            if self.count and self.guesses > room:
                raise ConfigError(
                    f"audit_canaries.guesses={self.guesses} is more than the "
                    f"{self.count} canaries allow; valid: 1..{room}")

    @property
    def active(self) -> bool:
        """True when the run audits."""
        return self.count > 0

    @property
    def k(self) -> int:
        """The number of "in" guesses: ``guesses``, default max(1, M // 10)."""
        return self.guesses if self.guesses is not None else max(1, self.count // 10)

    def non_default(self) -> dict[str, Any]:
        """The fields that differ from no audit (what the config hash sees)."""
        default = AuditCanarySpec()
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) != getattr(default, f.name)}


@dataclass(frozen=True)
class PerfSpec:
    """Performance-only switches: never part of the config hash, never change the result.

    Attributes:
        engine: ``None`` (default: the fast engine where the model supports it, else the
            reference one, the fallback recorded in the result's ``perf``), ``fast`` (strict:
            a model layer without a fast rule is an error naming it) or ``reference`` (the
            library's documented per-example DP path). Both compute the same
            clipped-and-noised update (see :func:`dpcore.backend.choose_engine`).
        xla: compile with XLA where the backend supports it.
        threads: intra-op threads, ``None`` for the framework default.
        physical_batch_size: largest chunk of examples whose per-example gradients are held
            in memory at once; a logical batch is processed in chunks and noised once.
        deterministic: ask the framework for deterministic kernels.
        library_jacobian_batch_size: ``recipe: library`` on TF only: examples in one of TF
            Privacy's per-microbatch Jacobians; a larger batch is made up with TF Privacy's
            own ``gradient_accumulation_steps`` (the same update in distribution, see
            :mod:`tfpipe.library`). The Jacobian backpropagates each microbatch through the
            whole physical batch, so its time and memory grow with the square of its size
            (CNN4 on MNIST, 2 busy cores: ~150 s per 60k-example epoch at 16, ~300 s at 32,
            ~1150 s at 128; 1024 asks for an 11 GB tensor). ``None``: the whole batch.
        cache_fixed_front: compute a model's fixed front end (the ScatterNet's scattering and
            weight-free GroupNorm) once per data set and train the rest on its output, as
            Tramer & Boneh do (:mod:`dpcore.frontcache`); harmonised recipe only. The same
            result within float tolerance; ``False`` recomputes it in every step.
    """

    engine: str | None = None
    xla: bool = False
    threads: int | None = None
    physical_batch_size: int | None = 256
    deterministic: bool = True
    library_jacobian_batch_size: int | None = 16
    cache_fixed_front: bool = True

    def __post_init__(self) -> None:
        if self.engine is not None:
            _check_choice("perf.engine", self.engine, ENGINES)
        _integer_field(self, "threads", "perf.threads", low=1, valid="an integer >= 1 or null")
        _integer_field(self, "physical_batch_size", "perf.physical_batch_size", low=1,
                       valid="an integer >= 1 or null")
        _integer_field(self, "library_jacobian_batch_size", "perf.library_jacobian_batch_size",
                       low=1, valid="an integer >= 1 or null")
        if not isinstance(self.cache_fixed_front, bool):
            raise ConfigError(f"perf.cache_fixed_front={self.cache_fixed_front!r} is not "
                              "valid; valid: true or false")


_SECTIONS: dict[str, type] = {
    "data": DataSpec,
    "model": ModelSpec,
    "privacy": PrivacySpec,
    "train": TrainSpec,
    "factors": FactorSpec,
    "augment": AugmentSpec,
    "audit_canaries": AuditCanarySpec,
}
# ``factors``, ``augment`` and ``recipe`` are left out of RunConfig.to_dict (and so of the
# config hash) while they hold their defaults: configs written before they existed keep their
# hash, so stored runs stay valid.
_OPTIONAL_SECTIONS = ("factors", "augment", "audit_canaries")
# Fields of the always-written sections that are likewise left out while at their defaults.
_OPTIONAL_FIELDS: dict[str, tuple[str, ...]] = {
    "data": ("options", "ldp_test_inputs"),
    "model": ("layers", "pretrained", "pretrained_skip", "freeze"),
    "privacy": ("noise_source",),
}


def _without_defaults(name: str, section: dict[str, Any]) -> dict[str, Any]:
    """``section`` without the :data:`_OPTIONAL_FIELDS` of ``name`` that hold their default."""
    defaults = {f.name: (f.default_factory() if f.default_factory is not dataclasses.MISSING
                         else f.default) for f in fields(_SECTIONS[name])}
    return {k: v for k, v in section.items()
            if k not in _OPTIONAL_FIELDS.get(name, ()) or v != defaults[k]}


def file_sha256(path: str | Path) -> str:
    """SHA-256 (hex) of a file's bytes, cached by (resolved path, size, mtime).

    Raises:
        ConfigError: naming the file if it cannot be read.
    """
    path = Path(path).expanduser()
    try:
        st = path.stat()
        key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
        if key not in _FILE_HASHES:
            digest = hashlib.sha256()
            with path.open("rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(block)
            _FILE_HASHES[key] = digest.hexdigest()
    except OSError as exc:
        raise ConfigError(f"model.pretrained={str(path)!r} cannot be read ({exc.strerror}); "
                          "valid: an existing weights file") from exc
    return _FILE_HASHES[key]


_FILE_HASHES: dict[tuple[str, int, int], str] = {}


@dataclass(frozen=True)
class RunConfig:
    """Everything that defines one run's result. ``config_hash`` keys the results store."""

    data: DataSpec = field(default_factory=DataSpec)
    model: ModelSpec = field(default_factory=ModelSpec)
    privacy: PrivacySpec = field(default_factory=PrivacySpec)
    train: TrainSpec = field(default_factory=TrainSpec)
    seed: int = 0
    factors: FactorSpec = field(default_factory=FactorSpec)
    recipe: str = "harmonised"
    augment: AugmentSpec = field(default_factory=AugmentSpec)
    audit_canaries: AuditCanarySpec = field(default_factory=AuditCanarySpec)

    def __post_init__(self) -> None:
        _check_choice("recipe", self.recipe, RECIPES)
        for name, cls in _SECTIONS.items():
            if not isinstance(getattr(self, name), cls):
                raise ConfigError(f"{name} must be a {cls.__name__}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError(f"seed={self.seed!r} is not valid; valid: an integer >= 0")
        if self.privacy.mechanism == "ldp" and self.data.ldp_mechanism is None:
            raise ConfigError(
                "privacy.mechanism='ldp' needs data.ldp_mechanism (laplace, gaussian, dp_pix)"
            )
        if self.data.ldp_test_inputs != LDP_TEST_INPUTS[0] and self.data.ldp_mechanism is None:
            raise ConfigError(
                f"data.ldp_test_inputs={self.data.ldp_test_inputs!r} applies to local-DP runs "
                "only; set data.ldp_mechanism, or leave it at 'privatised'")
        if self.data.ldp_mechanism is not None and self.privacy.mechanism != "ldp":
            raise ConfigError(
                f"data.ldp_mechanism={self.data.ldp_mechanism!r} is set but "
                f"privacy.mechanism={self.privacy.mechanism!r}; set privacy.mechanism='ldp'"
            )
        check_combination(self)

    # -- serialisation ---------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """A plain JSON-able mapping, including ``version``."""
        out: dict[str, Any] = {"version": CONFIG_VERSION}
        for name in _SECTIONS:
            if name in _OPTIONAL_SECTIONS:
                continue
            out[name] = _without_defaults(name, dataclasses.asdict(getattr(self, name)))
        out["seed"] = self.seed
        for name in _OPTIONAL_SECTIONS:
            changed = getattr(self, name).non_default()
            if changed:
                out[name] = changed
        if self.recipe != "harmonised":
            out["recipe"] = self.recipe
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> RunConfig:
        """Build a config from a mapping; unknown sections or keys raise ConfigError."""
        if not isinstance(raw, Mapping):
            raise ConfigError(f"a config must be a mapping, got {type(raw).__name__}")
        raw = dict(raw)
        version = raw.pop("version", CONFIG_VERSION)
        if version != CONFIG_VERSION:
            raise ConfigError(f"config version={version!r} is not known; valid: {CONFIG_VERSION}")
        _check_keys(raw)
        kwargs: dict[str, Any] = {}
        for name, spec_cls in _SECTIONS.items():
            section = raw.get(name) or {}
            if name == "privacy" and isinstance(section.get("mechanism"), str):
                section = {**section, "mechanism": normalise_mechanism(section["mechanism"])}
            section = _coerce_numeric_strings(spec_cls, section)
            if name == "train" and section.get("steps") is not None and "epochs" not in section:
                section["epochs"] = None  # a section that gives only steps means steps
            try:
                kwargs[name] = spec_cls(**section)
            except TypeError as exc:  # e.g. a mapping where a scalar belongs
                raise ConfigError(f"config section {name!r}: {exc}") from exc
        if "seed" in raw:
            kwargs["seed"] = raw["seed"]
        if "recipe" in raw:
            kwargs["recipe"] = raw["recipe"]
        return cls(**kwargs)

    @classmethod
    def from_file(cls, path: str | Path) -> RunConfig:
        """Load a YAML or JSON config file."""
        return cls.from_dict(load_mapping_file(path))

    def with_overrides(self, assignments: Iterable[str]) -> RunConfig:
        """Apply ``section.key=value`` overrides (values parsed as YAML scalars)."""
        return RunConfig.from_dict(apply_overrides(self.to_dict(), assignments))

    def replace(self, **sections: Any) -> RunConfig:
        """A copy with whole sections or fields replaced (``replace(seed=1)``)."""
        return dataclasses.replace(self, **sections)

    @property
    def config_hash(self) -> str:
        """First 16 hex digits of the SHA-256 of the canonical JSON form (stable across runs).

        A ``model.pretrained`` file enters as ``sha256:<hex>`` of its bytes, not its path:
        the same weights anywhere give the same hash (ConfigError if it cannot be read).
        """
        raw = self.to_dict()
        if self.model.pretrained is not None:
            raw["model"]["pretrained"] = f"sha256:{file_sha256(self.model.pretrained)}"
        canonical = json.dumps(raw, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


#: Mechanism names accepted on the command line and in files -> the config's name (a file
#: may say ``gaussian`` as ``--mechanism gaussian`` does; stored configs, and so their hashes,
#: always hold the config's name).
MECHANISM_ALIASES: dict[str, str] = {
    "gaussian": "dpsgd-gaussian", "laplace": "dpsgd-laplace", "dp-sgd": "dpsgd-gaussian",
    "dpsgd": "dpsgd-gaussian", "non-private": "none", "nonprivate": "none",
}


def normalise_mechanism(name: str) -> str:
    """The config's mechanism name for ``name`` (``gaussian`` -> ``dpsgd-gaussian``...);
    unknown names are returned as given (validation names them)."""
    return MECHANISM_ALIASES.get(name.strip().lower(), name)


def _check_keys(raw: Mapping[str, Any]) -> None:
    """Refuse every unknown key of a config mapping at once (one line naming all of them, with
    the valid keys of each section they were found in); a key refused for a privacy reason is
    named with that reason first.

    Raises:
        PrivacyConfigError: a key of :data:`REFUSED_KEYS`.
        ConfigError: unknown top-level keys or section keys, or a section that is no mapping.
    """
    from dpcore.suggest import did_you_mean

    def unknown(given: Iterable[Any], valid: set[str], prefix: str, where: str) -> None:
        """Record the unknown keys of one mapping (a refused one raises its reason)."""
        bad = sorted(set(given) - valid, key=str)
        for key in bad:
            refused = refused_key_error(f"{prefix}{key}")
            if refused is not None:
                raise refused
        if bad:
            problems.append(
                f"unknown {where} " + ", ".join(
                    f"{prefix}{key}{did_you_mean(key, valid)}" for key in map(str, bad))
                + f" ({'valid' if not prefix else 'valid in ' + prefix[:-1]}: "
                f"{', '.join(sorted(valid))})")

    problems: list[str] = []
    unknown(raw, set(_SECTIONS) | {"seed", "recipe"}, "", "config key(s)")
    for name, spec_cls in _SECTIONS.items():
        section = raw.get(name) or {}
        if not isinstance(section, Mapping):
            raise ConfigError(f"config section {name!r} must be a mapping")
        unknown(section, {f.name for f in fields(spec_cls)}, f"{name}.", "key(s)")
    if problems:
        raise ConfigError("; ".join(problems))


def load_mapping_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML/JSON file that must contain a mapping; errors name the file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        detail = " ".join(str(exc).split())  # PyYAML's message spans several lines
        raise ConfigError(f"config file {path} is not valid YAML/JSON: {detail}") from exc
    except OSError as exc:
        raise ConfigError(f"config file {path} cannot be read ({exc.strerror})") from exc
    if not isinstance(loaded, dict):
        raise ConfigError(f"config file {path} must contain a mapping at the top level")
    return loaded


def apply_overrides(raw: Mapping[str, Any], assignments: Iterable[str]) -> dict[str, Any]:
    """Return a deep copy of ``raw`` with each ``a.b=value`` assignment applied.

    Values are parsed as YAML scalars (``1e-5`` -> float, ``null`` -> None, ``true`` -> bool).
    """
    out = json.loads(json.dumps(raw))
    for assignment in assignments:
        if "=" not in assignment:
            raise ConfigError(f"override {assignment!r} is not of the form section.key=value")
        dotted, text = assignment.split("=", 1)
        keys = [k for k in dotted.strip().split(".") if k]
        if not keys:
            raise ConfigError(f"override {assignment!r} has an empty key")
        try:
            value = yaml.safe_load(text) if text.strip() else None
        except yaml.YAMLError as exc:
            raise ConfigError(f"override {assignment!r}: value is not valid YAML: {exc}") from exc
        if isinstance(value, str):
            value = _yaml_float_or_str(value)
        node = out
        for key in keys[:-1]:
            child = node.get(key)
            if child is None:
                child = node[key] = {}
            if not isinstance(child, dict):
                raise ConfigError(f"override {assignment!r}: {key!r} is not a section")
            node = child
        node[keys[-1]] = value
    return out


def _yaml_float_or_str(text: str) -> Any:
    """YAML 1.1 reads ``1e-5`` as a string; accept it as the float a user means."""
    try:
        return float(text)
    except ValueError:
        return text


def _coerce_numeric_strings(spec_cls: type, section: Mapping[str, Any]) -> dict[str, Any]:
    """Turn strings such as ``"1e-5"`` (YAML 1.1 reads them as text) into floats.

    Only fields typed as float are touched; text that is not a number is left as it is, so that
    validation names the key and the valid range.
    """
    float_fields = {f.name for f in fields(spec_cls) if "float" in str(f.type)}
    out = dict(section)
    for key, value in section.items():
        if key in float_fields and isinstance(value, str):
            with contextlib.suppress(ValueError):
                out[key] = float(value)
    return out


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
        if privacy.mechanism == "dpsgd-laplace":
            raise ConfigError(
                f"factors.microbatch_size={k} is not available with privacy.mechanism="
                "dpsgd-laplace; valid: 1"
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
    if privacy.mechanism not in ("none", "dpsgd-gaussian"):
        raise ConfigError(
            f"privacy.mechanism={privacy.mechanism!r} has no library recipe (TF Privacy's and "
            "Opacus's public APIs run Gaussian DP-SGD only); valid under recipe=library: none, "
            "dpsgd-gaussian"
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
    canaries where no shared step runs.

    Raises:
        ConfigError: ``factors.fault`` other than ``none`` without ``audit_canaries.count``;
            gradient canaries under ``recipe: library`` (the library's own step has no canary
            hook: use input canaries) or without DP-SGD (no clipped sum to add them to).
    """
    canaries, fault = config.audit_canaries, config.factors.fault
    if fault != "none" and not canaries.active:
        raise ConfigError(
            f"factors.fault={fault!r} deliberately breaks DP and is for audit checks only; "
            "valid: factors.fault=none, or an audit (audit_canaries.count > 0, "
            "--audit-canaries M)"
        )
    if canaries.active and canaries.kind == "input":
        from dpcore.data.registry import DATASETS  # lazy: the registry is data, not config

        info = DATASETS.get(config.data.name)
        if info is not None and info.task != "image":
            raise ConfigError(
                f"audit_canaries.kind='input' (mislabelled training images) needs an image "
                f"data set; data.name={config.data.name!r} is {info.task}; valid there: no "
                "audit_canaries")
    if not canaries.active or canaries.kind != "gradient":
        return
    if config.recipe != "harmonised":
        raise ConfigError(
            f"audit_canaries.kind='gradient' needs recipe=harmonised (the canaries enter the "
            f"shared DP step); recipe={config.recipe!r} runs the library's own step; valid "
            "there: audit_canaries.kind=input"
        )
    if not config.privacy.is_dpsgd:
        raise ConfigError(
            f"audit_canaries.kind='gradient' needs DP-SGD (the canary gradients are added to "
            f"the clipped sum); privacy.mechanism={config.privacy.mechanism!r}; valid: "
            "dpsgd-gaussian, dpsgd-laplace, or audit_canaries.kind=input"
        )
