"""`dpcompare bench`: one tiny case (small batch, random data) runs every variant in one
process and writes report.md (with its command) + results.json; --json prints every figure;
ratios and target verdicts are computed from the figures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("opacus")

from benchmarks import bench, render  # noqa: E402
from compare.cli.main import main  # noqa: E402

VARIANTS = {"tf_plain", "tf_dp_reference", "tf_dp_fast", "tf_privacy_keras", "torch_plain",
            "torch_dp_fast", "opacus_hooks", "opacus_functorch", "opacus_ew"}


def _tiny(monkeypatch: pytest.MonkeyPatch) -> None:
    def tiny_cases(quick: bool) -> list[bench.Case]:
        return [bench.Case("cnn4_b1024", "cnn4", 16, shape=(16, 16, 1), nominal_n=160,
                           rounds=2, steps=1, warmup=1, keras_dp=True, slow_steps=1)]

    def tiny_images(quick: bool, data_dir: str | None) -> tuple[np.ndarray, np.ndarray, str]:
        rng = np.random.default_rng(0)
        return (rng.integers(0, 256, (64, 16, 16, 1), dtype=np.uint8),
                rng.integers(0, 10, 64).astype(np.int64), "random test data")

    monkeypatch.setattr(bench, "cases", tiny_cases)
    monkeypatch.setattr(bench, "load_images", tiny_images)


def test_bench_json_and_report(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    _tiny(monkeypatch)
    assert main(["bench", "--quick", "--json", "--out", str(tmp_path)]) == 0
    results = json.loads(capsys.readouterr().out)
    case = results["cases"]["cnn4_b1024"]
    assert set(case["variants"]) == VARIANTS
    for name in ("tf_plain", "tf_dp_reference", "tf_dp_fast", "torch_plain", "torch_dp_fast",
                 "opacus_hooks"):
        v = case["variants"][name]
        assert v["seconds_per_epoch"] == pytest.approx(v["seconds_per_step"] * 10)
        assert v["examples_per_second"] == pytest.approx(16 / v["seconds_per_step"])
        assert v["steps_timed"] == 2 and v["peak_rss_mb"] > 0
    ratios = case["ratios"]
    assert ratios["tf_dp_fast/tf_plain"] == pytest.approx(
        case["variants"]["tf_dp_fast"]["seconds_per_step"]
        / case["variants"]["tf_plain"]["seconds_per_step"])
    assert ratios["torch_dp_fast/torch_plain"] == pytest.approx(
        case["variants"]["torch_dp_fast"]["seconds_per_step"]
        / case["variants"]["torch_plain"]["seconds_per_step"])
    assert ratios["opacus_fastest_mode"] in {"opacus_hooks", "opacus_functorch", "opacus_ew"}
    assert results["data"] == "random test data" and len(results["loadavg_before"]) == 3
    report = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert f"`dpcompare bench --quick --json --out {tmp_path}`" in report
    assert "Load average" in report and "extrapolated" in report
    assert json.loads((tmp_path / "results.json").read_text())["cases"].keys() == {"cnn4_b1024"}


def _figures(seconds: dict[str, float | None]) -> dict[str, Any]:
    return {name: ({"skipped": "not run"} if s is None else {"seconds_per_step": s})
            for name, s in seconds.items()}


def test_ratios_pick_the_fastest_opacus_mode_and_skip_missing() -> None:
    figures = _figures({"tf_plain": 1.0, "tf_dp_fast": 2.0, "tf_dp_reference": 6.0,
                        "tf_privacy_keras": None, "torch_plain": 1.0, "opacus_hooks": 3.0,
                        "opacus_functorch": 4.0, "opacus_ew": None})
    r = bench.ratios(figures)
    assert r["opacus_fastest_mode"] == "opacus_hooks"
    assert r["tf_dp_fast/tf_plain"] == 2.0
    assert r["tf_dp_fast/opacus_fastest"] == pytest.approx(2 / 3)
    assert r["tf_privacy_keras/tf_plain"] is None


def test_target_verdicts() -> None:
    case = {"ratios": {"tf_dp_fast/tf_plain": 2.6, "tf_dp_fast/opacus_fastest": 1.0,
                       "opacus_fastest_mode": "opacus_hooks"}}
    lines = render.targets({"cases": {render.TARGET_CASE: case}})
    assert "NOT met" in lines[0] and lines[1].endswith(": met")


def test_the_benchmark_package_is_installed_not_only_found_in_the_checkout(
        tmp_path: Path) -> None:
    """`dpcompare bench` imports `benchmarks` lazily: it must import from any folder, as the
    console script runs there (sys.path[0] is the script's folder, not the checkout)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", "import benchmarks.bench, benchmarks.render"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
