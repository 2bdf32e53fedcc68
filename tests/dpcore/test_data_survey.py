"""Nothing in a data set changed in silence: an image folder whose files disagree (grey and RGB,
several sizes) says how many and what loading did, in ``Dataset.extra`` (``channels``,
``sizes``); skipped unreadable files are named relative to the folder; a folder whose files
agree gets no note. Folders are written by the tests (PIL)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dpcore.config import DataSpec
from dpcore.data import load_dataset
from dpcore.data.survey import (
    DATA_NOTE_KEYS,
    channel_note,
    data_notes,
    size_note,
    survey_images,
)
from tests.dpcore.data_writers import isolate, write_image


def folder(root: Path, *, rgb: set[int] = frozenset(), big: set[int] = frozenset(),
           rgba: set[int] = frozenset(), n: int = 8) -> Path:
    """Two classes of ``n`` PNGs each, grey 16x16, except the indices (over both classes, 0 to
    2n-1) in ``rgb`` (RGB), ``rgba`` (RGBA) and ``big`` (20x12)."""
    rng = np.random.default_rng(0)
    base = root / "scans"
    for label, cls in enumerate(("a", "b")):
        for i in range(n):
            k = label * n + i
            h, w = (12, 20) if k in big else (16, 16)
            grey = rng.integers(0, 120, (h, w), dtype=np.uint8) + 100 * label
            path = base / cls / f"img{i}.png"
            if k in rgba:
                path.parent.mkdir(parents=True, exist_ok=True)
                Image.fromarray(np.dstack([grey] * 4)).save(path)
            else:
                write_image(path, np.dstack([grey] * 3) if k in rgb else grey)
    return base


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    isolate(monkeypatch, tmp_path)


def test_grey_and_rgb_files_say_what_was_converted(tmp_path: Path) -> None:
    base = folder(tmp_path, rgb={1, 5, 9})
    ds = load_dataset(DataSpec(name=f"imagefolder:{base}"))
    assert ds.x_train.shape[-1] == 3
    assert ds.extra["channels"] == ("3 of 16 files are RGB, 13 grey: all converted to RGB; "
                                    "set data.channels: 1 to keep grey")
    assert "sizes" not in ds.extra
    grey = load_dataset(DataSpec(name=f"imagefolder:{base}", channels=1))
    assert grey.x_train.shape[-1] == 1
    assert grey.extra["channels"] == ("3 of 16 files are RGB, 13 grey: the RGB files "
                                      "converted to grey (data.channels: 1)")
    rgb = load_dataset(DataSpec(name=f"imagefolder:{base}", channels=3))
    assert rgb.extra["channels"].endswith(": the grey files converted to RGB "
                                          "(data.channels: 3)")


def test_other_colour_modes_are_named(tmp_path: Path) -> None:
    base = folder(tmp_path, rgb={2}, rgba={3, 4})
    ds = load_dataset(DataSpec(name=f"imagefolder:{base}"))
    assert ds.extra["channels"].startswith("3 of 16 files are colour (RGB 1, RGBA 2), 13 grey: "
                                           "all converted to RGB")


def test_files_of_several_sizes_say_they_were_resized(tmp_path: Path) -> None:
    base = folder(tmp_path, big={0, 7})
    ds = load_dataset(DataSpec(name=f"imagefolder:{base}", image_size=16))
    assert ds.extra["sizes"] == ("16 files have 2 sizes (from 20x12 to 16x16; 14 are 16x16): "
                                 "all resized to 16x16 (data.image_size; aspect ratio not "
                                 "kept)")
    assert "channels" not in ds.extra


def test_a_folder_whose_files_agree_gets_no_note(tmp_path: Path) -> None:
    ds = load_dataset(DataSpec(name=f"imagefolder:{folder(tmp_path)}", image_size=8))
    assert not set(DATA_NOTE_KEYS) & set(ds.extra)
    assert data_notes(ds.extra) == []


def test_skipped_files_are_named_relative_to_the_folder(tmp_path: Path) -> None:
    base = folder(tmp_path, n=12)
    for cls in ("a", "b"):
        for i in range(6):
            (base / cls / f"img{i}.png").write_bytes(b"not a png")
    spec = DataSpec(name=f"imagefolder:{base}", options={"skip_unreadable": True})
    skipped = load_dataset(spec).extra["skipped"]
    assert skipped.startswith("12 unreadable file(s) of 24 skipped (skip_unreadable): "
                              "a/img0.png, a/img1.png, ")
    assert skipped.endswith("b/img2.png, b/img3.png and 2 more")
    assert str(tmp_path) not in skipped


def test_notes_come_back_in_their_order() -> None:
    extra = {"skipped": "s", "note": "not one of them", "channels": "c", "sizes": "z"}
    assert data_notes(extra) == ["c", "z", "s"]


def test_the_survey_reads_headers_only_and_counts_unreadable_files(tmp_path: Path) -> None:
    base = folder(tmp_path, rgb={0}, big={1})
    (base / "a" / "broken.png").write_bytes(b"nope")
    survey = survey_images(sorted(base.rglob("*.png")))
    assert (survey.grey, survey.colour, survey.unreadable) == (15, 1, 1)
    assert survey.sizes == {(16, 16): 15, (20, 12): 1} and survey.native_channels == 3
    assert channel_note(survey, 3, forced=False) is not None
    assert size_note(survey, None) is None  # not resized: several sizes are the decoder's error
