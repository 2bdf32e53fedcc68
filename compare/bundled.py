"""YAML files shipped inside the ``compare`` package (presets, published papers): their names
and their contents, read through ``importlib.resources`` so an installed wheel works too."""

from __future__ import annotations

from importlib import resources
from typing import Any

from dpcore.config import load_mapping_file
from dpcore.errors import ConfigError


def bundled_names(folder: str) -> list[str]:
    """Sorted names (without ``.yaml``) of the YAML files in ``compare/<folder>/``."""
    files = resources.files("compare").joinpath(folder)
    return sorted(p.name[:-5] for p in files.iterdir() if p.name.endswith(".yaml"))


def load_bundled(folder: str, name: str, *, kind: str, unknown: str) -> dict[str, Any]:
    """The mapping in ``compare/<folder>/<name>.yaml``.

    Raises:
        ConfigError: ``name`` is not one of :func:`bundled_names` (``folder``); the message is
            ``"<kind> '<name>' <unknown>; valid: ..."``, naming a name, not a path.
    """
    names = bundled_names(folder)
    if name not in names:
        raise ConfigError(f"{kind} {name!r} {unknown}; valid: {', '.join(names)}")
    path = resources.files("compare").joinpath(folder, f"{name}.yaml")
    with resources.as_file(path) as real_path:
        return load_mapping_file(real_path)
