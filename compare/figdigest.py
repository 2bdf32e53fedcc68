"""A digest of what a matplotlib figure shows, independent of how the PNG is rasterised.

PNG bytes depend on the matplotlib, FreeType and libpng versions (anti-aliasing, font hinting,
zlib), so a rebuilt report cannot be compared with the committed one byte for byte on every
machine. What must not change is what is plotted: :func:`figure_digest` hashes the data of
every artist of a drawn figure (line and marker coordinates, collection offsets and paths,
bar rectangles, image arrays, colours, line styles, and every text: titles, axis labels,
legend labels, and the tick labels of categorical or fixed axes), with floats rounded to
:data:`DECIMALS` decimals. Layout positions (where constrained layout puts a panel or a title)
are left out: they follow from the rest and from font metrics. So are the ticks of numeric
axes, whose number matplotlib chooses from the axis length in pixels (a layout result); the
data and axis labels they annotate are hashed.

A report writer opens :func:`collecting` around the code that saves its figures; each
figure's save calls :func:`note_figure`, which records the digest under the PNG's path
relative to the report folder. Outside :func:`collecting`, :func:`note_figure` does nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.collections import Collection
from matplotlib.figure import Figure
from matplotlib.image import AxesImage
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle
from matplotlib.text import Text

__all__ = ["DECIMALS", "collecting", "figure_digest", "note_figure"]

#: Decimals floats are rounded to before hashing (data coordinates, colours in 0..1).
DECIMALS = 6

_ACTIVE: ContextVar[tuple[Path, dict[str, str]] | None] = ContextVar("figdigest", default=None)


@contextlib.contextmanager
def collecting(root: str | Path) -> Iterator[dict[str, str]]:
    """Collect the digest of every figure saved under ``root`` inside the block.

    Yields:
        A dict filled as figures are saved: PNG path relative to ``root`` (POSIX form) ->
        :func:`figure_digest`.
    """
    digests: dict[str, str] = {}
    token = _ACTIVE.set((Path(root).absolute(), digests))
    try:
        yield digests
    finally:
        _ACTIVE.reset(token)


def note_figure(fig: Figure, path: str | Path) -> None:
    """Record the digest of ``fig``, just saved to ``path``, if a :func:`collecting` block
    whose root holds ``path`` is open (else nothing)."""
    active = _ACTIVE.get()
    if active is None:
        return
    root, digests = active
    try:
        key = Path(path).absolute().relative_to(root).as_posix()
    except ValueError:  # saved outside the report folder
        return
    digests[key] = figure_digest(fig)


def figure_digest(fig: Figure) -> str:
    """SHA-256 (hex) of the plotted data of ``fig`` (see the module docstring); call it after
    the figure was drawn (saved), so that tick labels exist."""
    hasher = hashlib.sha256()
    excluded = _layout_dependent(fig)
    for artist in fig.findobj():
        if id(artist) in excluded or not artist.get_visible():
            continue
        for part in _parts(artist):
            if isinstance(part, np.ndarray):
                hasher.update(_canonical(part).tobytes())
                hasher.update(str(part.shape).encode())
            else:
                hasher.update(repr(part).encode("utf-8"))
            hasher.update(b"|")
    return hasher.hexdigest()


def _layout_dependent(fig: Figure) -> set[int]:
    """Ids of the tick marks, grid lines and offset texts of every axis, and the tick labels
    of axes whose ticks matplotlib places itself (all but fixed and categorical ones)."""
    from matplotlib.axes import Axes
    from matplotlib.category import StrCategoryLocator
    from matplotlib.ticker import FixedLocator

    ids: set[int] = set()
    for ax in fig.findobj(Axes):
        for axis in (ax.xaxis, ax.yaxis):
            ids.add(id(axis.offsetText))
            fixed = isinstance(axis.get_major_locator(), FixedLocator | StrCategoryLocator)
            for tick in [*axis.get_major_ticks(), *axis.get_minor_ticks()]:
                ids.update(id(a) for a in (tick.tick1line, tick.tick2line, tick.gridline))
                if not fixed:
                    ids.update(id(a) for a in (tick.label1, tick.label2))
    return ids


def _parts(artist: Any) -> list[Any]:
    """What of ``artist`` is hashed: its kind and its data (never its layout position)."""
    if isinstance(artist, Line2D):
        return ["line", np.asarray(artist.get_xydata(), dtype=float), artist.get_linestyle(),
                artist.get_marker(), _rgba(artist.get_color()), artist.get_label()]
    if isinstance(artist, Collection):
        parts: list[Any] = ["collection", type(artist).__name__,
                            np.asarray(artist.get_offsets(), dtype=float),
                            np.asarray(artist.get_facecolor(), dtype=float),
                            np.asarray(artist.get_edgecolor(), dtype=float)]
        parts += [np.asarray(p.vertices, dtype=float) for p in artist.get_paths()]
        return parts
    if isinstance(artist, AxesImage):
        return ["image", np.ma.filled(np.ma.asarray(artist.get_array(), dtype=float), np.nan),
                str(artist.get_cmap().name), artist.get_alpha()]
    if isinstance(artist, Rectangle):
        return ["rect", np.array([*artist.get_xy(), artist.get_width(), artist.get_height()],
                                 dtype=float), _rgba(artist.get_facecolor())]
    if isinstance(artist, Text):
        text = artist.get_text()
        return ["text", text] if text else []
    return []


def _rgba(color: Any) -> np.ndarray:
    from matplotlib.colors import to_rgba

    return np.asarray(to_rgba(color), dtype=float)


def _canonical(values: np.ndarray) -> np.ndarray:
    """``values`` as float64 rounded to :data:`DECIMALS`, with one NaN and no negative zero."""
    arr = np.round(np.asarray(values, dtype=np.float64), DECIMALS)
    arr = np.where(np.isnan(arr), np.nan, arr) + 0.0  # + 0.0 turns -0.0 into 0.0
    return np.ascontiguousarray(arr)
