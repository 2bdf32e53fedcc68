"""A tuning sweep's candidates: the YAML list of ``{label, model, train, ...}`` sections and
the RunConfig of one candidate (laid over the Gaussian DP-SGD base of every sweep)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dpcore.config import RunConfig, load_mapping_file
from dpcore.errors import ConfigError

DELTA = 1e-5
#: Keys a candidate may set (sections laid over the base config). ``augment``
#: (:class:`dpcore.config.AugmentSpec`) augments the fit part of the training split only; the
#: validation split is scored on clean images, like any evaluation.
CANDIDATE_KEYS = {"label", "model", "train", "privacy", "data", "augment"}


def load_candidates(path: str | Path) -> list[dict[str, Any]]:
    """The candidate list of a YAML file: ``candidates: [{label, model, train, ...}]``."""
    raw = load_mapping_file(path)
    items = raw.get("candidates") if isinstance(raw, Mapping) else None
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{path}: needs a non-empty 'candidates' list of "
                          "{label, model, train} mappings")
    for i, item in enumerate(items):
        if not isinstance(item, Mapping) or "label" not in item:
            raise ConfigError(f"{path}: candidate {i} must be a mapping with a 'label'")
        unknown = set(item) - CANDIDATE_KEYS
        if unknown:
            raise ConfigError(f"{path}: candidate {item['label']!r} has unknown keys "
                              f"{sorted(unknown)}; valid: {sorted(CANDIDATE_KEYS)}")
    return [dict(item) for item in items]


def run_config(dataset: str, candidate: Mapping[str, Any], epsilon: float,
               seed: int = 0) -> RunConfig:
    """The RunConfig of one candidate at one target epsilon."""
    base: dict[str, Any] = {
        "data": {"name": dataset},
        "privacy": {"mechanism": "dpsgd-gaussian", "target_epsilon": epsilon, "delta": DELTA,
                    "max_grad_norm": 1.0, "sampling": "poisson"},
        "seed": seed,
    }
    merged = dict(base)
    for key, value in candidate.items():  # sections are one level deep: merge their keys
        if key == "label":
            continue
        merged[key] = ({**merged[key], **value}
                       if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping)
                       else value)
    return RunConfig.from_dict(merged)


__all__ = ["CANDIDATE_KEYS", "DELTA", "load_candidates", "run_config"]
