"""`dpcompare ldp`: privatised npz + montage + epsilons + PSNR/SSIM, in-process."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from compare.cli.main import main


@pytest.fixture(autouse=True)
def _isolated_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the loaders' decoded-array cache and the default output folder inside tmp_path."""
    monkeypatch.setenv("DPCOMPARE_CACHE_DIR", str(tmp_path / "data_cache"))
    monkeypatch.delenv("DPCOMPARE_DATA_DIR", raising=False)
    monkeypatch.chdir(tmp_path)


def _medmnist_file(tmp_path: Path) -> Path:
    """A small generated MedMNIST-format npz: 24 train / 8 test RGB 10x10 images."""
    rng = np.random.default_rng(0)
    path = tmp_path / "toy.npz"
    np.savez(
        path,
        train_images=rng.integers(0, 256, (24, 10, 10, 3), dtype=np.uint8),
        train_labels=rng.integers(0, 2, (24, 1)),
        test_images=rng.integers(0, 256, (8, 10, 10, 3), dtype=np.uint8),
        test_labels=rng.integers(0, 2, (8, 1)),
    )
    return path


def _run_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["ldp", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_laplace_json_on_generated_data(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    data = _medmnist_file(tmp_path)
    out_dir = tmp_path / "out"
    args = ("--dataset", f"medmnist:{data}", "--mechanism", "laplace", "--scale", "0.5",
            "--out", str(out_dir), "--montage-scales", "0.25,0.5,2", "--montage-rows", "3")
    result = _run_json(capsys, *args)
    eps = result["epsilon"]
    assert eps["per_value"]["epsilon"] == pytest.approx(2.0)
    assert eps["per_image"]["epsilon"] == pytest.approx(10 * 10 * 3 / 0.5)
    assert "patient" in eps["protects"]
    assert result["params"] == {"scale": 0.5, "clip": False}
    assert result["splits"] == ["train", "test"]
    assert result["n_images"] == {"train": 24, "test": 8}
    for split in ("train", "test"):
        q = result["quality"][split]
        assert 0 < q["psnr_db"] < 40 and -1 <= q["ssim"] <= 1
    assert result["montage_levels"] == [0.5, 0.25, 2.0]
    npz = Path(result["files"]["npz"])
    assert npz.parent == out_dir and npz.is_file()
    assert Path(result["files"]["montage"]).is_file()
    summary = json.loads(Path(result["files"]["summary"]).read_text())
    assert summary["privatised_fingerprint"] == result["privatised_fingerprint"]
    assert result["reused_cache"] is False
    with np.load(npz, allow_pickle=False) as arrays:
        assert arrays["x_train"].shape == (24, 10, 10, 3)
        assert arrays["x_train"].dtype == np.float32
    again = _run_json(capsys, *args)
    assert again["reused_cache"] is True
    assert again["privatised_fingerprint"] == result["privatised_fingerprint"]


def test_dp_pix_and_gaussian_on_digits(capsys: pytest.CaptureFixture[str]) -> None:
    # --image-size 8: digits' native size (without it, ldp takes train's 16x16, 256 px)
    pix = _run_json(capsys, "--dataset", "digits", "--image-size", "8", "--mechanism",
                    "dp_pix", "--k", "2", "--m", "2", "--epsilon", "1", "--clip",
                    "--train-limit", "60",
                    "--test-limit", "20", "--montage-rows", "2")
    assert pix["epsilon"]["per_m_neighbourhood"]["epsilon"] == 1.0
    assert pix["epsilon"]["per_image"]["epsilon"] == pytest.approx(64 * 1.0 / 2)
    assert Path(pix["files"]["npz"]).is_relative_to(Path("ldp_out"))
    assert "dp_pix-k2-m2-eps1-clip" in pix["files"]["npz"]
    gauss = _run_json(capsys, "--dataset", "digits", "--mechanism", "gaussian", "--sigma", "1",
                      "--delta", "1e-5", "--splits", "train", "--train-limit", "40",
                      "--test-limit", "10", "--montage-rows", "0")
    assert gauss["epsilon"]["per_value"]["epsilon"] == pytest.approx(4.3772, abs=1e-3)
    assert gauss["splits"] == ["train"] and set(gauss["quality"]) == {"train"}
    assert gauss["files"]["montage"] is None


def test_human_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ldp", "--dataset", "digits", "--mechanism", "laplace", "--train-limit", "30",
                 "--test-limit", "10", "--montage-rows", "1"]) == 0
    text = capsys.readouterr().out
    assert "per value" in text and "per image" in text and "PSNR" in text and "SSIM" in text
    assert "protects a patient's image" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--mechanism", "laplace", "--scale", "-1"], "scale=-1"),
        (["--mechanism", "laplace", "--sigma", "1"], "--sigma"),
        (["--mechanism", "dp_pix", "--k", "0"], "k=0"),
        (["--mechanism", "gaussian", "--montage-scales", "1,x"], "'x' is not a number"),
        (["--mechanism", "gaussian", "--montage-scales", "0"], "sigma=0"),
        (["--mechanism", "laplace", "--splits", "val"], "--splits"),
        (["--mechanism", "laplace", "--seed", "-2"], "--seed=-2"),
    ],
)
def test_bad_values_exit_2(args: list[str], message: str,
                           capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ldp", "--dataset", "digits", *args]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "valid" in err or "applies to" in err
    assert len(err.strip().splitlines()) == 1


def test_corrupt_npz_is_rebuilt_and_reported(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    args = ("--dataset", "digits", "--mechanism", "laplace", "--train-limit", "20",
            "--test-limit", "5", "--montage-rows", "0", "--out", str(tmp_path / "o"))
    first = _run_json(capsys, *args)
    npz = Path(first["files"]["npz"])
    good = npz.read_bytes()
    npz.write_bytes(b"broken")
    second = _run_json(capsys, *args)
    assert second["reused_cache"] is False and npz.read_bytes() == good
