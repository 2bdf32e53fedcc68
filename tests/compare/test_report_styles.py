"""How reports draw each privacy mechanism (compare/reporting/styles.py): the registered styles
of the four mechanisms, and the default for one that registers none."""

from __future__ import annotations

import math

import pytest

from compare.reporting.styles import (
    DEFAULT_STYLE,
    MECHANISM_STYLES,
    MechanismStyle,
    label_of,
    marker_of,
)
from dpcore.mechanisms import DP_MECHANISMS


def test_the_mechanisms_labels_and_markers() -> None:
    assert {name: (label_of(name), marker_of(name)) for name in DP_MECHANISMS} == {
        "none": ("non-private", "o"), "dpsgd-gaussian": ("dpsgd-gaussian", "o"),
        "dpsgd-laplace": ("dpsgd-laplace", "s"), "ldp": ("local DP", "o")}


@pytest.mark.parametrize("name", ["other", None, math.nan, 3])
def test_a_mechanism_without_a_style_gets_the_default(name: object) -> None:
    assert (label_of(name), marker_of(name)) == (str(name), DEFAULT_STYLE.marker)


def test_a_registered_style_is_used_until_unregistered() -> None:
    MECHANISM_STYLES.register("dpsgd-other")(MechanismStyle(label="other noise", marker="^"))
    try:
        assert (label_of("dpsgd-other"), marker_of("dpsgd-other")) == ("other noise", "^")
    finally:
        MECHANISM_STYLES.unregister("dpsgd-other")
    assert label_of("dpsgd-other") == "dpsgd-other"
