"""What the files of an image folder are (colour modes, sizes), read from their headers, and the
one-line notes of what loading changed, so that nothing in a data set is changed in silence.

A folder whose files disagree is made uniform when it is decoded: grey and colour files all
become one channel count, files of several sizes one size. :func:`channel_note` and
:func:`size_note` say how many files disagreed and what was done (e.g. ``3 of 159 files are
RGB, 156 grey: all converted to RGB; set data.channels: 1 to keep grey``); the loader keeps
them in ``Dataset.extra`` under the keys of :data:`DATA_NOTE_KEYS`, with the files skipped as
unreadable (``skipped``), and :func:`data_notes` gives them back in that order for the ``train``
start line and the report's data line.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image, UnidentifiedImageError

from dpcore.data.images import GRAY_MODES

#: ``Dataset.extra`` keys whose text says what loading changed or left out, in the order
#: they are shown: channel conversion, resizing of disagreeing sizes, unreadable files skipped.
DATA_NOTE_KEYS: tuple[str, ...] = ("channels", "sizes", "skipped")

__all__ = ["DATA_NOTE_KEYS", "FileSurvey", "channel_note", "data_notes", "size_note",
           "survey_images"]


@dataclass(frozen=True)
class FileSurvey:
    """The Pillow modes and sizes of a list of image files (headers only).

    Attributes:
        modes: Pillow mode -> number of files.
        sizes: (width, height) in pixels -> number of files.
        unreadable: files whose header does not read (left to the decoder, which names or
            skips them).
    """

    modes: Counter[str] = field(default_factory=Counter)
    sizes: Counter[tuple[int, int]] = field(default_factory=Counter)
    unreadable: int = 0

    @property
    def grey(self) -> int:
        """Files of a single-channel mode (:data:`dpcore.data.images.GRAY_MODES`)."""
        return sum(n for mode, n in self.modes.items() if mode in GRAY_MODES)

    @property
    def colour(self) -> int:
        """Files of any other mode (RGB, RGBA, CMYK, palette...)."""
        return sum(n for mode, n in self.modes.items() if mode not in GRAY_MODES)

    @property
    def native_channels(self) -> int:
        """1 when every readable file is grey, else 3 (a colour file is never made grey
        unless ``data.channels: 1`` asks)."""
        return 3 if self.colour else 1


def survey_images(paths: Iterable[Path]) -> FileSurvey:
    """Read the header (mode and size) of every file of ``paths``; no pixel is decoded."""
    modes: Counter[str] = Counter()
    sizes: Counter[tuple[int, int]] = Counter()
    unreadable = 0
    for path in paths:
        try:
            with Image.open(path) as pil:
                modes[pil.mode] += 1
                sizes[(int(pil.size[0]), int(pil.size[1]))] += 1
        except (UnidentifiedImageError, OSError, ValueError, SyntaxError):
            unreadable += 1
    return FileSurvey(modes, sizes, unreadable)


def _colour_name(survey: FileSurvey) -> str:
    """``RGB`` when every colour file is RGB, else ``colour (RGBA 2, P 1)``."""
    colour = {mode: n for mode, n in survey.modes.items() if mode not in GRAY_MODES}
    if set(colour) == {"RGB"}:
        return "RGB"
    return "colour (" + ", ".join(f"{mode} {n}" for mode, n in sorted(colour.items())) + ")"


def channel_note(survey: FileSurvey, channels: int, *, forced: bool) -> str | None:
    """What decoding to ``channels`` (1 or 3) did to files that disagree (grey and colour), or
    None when they agree. ``forced``: ``data.channels`` was given (else ``channels`` is
    :attr:`FileSurvey.native_channels`)."""
    if not (survey.grey and survey.colour):
        return None
    colour = _colour_name(survey)
    head = (f"{survey.colour} of {survey.grey + survey.colour} files are {colour}, "
            f"{survey.grey} grey")
    if channels == 1:
        return f"{head}: the {colour} files converted to grey (data.channels: 1)"
    if forced:
        return f"{head}: the grey files converted to RGB (data.channels: 3)"
    return f"{head}: all converted to RGB; set data.channels: 1 to keep grey"


def size_note(survey: FileSurvey, image_size: int | None) -> str | None:
    """What resizing to ``image_size`` squared did to files of several sizes, or None when
    they have one size (or nothing is resized: several sizes are then an error of the
    decoder)."""
    if image_size is None or len(survey.sizes) < 2:
        return None
    by_area = sorted(survey.sizes, key=lambda wh: (wh[0] * wh[1], wh))
    common, count = survey.sizes.most_common(1)[0]
    n = sum(survey.sizes.values())

    def text(wh: tuple[int, int]) -> str:
        return f"{wh[0]}x{wh[1]}"

    return (f"{n} files have {len(survey.sizes)} sizes (from {text(by_area[0])} to "
            f"{text(by_area[-1])}; {count} are {text(common)}): all resized to "
            f"{image_size}x{image_size} (data.image_size; aspect ratio not kept)")


def data_notes(extra: Mapping[str, object]) -> list[str]:
    """The notes of :data:`DATA_NOTE_KEYS` a data set's ``extra`` holds, in that order."""
    return [str(extra[key]) for key in DATA_NOTE_KEYS if extra.get(key)]
