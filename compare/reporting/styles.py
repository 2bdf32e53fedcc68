"""How reports draw each privacy mechanism: its legend label and its plot marker.

Styling belongs to the report layer, not to the mechanism (:mod:`dpcore.mechanisms` states
privacy facts only): :data:`MECHANISM_STYLES` maps a ``privacy.mechanism`` name to its
:class:`MechanismStyle`; a mechanism that registers none is drawn with the default style
(labelled by its name, marker ``o``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dpcore.registry import Registry


@dataclass(frozen=True)
class MechanismStyle:
    """How a mechanism's runs are drawn.

    Attributes:
        label: its name in legends (None: the mechanism's ``privacy.mechanism`` name).
        marker: the matplotlib marker of its curves in the privacy-utility plots.
    """

    label: str | None = None
    marker: str = "o"


#: The style of a mechanism that registers none.
DEFAULT_STYLE = MechanismStyle()

#: ``privacy.mechanism`` -> its style, in registration order.
MECHANISM_STYLES: Registry[str, MechanismStyle] = Registry(
    "mechanism styles", key="privacy.mechanism")
MECHANISM_STYLES.register("none")(MechanismStyle(label="non-private"))
MECHANISM_STYLES.register("dpsgd-gaussian")(MechanismStyle(marker="o"))
MECHANISM_STYLES.register("dpsgd-laplace")(MechanismStyle(marker="s"))
MECHANISM_STYLES.register("ldp")(MechanismStyle(label="local DP"))


def style_of(mechanism: Any) -> MechanismStyle:
    """The style of ``mechanism`` (a name from a run record; anything else, None or NaN
    included, gets :data:`DEFAULT_STYLE`)."""
    return MECHANISM_STYLES.get(mechanism, DEFAULT_STYLE)


def label_of(mechanism: Any) -> str:
    """The legend label of ``mechanism`` (its name when its style gives none)."""
    label = style_of(mechanism).label
    return str(mechanism) if label is None else label


def marker_of(mechanism: Any) -> str:
    """The plot marker of ``mechanism`` (``o`` by default)."""
    return style_of(mechanism).marker


__all__ = ["DEFAULT_STYLE", "MECHANISM_STYLES", "MechanismStyle", "label_of", "marker_of",
           "style_of"]
