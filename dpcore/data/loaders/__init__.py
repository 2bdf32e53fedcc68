"""Loaders of the native data formats, one module per format (see ``loaders.base``).

Modules are imported on demand by :func:`get_loader`, so that listing the registry does not
import Pillow, scikit-learn or mlxtend.
"""

from __future__ import annotations

import importlib
from types import ModuleType


def get_loader(name: str) -> ModuleType:
    """The loader module ``dpcore.data.loaders.<name>``."""
    return importlib.import_module(f"{__name__}.{name}")
