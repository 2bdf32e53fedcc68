"""Validation rules shared by the config sections: ranges, choices, integral and real fields,
and the settings refused for a privacy reason (with that reason) or warned about.

Every error is one line naming the key, the bad value and what would be valid.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable
from typing import Any

from dpcore.errors import ConfigError, PrivacyConfigError, PrivacyWarning
from dpcore.layers import BATCHNORM_REASON

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
            "weak; use a delta well below 1/N (the default is the largest power of ten "
            "below 1/(10 N))", PrivacyWarning, stacklevel=1,
        )
        return True
    return False


def check_range(
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


def integer_field(spec: Any, attr: str, key: str, *, low: int, valid: str) -> None:
    """Check that ``spec.attr`` is None or an integer >= ``low``; a whole float (``64.0``, as
    JSON or ``1e3`` may give) is stored as the int. Raises ConfigError naming ``key``."""
    value = getattr(spec, attr)
    check_range(key, value, low=low, finite=True, valid=valid)
    if isinstance(value, float):
        if not value.is_integer():
            raise ConfigError(f"{key}={value!r} is not a whole number; valid: {valid}")
        object.__setattr__(spec, attr, int(value))


def float_fields(spec: Any, *attrs: str) -> None:
    """Store int values of ``spec``'s real-valued fields as floats (after their range check),
    so that ``lr: 1`` and ``lr: 1.0`` (YAML, ``--set``) are one config with one hash. Every
    stored run already holds floats there, so no stored hash changes."""
    for attr in attrs:
        value = getattr(spec, attr)
        if isinstance(value, int) and not isinstance(value, bool):
            object.__setattr__(spec, attr, float(value))


def check_choice(key: str, value: Any, choices: Iterable[str]) -> None:
    choices = tuple(choices)
    if value not in choices:
        raise ConfigError(f"{key}={value!r} is not known; valid: {', '.join(choices)}")



#: Version of the rule :func:`default_delta` follows, part of the config hash of a private run
#: that leaves delta unset (1: the largest power of ten below 1/N; 2: below 1/(10 N)).
DEFAULT_DELTA_RULE = 2


def default_delta(n_train: int) -> float:
    """The largest power of ten strictly below 1/(10 N) (N=60000 -> 1e-6; N=1437 -> 1e-5;
    N=159 -> 1e-4), so that N * delta < 0.1.

    Why: delta is the probability with which (epsilon, delta)-DP tolerates anything, e.g. a
    mechanism that publishes each example outright with probability delta. At delta ~ 1/N
    that publishes one of the N examples with probability 1 - (1 - delta)^N (about 15 % for
    delta = 0.001 over 159 images); Dwork & Roth (2014, "The algorithmic foundations of
    differential privacy", section 2.3) call delta of the order of 1/N "very dangerous" for
    this reason and ask for delta well below 1/N, as do Opacus's maintainers ("orders of
    magnitude less than 1/N") and TF Privacy's guide (below 1/N, "1e-7 or so" costs little
    utility). Below 1/(10 N) the chance of any such publication stays under N * delta < 10 %;
    the price is small, epsilon growing like sqrt(log(1/delta)) under the Gaussian mechanism.
    """
    if n_train < 1:
        raise ConfigError(f"cannot derive delta from a data set of {n_train} examples; need >= 1")
    k = math.floor(math.log10(n_train)) + 2
    return float(10.0 ** (-k))

