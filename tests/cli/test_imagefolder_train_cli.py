"""A user's own folder of PNGs (3 classes, some RGB, one corrupt) trains on both backends
through ``imagefolder:``; the corrupt file is a one-line error unless skipped explicitly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compare.cli.main import main
from dpcore.results import read_result
from tests.dpcore.data_writers import isolate, write_image


def _folder(root: Path) -> Path:
    """3 classes x 8 PNGs of 16x16; every third file RGB; one file truncated."""
    rng = np.random.default_rng(0)
    base = root / "my scans"
    for label, cls in enumerate(("benign", "malignant", "normal")):
        for i in range(8):
            pixels = rng.integers(0, 60, (16, 16, 3), dtype=np.uint8) + 60 * label
            write_image(base / cls / f"scan_{i}.png", pixels if i % 3 == 0 else pixels[..., 0])
    victim = base / "malignant" / "scan_4.png"
    victim.write_bytes(victim.read_bytes()[:50])
    return base


@pytest.fixture()
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    isolate(monkeypatch, tmp_path)
    return _folder(tmp_path)


def _args(backend: str, folder: Path, out: Path) -> list[str]:
    return ["train", "--backend", backend, "--dataset", f"imagefolder:{folder}", "--model",
            "cnn4", "--steps", "2", "--batch-size", "8", "--noise-multiplier", "1.0",
            "--faithfulness-subset", "4", "--quiet", "--out", str(out)]


def test_corrupt_file_is_a_one_line_error(folder: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    code = main(_args("torch", folder, tmp_path / "out"))
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and "scan_4.png: not a readable image" in err
    assert not (tmp_path / "out" / "runs").exists() or not any((tmp_path / "out" / "runs")
                                                                .iterdir())


@pytest.mark.parametrize("backend", ["tf", "torch"])
def test_trains_on_both_backends_when_skipping(folder: Path, tmp_path: Path, backend: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code = main([*_args(backend, folder, out), "--set", "data.options.skip_unreadable=true"])
    assert code == 0, capsys.readouterr().err
    (run,) = (out / "runs").glob(f"*-{backend}")
    result = read_result(run / "result.json")
    assert result is not None and result.status == "finished"
    assert result.config["data"]["options"] == {"skip_unreadable": True}
    assert result.dataset["n_classes"] == 3 and result.dataset["input_shape"] == [16, 16, 3]
    assert result.dataset["class_names"] == ["benign", "malignant", "normal"]
    assert "scan_4.png" in result.dataset["extra"]["skipped"]
    assert len(result.dataset["extra"]["files_sha256"]) == 64
