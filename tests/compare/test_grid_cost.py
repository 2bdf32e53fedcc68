"""The bench report's "Cost of the medical presets here" (:mod:`benchmarks.grid_cost`): a pure
function of fake bench results and an expanded grid, checked by hand-computed arithmetic; the
tier follows the mechanism registry; a case the bench did not run is "not measured", not a
crash; the bundled medical presets expand to their run counts. No training, no framework."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import command, grid_cost, render
from compare.bench import expand_preset
from compare.grid import Grid, expand_grid, load_preset
from compare.reporting.styles import label_of
from dpcore.config import DataSpec, ModelSpec, PerfSpec, PrivacySpec, RunConfig
from dpcore.mechanisms import DP_MECHANISMS
from dpcore.results import RunResult
from tests.end_to_end.test_extension_dp_mechanism import TOY, ToyGaussian

ROOT = Path(__file__).resolve().parents[2]
RESNET = "resnet18_pneumonia_b64"

#: Seconds per step of each tier at the fake case's batch 64 (per example: / 64).
SECONDS = {"tf_plain": 0.32, "tf_dp_fast": 0.64, "torch_plain": 0.16, "torch_dp_fast": 0.48,
           "torch_plain_cl": 0.08, "torch_dp_fast_cl": 0.32}


def _results(seconds: dict[str, float | None], case: str = RESNET) -> dict[str, Any]:
    """Bench results as :func:`benchmarks.bench.run_benchmark` gives them (the keys read)."""
    variants = {name: ({"skipped": "failed: MemoryError"} if s is None
                       else {"seconds_per_step": s}) for name, s in seconds.items()}
    return {"cases": {case: {"model": "resnet18", "batch_size": 64, "variants": variants}}}


def _grid(perf: dict[str, Any] | None = None) -> Grid:
    """resnet18 on PneumoniaMNIST (N 4708) and RetinaMNIST (N 1080), 2 epochs at batch 256,
    Gaussian DP-SGD and non-private, both backends: 8 runs."""
    return expand_grid({
        "name": "tiny-medical",
        "base": {"model": {"name": "resnet18"}, "train": {"epochs": 2, "batch_size": 256}},
        "axes": {"data": [{"data": {"name": "pneumoniamnist"}},
                          {"data": {"name": "retinamnist"}}],
                 "privacy": [{"privacy": {"mechanism": "dpsgd-gaussian",
                                          "noise_multiplier": 1.0}},
                             {"privacy": {"mechanism": "none"}}]},
        "backends": ["tf", "torch"], "perf": perf or {"engine": "fast"}})


def test_the_arithmetic_on_a_hand_computed_grid() -> None:
    est = grid_cost.preset_cost(_results(SECONDS), _grid(), label_of)
    # examples per (data, epochs): 2 x 4708 + 2 x 1080 = 11576 per (mechanism, backend)
    # tf: DP 0.64 / 64 = 0.01 s/example, plain 0.005: 115.76 + 57.88 = 173.64 s
    # torch (default memory format): DP 0.0075, plain 0.0025: 86.82 + 28.94 = 115.76 s
    assert est["runs"] == 8 and est["estimated_runs"] == 8
    assert est["hours_by_backend"]["tf"] == pytest.approx(173.64 / 3600)
    assert est["hours_by_backend"]["torch"] == pytest.approx(115.76 / 3600)
    assert est["hours"] == pytest.approx(289.4 / 3600)
    # channels-last: (0.08 + 0.32) / 64 = 0.00625 s/example x 11576 = 72.35 s
    assert est["torch_channels_last_hours"] == pytest.approx(72.35 / 3600)
    groups = {(g["backend"], g["tier"]): g for g in est["groups"]}
    assert set(groups) == {("tf", "tf_dp_fast"), ("tf", "tf_plain"),
                           ("torch", "torch_dp_fast"), ("torch", "torch_plain")}
    dp = groups[("tf", "tf_dp_fast")]
    assert (dp["runs"], dp["epochs"], dp["mechanism"]) == (2, [2.0], "dpsgd-gaussian")
    assert dp["seconds_per_epoch"] == pytest.approx({"pneumoniamnist": 47.08,
                                                     "retinamnist": 10.8})
    assert dp["hours"] == pytest.approx(115.76 / 3600) and dp["why"] is None
    assert groups[("torch", "torch_plain")]["mechanism"] == "non-private"  # the report label
    unlabelled = grid_cost.preset_cost(_results(SECONDS), _grid())["groups"]
    assert {g["mechanism"] for g in unlabelled} == {"dpsgd-gaussian", "none"}
    lines = grid_cost.section_lines([est], threads=2)
    assert lines[0] == "## Cost of the medical presets here"
    text = "\n".join(lines)
    for phrase in ("not a measurement", "seconds per step / the case's batch",
                   "data loading", "Grad-CAM", "torch 2"):
        assert phrase in text, phrase
    assert "| resnet18 | dpsgd-gaussian | tf | tf_dp_fast | 2 | 2 | pneumoniamnist 47 s, " \
           "retinamnist 11 s | 116 s |" in lines
    assert "- tiny-medical: 4.8 min in total (tf 2.9 min, torch 116 s). Its torch runs in " \
           "channels-last memory format (perf.memory_format: channels_last) would take " \
           "72 s." in lines


def test_channels_last_presets_and_the_reference_engine_pick_their_tiers() -> None:
    est = grid_cost.preset_cost(_results(SECONDS),
                                _grid({"engine": "fast", "memory_format": "channels_last"}))
    assert {g["tier"] for g in est["groups"]} == {"tf_dp_fast", "tf_plain", "torch_dp_fast_cl",
                                                  "torch_plain_cl"}
    assert est["hours_by_backend"]["torch"] == pytest.approx(72.35 / 3600)
    assert est["torch_channels_last_hours"] is None  # the preset runs channels-last already
    reference = grid_cost.preset_cost(_results(SECONDS), _grid({"engine": "reference"}))
    missing = {g["tier"]: g for g in reference["groups"] if g["hours"] is None}
    assert set(missing) == {"tf_dp_reference", "torch_dp_reference"}
    assert "tier tf_dp_reference did not run in case resnet18_pneumonia_b64" in \
        missing["tf_dp_reference"]["why"]


def test_the_tier_follows_the_mechanism_registry() -> None:
    DP_MECHANISMS.register()(ToyGaussian)  # a DP-SGD mechanism no code outside it knows
    try:
        _check_tiers(TOY)
    finally:
        DP_MECHANISMS.unregister(TOY)
    assert TOY not in DP_MECHANISMS


def _check_tiers(toy: str) -> None:
    perf = PerfSpec(engine="fast")
    noised = RunConfig(privacy=PrivacySpec(mechanism=toy, noise_multiplier=1.0))
    local = RunConfig(data=DataSpec(name="pneumoniamnist", ldp_mechanism="laplace",
                                    ldp_params={"scale": 1.0}),
                      privacy=PrivacySpec(mechanism="ldp"))
    plain = RunConfig(privacy=PrivacySpec(mechanism="none"))
    for backend in ("tf", "torch"):
        assert grid_cost.tier_of(noised, backend, perf) == (f"{backend}_dp_fast", None)
        assert grid_cost.tier_of(local, backend, perf) == (f"{backend}_plain", None)
        assert grid_cost.tier_of(plain, backend, perf) == (f"{backend}_plain", None)
    resnet = noised.replace(model=ModelSpec(name="resnet18"))
    cost = grid_cost.run_cost(_results(SECONDS), resnet, "torch", perf)
    assert (cost.tier, cost.mechanism) == ("torch_dp_fast", toy)  # no style registered
    assert cost.seconds == pytest.approx(0.48 / 64 * cost.n_train * cost.epochs)


def test_a_case_or_tier_the_bench_did_not_run_is_not_measured() -> None:
    only_cnn4 = _results({"tf_plain": 0.01}, case="cnn4_b256")
    est = grid_cost.preset_cost(only_cnn4, _grid())
    assert est["estimated_runs"] == 0 and est["hours"] is None
    assert all(g["hours"] is None for g in est["groups"])
    lines = grid_cost.section_lines([est])
    assert "- tiny-medical: no run could be estimated." in lines
    assert ("- not measured: 8 runs (resnet18; tiers tf_dp_fast, torch_dp_fast, tf_plain, "
            "torch_plain): the bench case resnet18_pneumonia_b64 did not run (this bench timed "
            "cnn4_b256; the full `dpcompare bench` times it).") in lines
    skipped = grid_cost.preset_cost(_results({**SECONDS, "torch_dp_fast": None}), _grid())
    assert skipped["estimated_runs"] == 6
    assert skipped["hours_by_backend"]["tf"] == pytest.approx(173.64 / 3600)
    assert skipped["hours"] == pytest.approx((173.64 + 28.94) / 3600)
    assert skipped["torch_channels_last_hours"] == pytest.approx(72.35 / 3600)
    text = "\n".join(grid_cost.section_lines([skipped]))
    assert "of the 6 of 8 runs that could be estimated" in text
    assert ("- not measured: 2 runs (resnet18; tiers torch_dp_fast): tier torch_dp_fast did not "
            "run in case resnet18_pneumonia_b64 (failed: MemoryError).") in text
    assert grid_cost.section_lines([]) == []


@pytest.mark.parametrize(("preset", "runs", "resnet_runs"), [
    # 2 data sets x 2 models x 6 privacy settings x 1 seed x 2 backends
    ("medical-ldp-vs-dpsgd", 48, 24),
    # 2 data sets x resnet18 x 5 privacy settings x 1 seed x 2 backends
    ("medical-ldp-vs-dpsgd-resnet18-short", 20, 20),
])
def test_the_bundled_medical_presets_expand_to_their_run_counts(
        preset: str, runs: int, resnet_runs: int) -> None:
    assert preset in grid_cost.PRICED_PRESETS
    est = grid_cost.preset_cost(_results(SECONDS), expand_grid(load_preset(preset)))
    assert est["runs"] == runs == sum(g["runs"] for g in est["groups"])
    assert sum(g["runs"] for g in est["groups"] if g["model"] == "resnet18") == resnet_runs
    assert est["estimated_runs"] == resnet_runs  # the fake results time ResNet-18 only
    assert {g["tier"] for g in est["groups"]} == {"tf_plain", "tf_dp_fast", "torch_plain",
                                                  "torch_dp_fast"}


def test_the_report_shows_the_section_from_the_results() -> None:
    stored = json.loads((ROOT / "reports" / "benchmarks" / "results.json").read_text())
    stored.pop("sweep")
    stored["preset_costs"] = command.preset_costs(stored, expand_preset)
    json.dumps(stored)  # JSON-ready
    report = render.markdown(stored, "dpcompare bench")
    section = report.split("## Cost of the medical presets here")[1].split("\n## ")[0]
    assert "**medical-ldp-vs-dpsgd** (48 runs" in section
    assert "**medical-ldp-vs-dpsgd-resnet18-short** (20 runs" in section
    assert report.index("## Reading") < report.index("## Cost of the medical presets here")
    summary = render.text_summary(stored)
    assert "estimated training time of the medical presets here" in summary


def test_a_run_is_priced_on_its_training_set_and_input_size() -> None:
    """Given the run's data (as the dry run loads it), N is its real size and the case's time
    per example is scaled by the image area (height x width) against the case's 28x28."""
    results = _results(SECONDS, case="cnn4_b256")
    results["cases"]["cnn4_b256"]["input_shape"] = [28, 28, 1]
    config = RunConfig(data=DataSpec(name="mnist5k"),
                       privacy=PrivacySpec(mechanism="dpsgd-gaussian", noise_multiplier=1.0))
    plain = grid_cost.run_cost(results, config, "tf", PerfSpec(engine="fast"))
    assert plain.n_train == 4000 and plain.scale == 1.0
    big = grid_cost.run_cost(results, config, "tf", PerfSpec(engine="fast"),
                             shape=(1500, (56, 56, 3)))
    assert big.n_train == 1500 and big.scale == pytest.approx(4.0)
    assert big.seconds == pytest.approx(0.64 / 64 * 4.0 * 1500 * config.train.epochs)
    assert grid_cost.input_size((256,)) == 256 and grid_cost.input_size((16, 16, 1)) == 256


def test_the_dry_run_prices_the_runs_to_train_from_the_committed_bench(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``dpcompare compare --preset demo --dry-run``: the 30 runs priced by hand from
    ``reports/benchmarks/results.json`` (cnn4 at batch 256 on 28x28x1, mnist5k's shape: no
    scaling; 4,000 training images x 15 epochs per run; 10 DP-SGD and 5 non-private runs per
    backend)."""
    from benchmarks.grid_cost import SECONDS_PER_HOUR, duration
    from compare.cli.main import main

    stored = json.loads((ROOT / "reports" / "benchmarks" / "results.json").read_text())
    tiers = stored["cases"]["cnn4_b256"]["variants"]
    per_example = {t: tiers[t]["seconds_per_step"] / 256 for t in tiers
                   if tiers[t].get("seconds_per_step")}
    expected = {b: 4000 * 15 * (10 * per_example[f"{b}_dp_fast"] + 5 * per_example[f"{b}_plain"])
                for b in ("tf", "torch")}
    assert main(["compare", "--preset", "demo", "--dry-run", "--out",
                 str(tmp_path / "runs")]) == 0
    lines = capsys.readouterr().out.splitlines()
    (line,) = (x for x in lines if x.startswith("estimated training time"))
    total = sum(expected.values())
    assert line.startswith(
        f"estimated training time of the 30 run(s) to train: "
        f"{duration(total / SECONDS_PER_HOUR)} (tf {duration(expected['tf'] / SECONDS_PER_HOUR)}"
        f", torch {duration(expected['torch'] / SECONDS_PER_HOUR)}), one run after another, "
        "from the step times of reports/benchmarks/results.json"), line
    assert "training only" in line and "scaled" not in line
    assert lines[-1].endswith("30 to train into " + str(tmp_path / "runs") +
                              "; all checked; nothing trained or written")


def test_a_model_the_bench_does_not_time_is_priced_by_its_committed_record() -> None:
    from compare.grid_dry_run import estimate_lines
    from dpcore.results import run_id as make_run_id

    grid = expand_grid({"name": "g", "base": {"data": {"name": "digits"},
                                              "model": {"name": "scatter-linear"},
                                              "privacy": {"mechanism": "none"}},
                        "seeds": 2, "backends": ["torch"]})
    pending = grid.runs()
    recorded = RunResult(run_id=make_run_id(pending[0][0].config.config_hash, "torch"),
                         config={}, config_hash=pending[0][0].config.config_hash,
                         backend="torch", seed=0, timing={"train_seconds": 90.0})
    lines = estimate_lines(grid, pending, lambda _c: None, {recorded.run_id: recorded},
                           _results(SECONDS, case="cnn4_b256"), Path("bench.json"))
    assert lines[0].startswith("estimated training time of the 1 of 2 run(s) to train that "
                               "could be estimated: 90 s (torch 90 s)")
    assert "1 run(s) of models the bench does not time priced by the training time of their " \
           "committed record" in lines[0]
    assert lines[1] == "  not estimated: 1 run(s): no bench case times model scatter-linear"
    assert estimate_lines(grid, pending, lambda _c: None, {}, None, None) == [
        "estimated time: not estimated: no bench results here (reports/benchmarks/results.json "
        "not found; `dpcompare bench` writes them)"]


def test_the_evaluation_of_the_runs_to_train_is_priced_by_their_committed_records() -> None:
    """Runs whose committed record measured its evaluation (timing.evaluation_seconds) add
    one line; a record without it (written before runs timed it) adds nothing."""
    from compare.grid_dry_run import evaluation_lines
    from dpcore.results import run_id as make_run_id

    grid = expand_grid({"name": "g", "base": {"data": {"name": "digits"},
                                              "privacy": {"mechanism": "none"}},
                        "seeds": 3, "backends": ["torch"]})
    pending = grid.runs()

    def record(i: int, timing: dict) -> RunResult:
        h = pending[i][0].config.config_hash
        return RunResult(run_id=make_run_id(h, "torch"), config={}, config_hash=h,
                         backend="torch", seed=i, timing=timing)

    committed = {r.run_id: r for r in (record(0, {"evaluation_seconds": 100.0}),
                                       record(1, {"evaluation_seconds": 80.0}),
                                       record(2, {"train_seconds": 9.0}))}
    assert evaluation_lines(pending, committed) == [
        "estimated evaluation time after training (faithfulness, audits) of the 2 of 3 run(s) "
        "to train whose committed record measured it: 3.0 min, from those records"]
    assert evaluation_lines(pending, {}) == []
