"""Run configuration: frozen, validated, serialisable dataclasses and a stable config hash.

A :class:`RunConfig` holds everything that defines a run's *result* (data, model, privacy,
training, seed). Performance-only switches (engine, XLA, threads, physical chunk size) live in
:class:`PerfSpec`: they may change speed, never the result beyond float tolerance, and they are
not part of :attr:`RunConfig.config_hash`.

Config files are YAML or JSON mappings with the sections ``data``, ``model``, ``privacy``,
``train`` and the key ``seed`` (and optionally ``version``, ``recipe`` and the sections
``factors`` and ``augment``). Unknown keys are rejected.

This package is the import surface (``from dpcore.config import RunConfig``); its modules
have one job each:

* :mod:`~dpcore.config.specs`: the section dataclasses and :class:`RunConfig` (hash,
  serialisation);
* :mod:`~dpcore.config.choices`: the values each field may take, derived from the registries
  that own them (mechanisms, local-DP mechanisms, faults);
* :mod:`~dpcore.config.validation`: range and choice checks, settings refused for a privacy
  reason, the delta rules;
* :mod:`~dpcore.config.parsing`: YAML/JSON files, ``--set`` overrides, aliases, unknown keys;
* :mod:`~dpcore.config.recipe_rules`: combinations across sections no recipe can run.
"""

from __future__ import annotations

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
from dpcore.config.recipe_rules import check_audit_combination, check_combination
from dpcore.config.specs import (
    COMBINATION_RULES,
    AuditCanarySpec,
    AugmentSpec,
    DataSpec,
    FactorSpec,
    ModelSpec,
    PerfSpec,
    PrivacySpec,
    RunConfig,
    TrainSpec,
    file_sha256,
)
from dpcore.config.validation import (
    DEFAULT_DELTA_RULE,
    REFUSED_KEYS,
    REFUSED_SAMPLING_MODES,
    check_choice,
    check_delta_below_one_over_n,
    check_range,
    default_delta,
    float_fields,
    integer_field,
    refused_key_error,
)

#: Allowed values a registry owns, read when asked (a registration after import counts).
_DERIVED = {
    "PRIVACY_MECHANISMS": privacy_mechanisms,
    "LDP_MECHANISM_NAMES": ldp_mechanism_names,
    "CALIBRATION_ACCOUNTANTS": calibration_accountants,
    "FAULTS": fault_names,
}


def __getattr__(name: str) -> Any:
    """``PRIVACY_MECHANISMS``, ``LDP_MECHANISM_NAMES``, ``CALIBRATION_ACCOUNTANTS`` and
    ``FAULTS``: the registries' current names (PEP 562), as tuples."""
    if name in _DERIVED:
        return _DERIVED[name]()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ACTIVATIONS", "CANARY_KINDS", "COMBINATION_RULES", "CONFIG_VERSION", "ENGINES",
    "EVAL_SPLITS", "INITIALISATIONS", "INPUT_SCALINGS", "LDP_TEST_INPUTS",
    "MEMORY_FORMATS", "NOISE_SOURCES", "NORMALISATIONS", "OPTIMIZERS", "RECIPES",
    "ROUTE_CHOICES",
    "REFUSED_KEYS",
    "REFUSED_SAMPLING_MODES",
    "SAMPLING_MODES", "AuditCanarySpec", "AugmentSpec", "DataSpec", "FactorSpec", "ModelSpec",
    "PerfSpec", "PrivacySpec", "RunConfig", "TrainSpec", "apply_overrides",
    "calibration_accountants", "check_audit_combination", "check_choice", "check_combination",
    "check_delta_below_one_over_n", "check_keys", "check_range", "coerce_numeric_strings",
    "DEFAULT_DELTA_RULE", "default_delta", "fault_names", "file_sha256", "float_fields",
    "integer_field",
    "ldp_mechanism_names",
    "load_mapping_file", "normalise_mechanism", "privacy_mechanisms", "refused_key_error",
]
