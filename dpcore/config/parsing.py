"""Reading configs: YAML/JSON files, ``section.key=value`` overrides (the CLI's ``--set``),
mechanism aliases, numeric strings, and the refusal of unknown keys.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

import yaml

from dpcore.config.validation import refused_key_error
from dpcore.errors import ConfigError
from dpcore.mechanisms import aliases as mechanism_aliases


def normalise_mechanism(name: str) -> str:
    """The config's mechanism name for ``name`` (``gaussian`` -> ``dpsgd-gaussian``...: the
    CLI names and aliases of :data:`dpcore.mechanisms.DP_MECHANISMS`; a file may say
    ``gaussian`` as ``--mechanism gaussian`` does; stored configs, and so their hashes, always
    hold the config's name); unknown names are returned as given (validation names them)."""
    return mechanism_aliases().get(name.strip().lower(), name)


def check_keys(raw: Mapping[str, Any], sections: Mapping[str, type]) -> None:
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
    unknown(raw, set(sections) | {"seed", "recipe"}, "", "config key(s)")
    for name, spec_cls in sections.items():
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


def coerce_numeric_strings(spec_cls: type, section: Mapping[str, Any]) -> dict[str, Any]:
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

