"""The runner's montage arrays explain each model on the inputs it is evaluated on: a local-DP
run on its privatised test images, a non-private run on the clean ones; the report draws them
with the clean image first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import compare.reporting.montage as montage
from compare.grid import expand_grid
from compare.montage_data import load_montage_data
from compare.report import ReportContext, write_report
from compare.runner import run_grid

GRID = {
    "name": "tiny-ldp",
    "base": {"data": {"name": "digits", "image_size": 16}, "model": {"name": "cnn4"},
             "train": {"steps": 4, "batch_size": 64, "lr": 0.5}},
    "axes": {"privacy": [
        {"label": "LDP b=2", "privacy": {"mechanism": "ldp"},
         "data": {"ldp_mechanism": "laplace", "ldp_params": {"scale": 2.0, "clip": True}}},
        {"label": "non-private", "privacy": {"mechanism": "none"}},
    ]},
    "backends": ["torch"],
    "evaluation": {"faithfulness": False, "montage_images": 2},
}


def test_each_run_is_explained_on_its_own_test_images(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    run_grid(expand_grid(GRID), tmp_path, progress=False, log=lambda _m: None)
    folder = tmp_path / "montages" / "tiny-ldp"
    assert sorted(p.name for p in folder.iterdir()) == ["digits-cnn4.npz"]  # arrays only
    stored = load_montage_data(folder / "digits-cnn4.npz")
    by_title = {c["title"].split(" (")[0]: c for c in stored.columns}
    # the non-private run saw the clean images (no inputs of its own), the LDP run its own
    assert by_title["non-private"]["inputs"] is None
    own = np.asarray(by_title["LDP b=2"]["inputs"], dtype=np.float64)
    assert own.shape == stored.images.shape and not np.allclose(own, stored.images)

    calls: list[dict[str, Any]] = []
    real = montage.saliency_montage

    def spy(path: Any, images: np.ndarray, columns: list, class_names: Any, **kw: Any) -> Any:
        calls.append({"images": np.asarray(images), "columns": columns})
        return real(path, images, columns, class_names, **kw)

    monkeypatch.setattr(montage, "saliency_montage", spy)
    write_report(tmp_path, tmp_path / "rep", ReportContext(command="x"))
    (call,) = calls
    # a title is the setting, with the run's epsilon where the label does not name it and
    # "(collapsed)" for a model at chance (4 steps here)
    by_title = {c["title"].split(" (")[0]: c for c in call["columns"]}
    ldp, plain = by_title["LDP b=2"], by_title["non-private"]
    clean = call["images"]
    # the clean images are the non-private run's inputs; the LDP model saw privatised ones
    assert np.array_equal(plain["inputs"], clean)
    assert ldp["inputs"].shape == clean.shape and not np.allclose(ldp["inputs"], clean)
    assert ldp["inputs"].min() >= 0.0 and ldp["inputs"].max() <= 1.0  # clipped noise
    assert (tmp_path / "rep" / "montages" / "digits-cnn4.png").is_file()
