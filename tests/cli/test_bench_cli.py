"""`dpcompare bench`: one tiny case (small batch, random data) runs every tier in one process
and a tiny sweep; report.md (with its command), results.json and sweep.png are written; the
ratios are the quotients of the figures; targets are marked met / missed / not measured.
No timing assertions: the speed targets are checked by the benchmark, not by tests."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("opacus")

from benchmarks import bench, ratios, render, sweep, variants  # noqa: E402
from compare.cli.main import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TIERS = ["tf_plain", "tf_dp_reference", "tf_dp_fast", "tf_privacy_stock", "torch_plain",
         "torch_dp_reference", "torch_dp_fast", "opacus_stock", "torch_plain_cl",
         "torch_dp_fast_cl"]


def _tiny(monkeypatch: pytest.MonkeyPatch) -> None:
    def tiny_cases(quick: bool) -> list[bench.Case]:
        return [bench.Case("cnn4_b1024", "cnn4", 16, rounds=2, steps=1, warmup=1,
                           slow_steps=1)]

    def tiny_data(name: str, quick: bool, data_dir: str | None) -> bench.CaseData:
        rng = np.random.default_rng(0)
        return bench.CaseData(rng.integers(0, 256, (64, 16, 16, 1), dtype=np.uint8),
                              rng.integers(0, 10, 64).astype(np.int64), "image", 10, 160,
                              "random test data")

    monkeypatch.setattr(bench, "cases", tiny_cases)
    monkeypatch.setattr(bench, "load_data", tiny_data)
    monkeypatch.setattr(sweep, "QUICK_BATCHES", (8, 16))
    monkeypatch.setattr(sweep, "_isolated", sweep.measure_point)  # in-process: seconds


def test_bench_json_and_report(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    _tiny(monkeypatch)
    assert main(["bench", "--quick", "--json", "--out", str(tmp_path)]) == 0
    results = json.loads(capsys.readouterr().out)
    case = results["cases"]["cnn4_b1024"]
    assert list(variants.TIERS) == TIERS and set(case["variants"]) == set(TIERS)
    for name in TIERS:
        v = case["variants"][name]
        assert "skipped" not in v, (name, v)
        assert v["seconds_per_epoch"] == pytest.approx(v["seconds_per_step"] * 10)
        assert v["examples_per_second"] == pytest.approx(16 / v["seconds_per_step"])
        assert v["steps_timed"] == 2 and v["peak_rss_mb"] > 0
    for a, b in ratios.TIME_RATIOS:
        assert case["ratios"][f"{a}/{b}"] == pytest.approx(
            case["variants"][a]["seconds_per_step"] / case["variants"][b]["seconds_per_step"])
        assert case["cpu_ratios"][f"{a}/{b}"] == pytest.approx(
            case["variants"][a]["cpu_seconds_per_step"]
            / case["variants"][b]["cpu_seconds_per_step"])
    assert {"tf_dp_fast/torch_dp_fast", "tf_privacy_stock/opacus_stock",
            "tf_dp_fast/torch_dp_fast_cl", "torch_dp_fast_cl/torch_plain_cl"} <= set(
        case["ratios"])
    for view in ("tf", "torch_cl"):  # the per-layer table of each fast DP tier
        table = case["layers"][view]
        assert [r["type"] for r in table] == (
            ["Conv2D", "Conv2D", "Dense", "Dense"] if view == "tf"
            else ["Conv2d", "Conv2d", "Linear", "Linear"]), table
        assert all(r["norm_ms"] > 0 and r["sum_ms"] > 0 and r["plain_ms"] > 0 for r in table)
        assert all(r["extra_ms"] == pytest.approx(r["norm_ms"] + r["sum_ms"] - r["plain_ms"])
                   for r in table)
        # cnn4's first conv on 16x16: T = 64 positions, p d = 64 x 16: 2 T^2 > p d, so the
        # rule's default is a per-example route, the unfold; the ghost norm (~6x the MACs) is
        # not timed
        assert (table[0]["T"], table[0]["p"], table[0]["d"], table[0]["default_route"]) == (
            64, 64, 16, "unfold")
        assert set(table[0]["routes_ms"]) == {"per_example", "unfold"}
        assert table[0]["route"] in table[0]["routes_ms"]
        assert all(r["route"] == "ghost" and not r["routes_ms"] for r in table[2:])  # dense
        assert all(r["model"]["route_ms"] > 0 and r["model"]["route_bound"] in {
            "arithmetic", "memory"} for r in table)
        tier = case["variants"]["tf_dp_fast" if view == "tf" else "torch_dp_fast_cl"]
        # a chunk of 16 of 256: size class 32
        assert len(tier["routes"]["32"]) == 4 and tier["routes_chosen_by"]["warmup_seconds"] > 0
        assert render.modelled_ratio(case, view) > 1.0
    assert results["roofline"]["peak_flops"] > 0 and results["roofline"][
        "bandwidth_bytes_per_s"] > 0
    assert results["settings"]["compiled_steps_tried"] is False  # --quick: not compiled
    assert not any("compile" in v for v in case["variants"].values())
    assert set(case["ratio_spreads"]) == set(case["ratios"])
    settings = results["settings"]
    assert "channels_last" in settings["memory_format"]["torch_*_cl"]
    assert "Book-Keeping" in settings["engine"]["*_dp_fast*"]
    assert results["machine"]["torch_threads"] >= 1 and "intra_op" in results["machine"][
        "tf_threads"]
    assert results["data"] == {"mnist": "random test data"}
    assert results["sweep"]["batches"] == [8, 16]
    assert set(results["sweep"]["points"]) == set(variants.FAST_TIERS)
    verdicts = {(t["case"], t["target"]): t["verdict"] for t in results["targets"]}
    assert verdicts[("cnn4_b1024", "torch_dp_fast_cl/torch_plain_cl (time) <= 1.25")] in {
        "met", "missed"}
    assert verdicts[("cnn4_b1024", "torch_dp_fast_cl/torch_plain_cl (CPU time) <= 1.25")] in {
        "met", "missed"}
    assert verdicts[("resnet18_b64", "tf_dp_fast/tf_plain (time) <= 1.35")] == "not measured"
    report = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert f"`dpcompare bench --quick --json --out {tmp_path}`" in report
    for text in ("## Targets\n", "## Reading", "extrapolated", "Load average",
                 "## Batch-size sweep", "![sweep](sweep.png)", *TIERS, "as users run it",
                 "at its best", "Memory formats: ", "Threads: torch ",
                 "Per-layer cost of the fast DP step", "| torch (channels-last) | layers.conv1 |",
                 "Roofline of the cost model: ", "Modelled DP / plain of the trainable layers",
                 "round spread"):
        assert text in report, text
    assert "issue" not in report.lower() and "NOT MEASURED" not in report
    assert (tmp_path / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((tmp_path / "results.json").read_text())["cases"].keys() == {"cnn4_b1024"}
    _check_plain_targets_and_tier_memory(results, report)


def _check_plain_targets_and_tier_memory(results: dict[str, Any], report: str) -> None:
    """A quick run names the targets it cannot measure once, with why; each tier's memory is
    its own (the larger rise of its warm-up and timed steps), the process peak said once."""
    targets = report.split("## Targets\n")[1].split("\n## ")[0]
    measured = [t for t in results["targets"] if t["value"] is not None]
    assert len(measured) == 5 and all(t["case"] == "cnn4_b1024" for t in measured)
    lines = [line for line in targets.splitlines() if line.startswith("- ")]
    assert len(lines) == 6 and "not measured" not in "".join(lines[:5])  # 5 verdicts, 1 note
    assert "(time) <= 1.25: " in lines[0] and "(round spread " in lines[0]
    assert "(CPU time) <= 1.25: " in lines[2] and "round spread" not in lines[2]
    assert lines[5] == (
        "- This quick run timed cnn4_b1024 and swept batch 8, 16; 14 of the 19 targets are "
        "not measured (cnn4_b256, resnet18_b64, resnet18_b256, textcnn_imdb_b256: the case did "
        "not run; sweep_b1024: the sweep did not reach batch 1024); the full `dpcompare bench` "
        "runs every case and the whole sweep.")
    targets_and_reading, costs = report.split("## Cost of the medical presets here")
    assert targets_and_reading.count("not measured") == 2  # the note, and the reading's count
    # the tiny case is none the medical presets' runs are priced by: each says why, once
    for model, case in (("cnn4", "cnn4_b256"), ("resnet18", "resnet18_pneumonia_b64")):
        line = next(x for x in costs.splitlines() if x.startswith(f"- not measured: 24 runs "
                                                                  f"({model};"))
        assert f"the bench case {case} did not run (this bench timed cnn4_b1024;" in line
    case = results["cases"]["cnn4_b1024"]
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in report.splitlines()
            if line.startswith(("| tf_", "| torch_", "| opacus")) and " | " in line
            and "/" not in line.split(" | ")[0]}
    assert "| tier MiB |" in report and "peak RSS MiB" not in report
    for name in TIERS:
        v = case["variants"][name]
        own = max(v["warmup_peak_increase_mb"], v["peak_increase_mb"])
        assert rows[name][4] == f"{own:.0f}", (name, rows[name])
    peak = results["process_peak_rss_mb"]
    assert peak == max(v["peak_rss_mb"] for v in case["variants"].values())
    assert report.count(f"peaked at {peak:.0f} MiB") == 1
    summary = render.text_summary(results)
    assert "tierMiB" in summary and "peakMiB" not in summary


@pytest.mark.parametrize(("argv", "folder"), [
    (["--quick"], "runs/bench-quick"),
    (["--cases", "cnn4_b256"], "runs/bench-partial"),
    (["--no-sweep"], "runs/bench-partial"),
    ([], "reports/benchmarks"),
])
def test_only_the_full_benchmark_writes_the_committed_report_by_default(
        argv: list[str], folder: str) -> None:
    from compare.cli.bench import default_out
    from compare.cli.main import build_parser

    args = build_parser().parse_args(["bench", *argv])
    assert args.out is None and default_out(args) == folder


def test_bench_quick_never_writes_the_committed_report(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    stored = json.loads((ROOT / "reports" / "benchmarks" / "results.json").read_text())
    stored.pop("sweep")
    monkeypatch.setattr(bench, "run_benchmark", lambda **_kwargs: {**stored, "quick": True})
    committed = tmp_path / "reports" / "benchmarks"
    committed.mkdir(parents=True)
    (committed / "report.md").write_text("the full report")
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "--quick", "--no-sweep"]) == 0
    assert f"report: {Path('runs/bench-quick/report.md')}" in capsys.readouterr().out
    assert (committed / "report.md").read_text() == "the full report"
    assert sorted(p.name for p in committed.iterdir()) == ["report.md"]
    report = (tmp_path / "runs" / "bench-quick" / "report.md").read_text()
    assert "`dpcompare bench --quick --no-sweep --out runs/bench-quick`" in report


def _figures(seconds: dict[str, float | None]) -> dict[str, Any]:
    return {name: ({"skipped": "not run"} if s is None else {"seconds_per_step": s})
            for name, s in seconds.items()}


def test_ratio_arithmetic_and_missing_sides() -> None:
    figures = _figures({"tf_plain": 1.0, "tf_dp_fast": 2.0, "tf_dp_reference": 6.0,
                        "tf_privacy_stock": None, "torch_plain": 0.5, "torch_dp_fast": 1.0,
                        "torch_dp_reference": 4.0, "opacus_stock": 3.0})
    r = ratios.ratios(figures)
    assert list(r) == [f"{a}/{b}" for a, b in ratios.TIME_RATIOS]
    assert r["tf_dp_fast/tf_plain"] == 2.0
    assert r["torch_dp_fast/torch_plain"] == 2.0
    assert r["tf_dp_fast/torch_dp_fast"] == 2.0
    assert r["opacus_stock/torch_plain"] == 6.0
    assert r["tf_privacy_stock/tf_plain"] is None
    assert r["tf_privacy_stock/opacus_stock"] is None


def test_targets_are_marked_met_missed_or_not_measured() -> None:
    target = ratios.Target("cnn4_b1024", "tf_dp_fast/torch_dp_fast", 0.67, 1.5)
    assert [ratios.verdict(target, v) for v in (0.5, 0.67, 1.0, 1.5, 1.51, None)] == [
        "missed", "met", "met", "met", "missed", "not measured"]
    results = {"cases": {"cnn4_b1024": {"ratios": {"torch_dp_fast_cl/torch_plain_cl": 1.6,
                                                   "tf_dp_fast/tf_plain": 1.2}}},
               "sweep": {"memory_ratios": {"1024": {"torch_dp_fast/torch_plain": 1.1,
                                                    "tf_dp_fast/tf_plain": 1.7}}}}
    rows = {(r["case"], r["target"]): (r["value"], r["verdict"])
            for r in ratios.target_rows(results)}
    assert rows[("cnn4_b1024", "torch_dp_fast_cl/torch_plain_cl (time) <= 1.25")] == (
        1.6, "missed")
    assert rows[("cnn4_b1024", "tf_dp_fast/tf_plain (time) <= 1.25")] == (1.2, "met")
    assert rows[("sweep_b1024", "torch_dp_fast/torch_plain (peak memory) <= 1.5")] == (
        1.1, "met")
    assert rows[("sweep_b1024", "tf_dp_fast/tf_plain (peak memory) <= 1.5")] == (1.7, "missed")
    assert rows[("resnet18_b64", "tf_dp_fast/tf_plain (time) <= 1.35")] == (None,
                                                                            "not measured")
    assert rows[("cnn4_b1024", "tf_dp_fast/tf_plain (CPU time) <= 1.25")] == (
        None, "not measured")  # no CPU ratios in these results
    lines = render.target_lines({"targets": ratios.target_rows(results)})
    assert "1.20 -> MET" in lines[0] and lines[1].endswith("1.60 -> MISSED")


def test_a_missed_target_names_the_costliest_layer_of_its_dp_tier() -> None:
    layer = {"T": 25, "p": 256, "d": 32, "norm_ms": 1.0, "sum_ms": 1.0, "plain_ms": 1.0}
    results = {
        "cases": {"cnn4_b1024": {
            "ratios": {"torch_dp_fast_cl/torch_plain_cl": 1.6, "tf_dp_fast/tf_plain": 1.2},
            "layers": {
                "torch_cl": [{**layer, "layer": "layers.conv1", "type": "Conv2d",
                              "route": "per-example", "extra_ms": 0.5},
                             {**layer, "layer": "layers.conv2", "type": "Conv2d",
                              "route": "ghost norm", "extra_ms": 7.25}],
                "tf": [{**layer, "layer": "conv1", "type": "Conv2D", "route": "per-example",
                        "extra_ms": 3.0}]}}}}
    results["targets"] = ratios.target_rows(results)
    lines = render.target_lines(results)
    missed = next(line for line in lines if "MISSED" in line)
    assert missed == (
        "cnn4_b1024: torch_dp_fast_cl/torch_plain_cl (time) <= 1.25: 1.60 -> MISSED; largest "
        "per-layer DP cost: torch (channels-last): layers.conv2 (Conv2d, ghost norm, +7.2 ms "
        "per chunk over its plain weight gradient)")
    assert not any("largest" in line for line in lines if "MET" in line)


def _sweep_result() -> dict[str, Any]:
    def point(ms: float, mib: float) -> dict[str, Any]:
        return {"seconds_per_example": ms / 1000, "peak_rss_mb": mib}

    return {"model": "cnn4", "batches": [64, 128], "isolated": True, "points": {
        "tf_plain": {"64": point(0.2, 600), "128": point(0.1, 620)},
        "tf_dp_fast": {"64": point(0.3, 650), "128": {"skipped": "failed"}},
        "torch_plain": {"64": point(0.1, 400), "128": point(0.05, 410)},
        "torch_dp_fast": {"64": point(0.2, 420), "128": point(0.1, 440)}}}


def test_sweep_table_ratios_and_plot(tmp_path: Path) -> None:
    result = _sweep_result()
    assert sweep.table(result) == [["64", "0.200", "600", "0.300", "650", "0.100", "400",
                                    "0.200", "420"],
                                   ["128", "0.100", "620", "-", "-", "0.050", "410", "0.100",
                                    "440"]]
    r = sweep._ratios(result["points"], [64, 128], "peak_rss_mb")
    assert r["64"]["tf_dp_fast/tf_plain"] == pytest.approx(650 / 600)
    assert r["128"]["tf_dp_fast/tf_plain"] is None
    assert r["128"]["torch_dp_fast/torch_plain"] == pytest.approx(440 / 410)
    path = sweep.plot_sweep(result, tmp_path / "plot" / "sweep.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sweep_points_in_process_have_time_and_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    result = sweep.run_sweep(quick=True, isolate=False, batches=[8],
                             variants=["torch_plain", "torch_dp_fast"])
    for variant in ("torch_plain", "torch_dp_fast"):
        point = result["points"][variant]["8"]
        assert point["steps_timed"] == 1 and point["seconds_per_example"] > 0
        assert point["peak_rss_mb"] > 0
    assert math.isfinite(result["time_ratios"]["8"]["torch_dp_fast/torch_plain"])


def test_an_isolated_sweep_point_runs_in_a_fresh_process() -> None:
    point = sweep._isolated("torch_plain", 8, 1)
    assert "skipped" not in point, point
    assert point["steps_timed"] == 1 and point["peak_rss_mb"] > point["peak_increase_mb"] >= 0


def test_memory_guard_names_the_need_and_the_limit() -> None:
    from benchmarks import memory

    assert memory.too_big(64, 1000, 10**9) is None
    message = memory.too_big(256, 11_172_810, 21 * 2**30)
    assert message is not None and message.startswith("not run (memory): 256 per-example")
    assert "21.0 GiB available" in message
    assert memory.too_big(10**6, 10**6, None) is None  # unknown memory: attempted


def test_an_unknown_case_is_one_line_exit_2_nothing_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["bench", "--cases", "cnn4_b999", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cnn4_b999" in err and "cnn4_b1024" in err
    assert not out.exists()


def test_the_benchmark_package_is_installed_not_only_found_in_the_checkout(
        tmp_path: Path) -> None:
    """`dpcompare bench` imports `benchmarks` lazily: it must import from any folder, as the
    console script runs there (sys.path[0] is the script's folder, not the checkout)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", "import benchmarks.bench, benchmarks.render"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_no_benchmark_module_shares_a_file_with_another_installed_package() -> None:
    """Opacus's wheel installs a top-level `benchmarks` package too (layers.py, utils.py, ...):
    a module of ours with one of its file names would be shadowed by, or overwrite, Opacus's
    file in site-packages. Our module names must stay clear of every installed distribution's
    `benchmarks/` files."""
    from importlib import metadata

    ours = {p.name for p in Path(bench.__file__).parent.glob("*.py")}
    clashes = []
    for dist in metadata.distributions():
        if (dist.metadata["Name"] or "").lower() == "dpcompare":
            continue
        for file in dist.files or ():
            parts = Path(str(file)).parts
            if len(parts) == 2 and parts[0] == "benchmarks" and parts[1] in ours \
                    and parts[1] != "__init__.py":
                clashes.append(f"{dist.metadata['Name']}: {file}")
    assert not clashes, clashes
