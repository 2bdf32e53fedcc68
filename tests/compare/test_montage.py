"""The saliency montage: a PNG of plausible size, and clear errors on mismatched inputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from compare.reporting.montage import DPI, TILE_INCHES, saliency_montage
from dpcore.errors import ConfigError

N, H, W = 3, 16, 16
CLASSES = ["normal", "pneumonia"]


def _columns(backends: tuple[str, ...] = ("tf", "torch"),
             titles: tuple[str, ...] = ("eps=1", "eps=inf")) -> list[dict[str, Any]]:
    rng = np.random.default_rng(0)
    return [
        {"title": title, "backend": backend, "maps": rng.uniform(size=(N, H, W)),
         "pred_class": rng.integers(0, len(CLASSES), N), "confidence": rng.uniform(size=N)}
        for backend in backends for title in titles
    ]


def _images(channels: int = 1) -> np.ndarray:
    return np.random.default_rng(1).uniform(size=(N, H, W, channels))


@pytest.mark.parametrize("channels", [1, 3])
def test_writes_a_png_of_plausible_size(tmp_path: Path, channels: int) -> None:
    path = saliency_montage(tmp_path / "sub" / "montage.png", _images(channels), _columns(),
                            CLASSES, title="Grad-CAM, cnn4")
    assert path == tmp_path / "sub" / "montage.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 10_000
    with Image.open(path) as image:
        width, height = image.size
    # 2 panels x (input + 2 overlays) tiles across, N tiles down (plus titles)
    assert width == pytest.approx(6 * TILE_INCHES * DPI, rel=0.05)
    assert N * TILE_INCHES * DPI <= height <= (N * TILE_INCHES + 1.5) * DPI
    assert [p.name for p in path.parent.iterdir()] == ["montage.png"]  # no temp file left


def test_one_backend_and_uneven_blocks(tmp_path: Path) -> None:
    columns = _columns(("torch",), ("eps=0.5", "eps=1", "eps=inf")) + _columns(("tf",), ("x",))
    path = saliency_montage(tmp_path / "m.png", _images(), columns, CLASSES)
    with Image.open(path) as image:
        assert image.size[0] == pytest.approx(6 * TILE_INCHES * DPI, rel=0.05)


def _broken(key: str, value: object) -> list[dict[str, Any]]:
    columns = _columns()
    columns[1][key] = value
    return columns


@pytest.mark.parametrize(("columns", "match"), [
    (_broken("maps", np.zeros((N, H, W - 1))), r"column 1 .*maps have shape \(3, 16, 15\)"),
    (_broken("maps", np.zeros((N - 1, H, W))), r"column 1 .*need \(3, 16, 16\)"),
    (_broken("pred_class", np.array([0, 1])), "pred_class has shape"),
    (_broken("pred_class", np.array([0, 1, 2])), r"outside 0..1"),
    (_broken("confidence", np.array([0.5, 1.5, 0.1])), r"confidence .* in \[0, 1\]"),
    ([{"title": "a", "backend": "tf"}], "lacks maps, pred_class, confidence"),
    ([], "columns is empty"),
])
def test_mismatched_inputs_raise_config_error(tmp_path: Path, columns: list, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        saliency_montage(tmp_path / "m.png", _images(), columns, CLASSES)
    assert not (tmp_path / "m.png").exists()


def test_bad_images_and_class_names(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"images have shape \(3, 16, 16\)"):
        saliency_montage(tmp_path / "m.png", _images()[..., 0], _columns(), CLASSES)
    with pytest.raises(ConfigError, match="class_names is empty"):
        saliency_montage(tmp_path / "m.png", _images(), _columns(), [])


def test_each_model_is_explained_on_its_own_inputs_beside_the_clean_image(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import compare.reporting.montage as montage

    shown: list[tuple[np.ndarray, np.ndarray | None]] = []
    real_show = montage._show
    monkeypatch.setattr(montage, "_show", lambda ax, image, saliency=None: (
        shown.append((np.asarray(image), saliency)), real_show(ax, image, saliency)))
    clean = _images()
    privatised = clean + np.random.default_rng(2).laplace(scale=1.0, size=clean.shape)
    ldp, plain = _columns(("tf",), ("LDP b=1", "non-private"))
    ldp["inputs"] = privatised
    plain["inputs"] = clean.copy()            # equal to the clean images: no extra tile
    path = saliency_montage(tmp_path / "m.png", clean, [ldp, plain], CLASSES)
    # per row: clean image, the LDP model's input, its overlay, the non-private overlay
    assert len(shown) == 4 * N
    for row in range(N):
        tiles = shown[4 * row: 4 * row + 4]
        assert np.array_equal(tiles[0][0], clean[row]) and tiles[0][1] is None
        assert np.array_equal(tiles[1][0], privatised[row]) and tiles[1][1] is None
        assert np.array_equal(tiles[2][0], privatised[row])         # LDP map over its input
        assert np.array_equal(tiles[2][1], ldp["maps"][row])
        assert np.array_equal(tiles[3][0], clean[row])              # the other on clean
        assert np.array_equal(tiles[3][1], plain["maps"][row])
    with Image.open(path) as image:
        assert image.size[0] == pytest.approx(4 * TILE_INCHES * DPI, rel=0.05)


def test_inputs_of_another_shape_are_refused(tmp_path: Path) -> None:
    column = _columns(("tf",), ("LDP b=1",))[0]
    column["inputs"] = _images()[:, :8]
    with pytest.raises(ConfigError, match="inputs have shape"):
        saliency_montage(tmp_path / "m.png", _images(), [column], CLASSES)


def test_each_clean_image_is_titled_with_its_true_class(tmp_path: Path) -> None:
    from matplotlib.figure import Figure

    import compare.reporting.montage as montage

    drawn: list[Figure] = []
    real_note = montage.note_figure
    montage.note_figure = lambda fig, path: drawn.append(fig)  # type: ignore[assignment]
    try:
        saliency_montage(tmp_path / "m.png", _images(), _columns(), CLASSES,
                         true_labels=np.array([1, 0, 1]))
        saliency_montage(tmp_path / "n.png", _images(), _columns(), CLASSES)
    finally:
        montage.note_figure = real_note
    titles = [ax.get_title() for ax in drawn[0].axes]
    assert titles.count("clean image\ntrue: pneumonia") == 2  # first row, one per backend
    assert titles.count("true: normal") == 2 and titles.count("true: pneumonia") == 2
    assert not [t for ax in drawn[1].axes if "true:" in (t := ax.get_title())]


@pytest.mark.parametrize(("labels", "match"), [
    (np.array([0, 1]), r"true_labels have shape \(2,\)"),
    (np.array([0.0, 1.0, 1.0]), "dtype float64"),
    (np.array([0, 1, 2]), r"true_labels hold 0..2, outside 0..1"),
])
def test_bad_true_labels_raise_config_error(tmp_path: Path, labels: np.ndarray,
                                            match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        saliency_montage(tmp_path / "m.png", _images(), _columns(), CLASSES, true_labels=labels)
