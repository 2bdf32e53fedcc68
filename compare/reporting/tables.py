"""Formatting of numbers and Markdown tables for the report."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd


def fmt(value: Any, digits: int = 4) -> str:
    """A cell: ``–`` for missing/NaN, ``∞`` for infinity, floats to ``digits`` significant
    digits, 0 printed as ``0``; anything else as ``str``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, bool):
        return "yes" if value else ""
    if isinstance(value, float):
        if math.isinf(value):
            return "∞" if value > 0 else "-∞"
        if value == 0:
            return "0"
        return f"{value:.{digits}g}"
    return str(value)


def markdown_table(frame: pd.DataFrame, columns: Sequence[str] | None = None) -> str:
    """A GitHub Markdown table of ``frame`` (selected columns); ``|`` in values is escaped."""
    if frame.empty:
        return "_no rows_\n"
    columns = [c for c in (columns or list(frame.columns)) if c in frame.columns]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for _, row in frame[columns].iterrows():
        lines.append("| " + " | ".join(fmt(row[c]).replace("|", "\\|") for c in columns) + " |")
    return "\n".join(lines) + "\n"


__all__ = ["fmt", "markdown_table"]
