"""Run configuration specs: frozen, validated, serialisable dataclasses and a stable hash.

A :class:`RunConfig` holds everything that defines a run's *result* (data, model, privacy,
training, seed). Performance-only switches (engine, XLA, threads, physical chunk size) live in
:class:`PerfSpec`: they may change speed, never the result beyond float tolerance, and they are
not part of :attr:`RunConfig.config_hash`. Each section validates its own fields
(:mod:`dpcore.config.validation`); rules across sections are :data:`COMBINATION_RULES`
(:mod:`dpcore.config.recipe_rules` registers them).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from dpcore.config.choices import (
    ACTIVATIONS,
    CANARY_KINDS,
    CONFIG_VERSION,
    ENGINES,
    EVAL_SPLITS,
    INITIALISATIONS,
    INPUT_SCALINGS,
    LDP_TEST_INPUTS,
    MEMORY_FORMATS,
    NOISE_SOURCES,
    NORMALISATIONS,
    OPTIMIZERS,
    RECIPES,
    ROUTE_CHOICES,
    SAMPLING_MODES,
    calibration_accountants,
    class_weighting_names,
    fault_names,
    ldp_mechanism_names,
    privacy_mechanisms,
)
from dpcore.config.parsing import (
    apply_overrides,
    check_keys,
    coerce_numeric_strings,
    load_mapping_file,
    normalise_mechanism,
)
from dpcore.config.validation import (
    DEFAULT_DELTA_RULE,
    REFUSED_SAMPLING_MODES,
    check_choice,
    check_delta_below_one_over_n,
    check_range,
    default_delta,
    float_fields,
    integer_field,
)
from dpcore.errors import ConfigError, PrivacyConfigError
from dpcore.fastroutes import check_routes
from dpcore.layers import parse_layers
from dpcore.mechanisms import dpsgd_names, get_mechanism, is_non_private
from dpcore.noise_key import check_noise_key, check_privacy_noise_key, hash_entries
from dpcore.registry import Registry


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
        check_choice("data.ldp_test_inputs", self.ldp_test_inputs, LDP_TEST_INPUTS)
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"data.name={self.name!r} must be a non-empty data set name")
        if not isinstance(self.options, dict) or not all(isinstance(k, str)
                                                         for k in self.options):
            raise ConfigError(f"data.options={self.options!r} is not valid; valid: a mapping "
                              "of loader option names to values")
        integer_field(self, "image_size", "data.image_size", low=1,
                       valid="an integer >= 1 or null")
        integer_field(self, "split_seed", "data.split_seed", low=0, valid="an integer >= 0")
        if self.channels not in (None, 1, 3):
            raise ConfigError(f"data.channels={self.channels!r} is not valid; valid: 1, 3, null")
        if self.ldp_mechanism is not None:
            check_choice("data.ldp_mechanism", self.ldp_mechanism, ldp_mechanism_names())
        integer_field(self, "train_limit", "data.train_limit", low=1,
                       valid="an integer >= 1 or null")
        integer_field(self, "test_limit", "data.test_limit", low=1,
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
        check_choice("model.activation", self.activation, ACTIVATIONS)
        check_range("model.width", self.width, low=0, low_open=True, finite=True,
                     valid="a finite number > 0")
        for key in ("tempered_scale", "tempered_inverse_temperature", "tempered_offset"):
            check_range(f"model.{key}", getattr(self, key), finite=True,
                         valid="a finite number")
        float_fields(self, "width", "tempered_scale", "tempered_inverse_temperature",
                      "tempered_offset")


@dataclass(frozen=True)
class PrivacySpec:
    """The privacy-defining settings of a run.

    Attributes:
        mechanism: a name of :data:`dpcore.mechanisms.DP_MECHANISMS`: ``none``
            (non-private), ``dpsgd-gaussian``, ``dpsgd-laplace``, or ``ldp`` (local DP on the
            images, set in :class:`DataSpec`; training itself is non-private).
        noise_multiplier: std of the Gaussian noise (or scale of the Laplace noise) divided by
            the clip norm. Exactly one of ``noise_multiplier`` and ``target_epsilon`` is given
            for DP-SGD mechanisms.
        target_epsilon: epsilon to reach after the planned steps; the noise is calibrated to it.
        max_grad_norm: per-example clip norm C (L2 for Gaussian, L1 for Laplace), > 0.
        delta: target delta in (0, 1); ``None`` means :func:`default_delta` (the largest power
            of ten strictly below 1/(10 N)).
        sampling: ``poisson`` (each example joins each batch independently with probability q)
            or ``shuffle`` (shuffled fixed-size batches).
        noise_source: ``framework`` (each library's own noise generator, what its users get)
            or ``shared`` (the noise of every step drawn once in dpcore from (seed, step) and
            added by both backends, :mod:`dpcore.shared_noise`: a paired difference then
            measures the frameworks alone). DP-SGD only; left out of the hash at its default.
        noise_key: where the DP-SGD noise key comes from (:mod:`dpcore.noise_key`): ``seed``
            (derived from the seed and the config hash: reproducible, rebuildable by anyone
            who has the config), ``secret`` (the operating system's entropy, kept nowhere: not
            bit-reproducible), or ``None``: ``secret`` for data the user gives
            (``imagefolder:``, ``medmnist:PATH``, ``data.path``), ``seed`` for a registered
            public data set. ``secret`` refuses ``noise_source: shared``. The hash sees the
            resolved key of a DP-SGD run.

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
    noise_key: str | None = None

    def __post_init__(self) -> None:
        check_choice("privacy.mechanism", self.mechanism, privacy_mechanisms())
        check_choice("privacy.noise_source", self.noise_source, NOISE_SOURCES)
        check_privacy_noise_key(self)
        if self.noise_source != "framework" and not self.is_dpsgd:
            raise ConfigError(
                f"privacy.noise_source={self.noise_source!r} needs DP-SGD (it is the noise of "
                f"the clipped sum); privacy.mechanism={self.mechanism!r}; valid: noise_source "
                f"framework, or mechanism {' / '.join(dpsgd_names())}")
        if isinstance(self.sampling, str) and (
                self.sampling.lower().replace("-", "_") in REFUSED_SAMPLING_MODES):
            raise PrivacyConfigError(
                f"privacy.sampling={self.sampling!r} is refused: "
                f"{REFUSED_SAMPLING_MODES[self.sampling.lower().replace('-', '_')]}; "
                f"valid: {', '.join(SAMPLING_MODES)}"
            )
        check_choice("privacy.sampling", self.sampling, SAMPLING_MODES)
        check_range(
            "privacy.noise_multiplier", self.noise_multiplier, low=0, finite=True,
            valid="a finite number >= 0",
        )
        check_range(
            "privacy.target_epsilon", self.target_epsilon, low=0, low_open=True,
            valid="a number > 0",
        )
        check_range(
            "privacy.max_grad_norm", self.max_grad_norm, low=0, low_open=True, finite=True,
            valid="a finite number > 0",
        )
        check_range(
            "privacy.delta", self.delta, low=0, high=1, low_open=True, high_open=True,
            valid="a number in (0, 1)",
        )
        float_fields(self, "noise_multiplier", "target_epsilon", "max_grad_norm", "delta")
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
                f"{self.target_epsilon!r} is set; use mechanism {' or '.join(dpsgd_names())}"
            )

    @property
    def is_dpsgd(self) -> bool:
        """True for the mechanisms that clip and noise gradients."""
        return get_mechanism(self.mechanism).noises_gradients

    def resolved_delta(self, n_train: int) -> float:
        """The delta used for accounting: the configured one, else :func:`default_delta`.

        A configured delta not below 1/N is used but warned about (:class:`PrivacyWarning`).
        """
        if self.delta is not None:
            check_delta_below_one_over_n(self.delta, n_train)
            return self.delta
        return default_delta(n_train)



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
        class_weights: how each example's loss is weighted by its class, a name of
            :data:`dpcore.class_weights.CLASS_WEIGHTINGS` (``none``: all 1; ``balanced``:
            ``n / (K n_c)`` from the training labels). Non-private runs only; left out of the
            hash at its default.
    """

    epochs: float | None = 1.0
    steps: int | None = None
    batch_size: int = 256
    lr: float = 0.1
    optimizer: str = "sgd"
    momentum: float = 0.0
    ema_decay: float | None = None
    class_weights: str = "none"

    def __post_init__(self) -> None:
        if (self.epochs is None) == (self.steps is None):
            raise ConfigError(
                f"exactly one of train.epochs and train.steps must be set "
                f"(got epochs={self.epochs!r}, steps={self.steps!r})"
            )
        check_range("train.epochs", self.epochs, low=0, low_open=True, finite=True,
                     valid="a finite number > 0")
        integer_field(self, "steps", "train.steps", low=1, valid="an integer >= 1")
        integer_field(self, "batch_size", "train.batch_size", low=1, valid="an integer >= 1")
        check_range("train.lr", self.lr, low=0, low_open=True, finite=True,
                     valid="a finite number > 0")
        check_choice("train.optimizer", self.optimizer, OPTIMIZERS)
        check_choice("train.class_weights", self.class_weights, class_weighting_names())
        check_range(
            "train.momentum", self.momentum, low=0, high=1, high_open=True, valid="[0, 1)"
        )
        if self.optimizer != "sgd" and self.momentum:
            raise ConfigError(
                f"train.momentum={self.momentum!r} applies to SGD only, but "
                f"train.optimizer={self.optimizer!r} (which would ignore it); valid: "
                "train.momentum=0 with this optimizer, or train.optimizer=sgd")
        check_range(
            "train.ema_decay", self.ema_decay, low=0, high=1, high_open=True,
            valid="[0, 1) or null",
        )
        # epochs keeps the type it was given: the default (1.0) and every stored preset run
        # (``epochs: 20``) already hash with different types, so no canonical form is free
        float_fields(self, "lr", "momentum", "ema_decay")


@dataclass(frozen=True)
class FactorSpec:
    """The switches by which the two libraries' stock recipes differ.

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
        check_choice("factors.normalisation", self.normalisation, NORMALISATIONS)
        integer_field(self, "microbatch_size", "factors.microbatch_size", low=1,
                       valid="an integer >= 1 (1 = per-example clipping)")
        check_choice("factors.init", self.init, (*INITIALISATIONS, "keras"))
        check_choice("factors.input_scaling", self.input_scaling, INPUT_SCALINGS)
        if self.calibration_accountant is not None:
            check_choice("factors.calibration_accountant", self.calibration_accountant,
                          calibration_accountants())
        check_choice("factors.eval_split", self.eval_split, EVAL_SPLITS)
        check_choice("factors.fault", self.fault, fault_names())

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
        integer_field(self, "crop_padding", "augment.crop_padding", low=0,
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
        integer_field(self, "count", "audit_canaries.count", low=0,
                       valid="an integer >= 0 (0 = no audit)")
        check_choice("audit_canaries.kind", self.kind, CANARY_KINDS)
        if not isinstance(self.guess_out, bool):
            raise ConfigError(f"audit_canaries.guess_out={self.guess_out!r} is not valid; "
                              "valid: true or false")
        if self.guesses is not None:
            integer_field(self, "guesses", "audit_canaries.guesses", low=1,
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
        memory_format: torch image models only: ``default`` (NCHW-contiguous tensors, as
            PyTorch runs by default) or ``channels_last`` (model and inputs converted with
            ``torch.channels_last``, the layout PyTorch's CPU convolutions are fastest in);
            used by the plain, reference and fast steps. TF is always NHWC.
        compile: compile the plain and fast chunk steps with the framework's compiler: TF
            XLA (``jit_compile``, as ``xla``; needs ``deterministic: false``: XLA has no
            deterministic MaxPool gradient), torch ``torch.compile`` (inductor; the plain
            step whole, the fast step's per-layer norm and clipped-sum functions). Each
            chunk is then padded to its size class (:func:`dpcore.fastroutes.size_class`)
            with zero-weight rows, so that a few shapes are compiled, not one per Poisson
            batch size; the result is the unpadded one to float rounding.
        route_choice: how the fast engines pick each layer's route
            (:data:`dpcore.fastrules.ROUTES`, all exact): ``rule`` (default: Book-Keeping's
            ``2 T^2 < p d``, the same routes in every run, so the same config and seed give
            the same bits) or ``measure`` (the candidate routes timed on each layer's real
            input at the first chunk of each size class, the fastest kept if it beats the
            rule's by 10%: :mod:`dpcore.fastroutes`; faster, but two runs may take different
            routes, which changes the order of float sums). Either way the result's
            ``perf.routes`` records them.
        routes: the fast engines' per-layer routes to replay (chunk size class -> layer name
            -> route), as a run records them in its ``perf.routes``: used as given, whatever
            ``route_choice`` says (a reproduced measured run gets the same bits); None
            (default): chosen by ``route_choice``.
    """

    engine: str | None = None
    xla: bool = False
    threads: int | None = None
    physical_batch_size: int | None = 256
    deterministic: bool = True
    library_jacobian_batch_size: int | None = 16
    cache_fixed_front: bool = True
    memory_format: str = "default"
    compile: bool = False
    route_choice: str = "rule"
    routes: Mapping[str, Mapping[str, str]] | None = None

    def __post_init__(self) -> None:
        check_choice("perf.route_choice", self.route_choice, ROUTE_CHOICES)
        check_routes(self.routes)
        if not isinstance(self.compile, bool):
            raise ConfigError(f"perf.compile={self.compile!r} is not valid; valid: true or "
                              "false")
        if self.engine is not None:
            check_choice("perf.engine", self.engine, ENGINES)
        check_choice("perf.memory_format", self.memory_format, MEMORY_FORMATS)
        integer_field(self, "threads", "perf.threads", low=1, valid="an integer >= 1 or null")
        integer_field(self, "physical_batch_size", "perf.physical_batch_size", low=1,
                       valid="an integer >= 1 or null")
        integer_field(self, "library_jacobian_batch_size", "perf.library_jacobian_batch_size",
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
# config hash) while they hold their defaults: a config at their defaults hashes as one without
# them, so a stored run whose config lacks them is found by its hash.
_OPTIONAL_SECTIONS = ("factors", "augment", "audit_canaries")
# Fields of the always-written sections that are likewise left out while at their defaults.
_OPTIONAL_FIELDS: dict[str, tuple[str, ...]] = {
    "data": ("options", "ldp_test_inputs"),
    "model": ("layers", "pretrained", "pretrained_skip", "freeze"),
    "privacy": ("noise_source", "noise_key"),
    "train": ("class_weights",),
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


#: Rules across sections, by function name, run last by ``RunConfig.__post_init__`` in
#: registration order: each raises a one-line ConfigError for a combination no recipe can
#: run. :mod:`dpcore.config.recipe_rules` registers its rules
#: (``@COMBINATION_RULES.register()``) when :mod:`dpcore.config` is imported.
COMBINATION_RULES: Registry[str, Callable[[RunConfig], None]] = Registry(
    "config combination rules", key="rule", key_of=lambda rule: rule.__name__)


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
        check_choice("recipe", self.recipe, RECIPES)
        for name, cls in _SECTIONS.items():
            if not isinstance(getattr(self, name), cls):
                raise ConfigError(f"{name} must be a {cls.__name__}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError(f"seed={self.seed!r} is not valid; valid: an integer >= 0")
        images_private = get_mechanism(self.privacy.mechanism).privatises_images
        if images_private and self.data.ldp_mechanism is None:
            raise ConfigError(
                "privacy.mechanism='ldp' needs data.ldp_mechanism (laplace, gaussian, dp_pix)"
            )
        if self.data.ldp_test_inputs != LDP_TEST_INPUTS[0] and self.data.ldp_mechanism is None:
            raise ConfigError(
                f"data.ldp_test_inputs={self.data.ldp_test_inputs!r} applies to local-DP runs "
                "only; set data.ldp_mechanism, or leave it at 'privatised'")
        if self.data.ldp_mechanism is not None and not images_private:
            raise ConfigError(
                f"data.ldp_mechanism={self.data.ldp_mechanism!r} is set but "
                f"privacy.mechanism={self.privacy.mechanism!r}; set privacy.mechanism='ldp'"
            )
        check_noise_key(self)
        for rule in COMBINATION_RULES.values():
            rule(self)

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
        check_keys(raw, _SECTIONS)
        kwargs: dict[str, Any] = {}
        for name, spec_cls in _SECTIONS.items():
            section = raw.get(name) or {}
            if name == "privacy" and isinstance(section.get("mechanism"), str):
                section = {**section, "mechanism": normalise_mechanism(section["mechanism"])}
            section = coerce_numeric_strings(spec_cls, section)
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
        A DP-SGD run's resolved noise key and its derivation's version enter the privacy
        section (:func:`dpcore.noise_key.hash_entries`), and a private run that leaves delta
        unset carries :data:`DEFAULT_DELTA_RULE`: a change of either changes what the run
        computes, so its hash too (no stored record is taken for a run it no longer is).
        """
        raw = self.to_dict()
        if self.model.pretrained is not None:
            raw["model"]["pretrained"] = f"sha256:{file_sha256(self.model.pretrained)}"
        raw["privacy"].pop("noise_key", None)  # the resolved key below: unset = its default
        raw["privacy"].update(hash_entries(self))
        if self.privacy.delta is None and not is_non_private(self.privacy.mechanism):
            raw["privacy"]["default_delta_rule"] = DEFAULT_DELTA_RULE
        canonical = json.dumps(raw, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]

