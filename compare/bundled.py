"""YAML files shipped inside the ``compare`` package (presets, published papers): their names
and their contents, read through ``importlib.resources`` so an installed wheel works too."""

from __future__ import annotations

from importlib import resources
from typing import Any

from dpcore.config import load_mapping_file


def bundled_names(folder: str) -> list[str]:
    """Sorted names (without ``.yaml``) of the YAML files in ``compare/<folder>/``."""
    files = resources.files("compare").joinpath(folder)
    return sorted(p.name[:-5] for p in files.iterdir() if p.name.endswith(".yaml"))


def load_bundled(folder: str, name: str) -> dict[str, Any]:
    """The mapping in ``compare/<folder>/<name>.yaml``; the caller checked that it exists
    (see :func:`bundled_names`), so errors there name a name, not a path."""
    path = resources.files("compare").joinpath(folder, f"{name}.yaml")
    with resources.as_file(path) as real_path:
        return load_mapping_file(real_path)
