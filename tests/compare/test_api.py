"""``compare.api`` against the CLI for the same inputs, against the stored RunResults, and its
exceptions (ConfigError / DataError with the CLI's one-line messages, never SystemExit).

The smoke grid (4 tiny runs) is trained once for the module, by the CLI; the API then reads,
resumes, reports and loads those runs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from compare import api
from compare.cli.main import main
from dpcore.errors import ConfigError, DataError, DpCompareError
from dpcore.io import json_safe

SMOKE_RUNS = 4


def run_cli(capsys: pytest.CaptureFixture[str], *args: Any) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def stored(out: Path) -> dict[str, dict[str, Any]]:
    """Every stored result.json of ``out`` as raw JSON, by run id."""
    return {p.parent.name: json.loads(p.read_text()) for p in (out / "runs").glob("*/result.json")}


def same(value: Any, expected: Any) -> bool:
    """A table cell equals the stored JSON value (JSON null = NaN/None in the table)."""
    if expected is None:
        return value is None or (isinstance(value, float) and math.isnan(value))
    if isinstance(expected, float):
        return float(value) == expected
    return value == expected


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The smoke grid, trained once by ``dpcompare compare``."""
    out = tmp_path_factory.mktemp("api") / "smoke"
    assert main(["compare", "--preset", "smoke", "--out", str(out), "--no-report",
                 "--quiet"]) == 0
    return out


# --- results, history, faithfulness, compare ---------------------------------------------

def test_results_has_one_row_per_stored_run_with_its_values(smoke: Path) -> None:
    records = stored(smoke)
    df = api.results(smoke)
    assert len(records) == SMOKE_RUNS and len(df) == SMOKE_RUNS
    assert list(df["run_id"]) == sorted(records)
    for _, row in df.iterrows():
        raw = records[row["run_id"]]
        assert row["run_dir"] == str(smoke / "runs" / row["run_id"])
        for column, expected in [
            ("backend", raw["backend"]), ("seed", raw["seed"]), ("status", raw["status"]),
            ("config_hash", raw["config_hash"]), ("grid", "smoke"),
            ("data.name", raw["config"]["data"]["name"]),
            ("data.image_size", raw["config"]["data"]["image_size"]),
            ("model.name", raw["config"]["model"]["name"]),
            ("privacy.mechanism", raw["config"]["privacy"]["mechanism"]),
            ("privacy.noise_multiplier", raw["config"]["privacy"]["noise_multiplier"]),
            ("privacy.target_epsilon", raw["config"]["privacy"]["target_epsilon"]),
            ("train.steps", raw["config"]["train"]["steps"]),
            ("train.lr", raw["config"]["train"]["lr"]),
            ("label.privacy", raw["labels"]["privacy"]),
            ("accuracy", raw["metrics"]["accuracy"]), ("auc", raw["metrics"]["auc"]),
            ("loss", raw["metrics"]["loss"]),
            ("gaps.accuracy", raw["metrics"]["gaps"]["accuracy"]),
            ("epsilon_rdp", raw["privacy"]["epsilon_rdp"]),
            ("epsilon_pld", raw["privacy"]["epsilon_pld"]),
            ("noise_multiplier", raw["privacy"]["noise_multiplier"]),
            ("delta", raw["privacy"]["delta"]), ("steps", raw["privacy"]["steps"]),
            ("sampling_rate", raw["privacy"]["sampling_rate"]),
            ("timing.total_seconds", raw["timing"]["total_seconds"]),
            ("timing.examples_per_second", raw["timing"]["examples_per_second"]),
            ("dataset.n_train", raw["dataset"]["n_train"]),
            ("versions.numpy", raw["versions"]["numpy"]),
        ]:
            assert same(row[column], expected), (row["run_id"], column, row[column], expected)
        library = raw["privacy"].get("library_epsilon") or {}
        for name in ("opacus_rdp", "opacus_prv", "tf_privacy"):
            assert same(row[f"epsilon_{name}"], library.get(name)), (row["run_id"], name)
        if raw["privacy"]["mechanism"] == "none":
            assert row["epsilon"] == math.inf
        else:
            assert row["epsilon"] == raw["privacy"]["epsilon_rdp"]
            assert row["epsilon_" + ("tf_privacy" if raw["backend"] == "tf"
                                     else "opacus_prv")] > 0
        seconds = raw["timing"]["epoch_seconds"]
        expected_mean = np.mean(seconds[1:] if len(seconds) > 1 else seconds)
        assert row["timing.epoch_seconds_mean"] == pytest.approx(expected_mean)


def test_history_has_one_row_per_run_and_epoch(smoke: Path) -> None:
    records = stored(smoke)
    history = api.history(smoke)
    assert len(history) == sum(len(r["history"]) for r in records.values())
    for _, row in history.iterrows():
        record = records[row["run_id"]]["history"][int(row["epoch"]) - 1]
        for key in ("epoch", "step", "loss", "test_accuracy", "epsilon_spent"):
            assert same(row[key], record[key]), (row["run_id"], key)
        assert row["backend"] == records[row["run_id"]]["backend"]


def test_faithfulness_has_no_rows_when_the_grid_skips_it(smoke: Path) -> None:
    table = api.faithfulness(smoke)  # the smoke grid sets evaluation.faithfulness: false
    assert len(table) == 0 and "run_id" in table.columns


def test_api_compare_resumes_the_grid_the_cli_ran(smoke: Path) -> None:
    """Same preset through the API: the same runs (config hash + backend), all skipped."""
    before = stored(smoke)
    store = api.compare("smoke", out=smoke, progress=False)
    assert isinstance(store, api.Store) and store.root == smoke
    assert store.outcome is not None
    assert store.outcome.ran == [] and sorted(store.outcome.skipped) == sorted(before)
    assert stored(smoke) == before
    assert store.results().equals(api.results(smoke))


def test_an_interim_report_trains_nothing_and_says_what_is_missing(
        smoke: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``--no-train``: the report of a long grid's runs stored so far, its header naming the
    runs not stored yet; nothing is trained."""
    import shutil

    import compare.cellrun as cellrun

    partial = tmp_path / "partial"
    shutil.copytree(smoke, partial)
    missing = sorted(stored(smoke))[0]
    shutil.rmtree(partial / "runs" / missing)

    def no_training(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("train=False trained a run")
    monkeypatch.setattr(cellrun, "run_one", no_training)
    store = api.compare("smoke", out=partial, report=tmp_path / "api", progress=False,
                        train=False)
    assert store.outcome is not None and store.outcome.not_trained == [missing]
    assert store.outcome.ran == [] and not (partial / "runs" / missing).exists()
    header = (tmp_path / "api" / "report.md").read_text().split("## ")[0]
    assert "3 finished; **1 of the grid's 4 runs are not stored yet: an interim report**" \
        in header
    code, _out, err = run_cli(capsys, "compare", "--preset", "smoke", "--out", partial,
                              "--no-train", "--report", tmp_path / "cli")
    assert code == 0, err
    assert (tmp_path / "cli" / "report.md").read_text().split("## ")[0].count(
        "not stored yet") == 1
    code, _out, err = run_cli(capsys, "compare", "--preset", "smoke", "--out", partial,
                              "--no-train", "--no-report")
    assert code == 2 and "--no-train with --no-report does nothing" in err
    # a complete grid's report says nothing of the kind
    api.compare("smoke", out=smoke, report=tmp_path / "full", progress=False, train=False)
    assert "not stored yet" not in (tmp_path / "full" / "report.md").read_text()


def test_report_equals_the_cli_report(smoke: Path, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    path = api.report(smoke, tmp_path / "api")
    code, stdout, err = run_cli(capsys, "report", smoke, "--out", tmp_path / "cli")
    assert code == 0, err
    assert path == tmp_path / "api" / "report.md" and path.is_file()
    assert f"report: {tmp_path / 'cli' / 'report.md'}" in stdout
    api_csv = sorted(p.name for p in (tmp_path / "api").glob("*.csv"))
    assert api_csv and api_csv == sorted(p.name for p in (tmp_path / "cli").glob("*.csv"))
    for name in api_csv:
        assert (tmp_path / "api" / name).read_text() == (tmp_path / "cli" / name).read_text()


# --- models -----------------------------------------------------------------------------------

def test_load_model_into_both_frameworks(smoke: Path) -> None:
    df = api.results(smoke)
    run = df[(df["backend"] == "tf") & (df["privacy.mechanism"] == "dpsgd-gaussian")].iloc[0]
    own = api.load_model(run["run_dir"])
    other = api.load_model(Path(run["run_dir"]) / "checkpoint.npz", backend="torch")
    assert own.backend == "tf" and other.backend == "torch"
    data = api.load_data(run["run_dir"])
    assert data.fingerprint == run["dataset.fingerprint"]
    p_own = api.predict_proba(own, data.x_test)
    p_other = api.predict_proba(other, data.x_test)
    # The stored accuracy is the trained model's on this test split.
    assert float((p_own.argmax(axis=1) == data.y_test).mean()) == pytest.approx(run["accuracy"])
    np.testing.assert_allclose(p_other, p_own, atol=1e-4)
    x = data.x_test[:3]
    for model in (own, other):
        maps = api.gradcam(model, x)
        assert maps.shape == (3, 16, 16) and maps.min() >= 0 and maps.max() <= 1


# --- accounting ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("kwargs", "cli_args"), [
    ({"n": 60000, "batch_size": 1024, "sampling_rate": 0.0169, "noise_multiplier": 1.0,
      "epochs": 15, "delta": 1e-5},
     ["--n", 60000, "--batch-size", 1024, "--sampling-rate", 0.0169, "--noise-multiplier", 1.0,
      "--epochs", 15, "--delta", 1e-5]),
    ({"n": 1000, "batch_size": 10, "noise_multiplier": 5.0, "steps": 20,
      "mechanism": "laplace"},
     ["--n", 1000, "--batch-size", 10, "--noise-multiplier", 5, "--steps", 20,
      "--mechanism", "laplace"]),
    ({"n": 1000, "batch_size": 50, "noise_multiplier": 0.0, "epochs": 3, "library": False},
     ["--n", 1000, "--batch-size", 50, "--noise-multiplier", 0, "--epochs", 3, "--no-library"]),
])
def test_epsilon_equals_cli_json(kwargs: dict[str, Any], cli_args: list[Any],
                                 capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, err = run_cli(capsys, "epsilon", *cli_args, "--json")
    assert code == 0, err
    figures = api.epsilon(**kwargs)
    assert json_safe(figures) == json.loads(stdout)
    assert not figures["calibrated"]


def test_calibrate_equals_cli_target_epsilon(capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, err = run_cli(capsys, "epsilon", "--n", 60000, "--batch-size", 256,
                                "--target-epsilon", 1, "--steps", 500, "--json")
    assert code == 0, err
    figures = api.calibrate(n=60000, batch_size=256, target_epsilon=1.0, steps=500)
    assert json_safe(figures) == json.loads(stdout)
    assert figures["calibrated"] and figures["epsilon"]["rdp"] == pytest.approx(1.0, rel=0.01)


# --- training -----------------------------------------------------------------------------------

def test_train_equals_cli_train(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = {"data": {"name": "digits", "image_size": 16}, "model": {"name": "cnn4"},
              "privacy": {"mechanism": "dpsgd-gaussian", "noise_multiplier": 1.0},
              "train": {"steps": 3, "epochs": None, "batch_size": 64, "lr": 0.1}}
    lines: list[str] = []
    result = api.train(config, "torch", out=tmp_path / "api", faithfulness_subset=16,
                       log=lines.append)
    code, stdout, err = run_cli(
        capsys, "train", "--backend", "torch", "--dataset", "digits", "--model", "cnn4",
        "--steps", 3, "--batch-size", 64, "--lr", 0.1, "--noise-multiplier", 1,
        "--set", "data.image_size=16", "--faithfulness-subset", 16, "--out", tmp_path / "cli",
        "--quiet", "--json")
    assert code == 0, err
    cli = json.loads(stdout)
    ours = json_safe(result.to_dict())
    assert ours["config_hash"] == cli["config_hash"] and ours["run_id"] == cli["run_id"]
    for key in ("config", "metrics", "privacy", "faithfulness", "dataset", "status",
                "checkpoint", "defaults"):
        assert ours[key] == cli[key], key
    # the record says which values came from the defaults; the RunConfig is at hand
    assert ours["defaults"]["train.momentum"] == 0.9 and "train.lr" not in ours["defaults"]
    assert result.run_config == api.as_config(result.config)
    assert result.run_config.train.momentum == 0.9
    assert [{k: v for k, v in r.items() if "seconds" not in k} for r in ours["history"]] == \
        [{k: v for k, v in r.items() if "seconds" not in k} for r in cli["history"]]
    assert lines[0].startswith("torch: cnn4 on digits") and lines[1].startswith("epoch 1/")
    # what was stored is what was returned, and faithfulness() reads it
    assert stored(tmp_path / "api")[result.run_id]["metrics"] == ours["metrics"]
    table = api.faithfulness(tmp_path / "api")
    assert len(table) == 1
    for key in ("average_drop", "increase_in_confidence", "masked_score"):
        assert table.loc[0, key] == pytest.approx(result.faithfulness[key])
    assert api.load_model(tmp_path / "api" / "runs" / result.run_id).backend == "torch"


# --- exceptions ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("call", "error", "fragments"), [
    (lambda: api.epsilon(n=100, batch_size=200, noise_multiplier=1, epochs=1), ConfigError,
     ["batch_size=200 is not valid", "valid: 1..100"]),
    (lambda: api.epsilon(n=100, batch_size=10, noise_multiplier=1, epochs=1, delta=1.0),
     ConfigError, ["delta=1.0", "(0, 1)"]),
    (lambda: api.calibrate(n=100, batch_size=10, target_epsilon=-1, epochs=1), ConfigError,
     ["target_epsilon=-1"]),
    (lambda: api.epsilon(n=100, batch_size=10, noise_multiplier=math.inf, epochs=1),
     ConfigError, ["noise_multiplier=inf", "finite"]),
    (lambda: api.epsilon(n=100, batch_size=10, noise_multiplier=1, epochs=1,
                         mechanism="cauchy"), ConfigError, ["mechanism='cauchy'",
                                                            "valid: gaussian, laplace"]),
    (lambda: api.epsilon(n=100, batch_size=10, noise_multiplier=1, epochs=1, steps=3),
     ConfigError, ["exactly one of epochs and steps"]),
    (lambda: api.train({"data": {"name": "digits"}, "bogus": 1}, "torch"), ConfigError,
     ["bogus"]),
    (lambda: api.train({"data": {"name": "digits"}}, "jax"), ConfigError,
     ["backend 'jax'", "valid: tf, torch"]),
    (lambda: api.train({"data": {"name": "digits"}}, "torch", faithfulness_subset=-1),
     ConfigError, ["faithfulness_subset=-1", "valid: an integer >= 0"]),
    (lambda: api.load_model("no/such/run"), DataError, ["no/such/run", "holds no checkpoint"]),
    (lambda: api.compare("smoke", backends=["jax"]), ConfigError,
     ["backend 'jax'", "valid: tf, torch"]),
    (lambda: api.compare("smoke", backends=[]), ConfigError, ["backends=[] is empty"]),
    (lambda: api.compare("smoke", seeds=0), ConfigError, ["seeds=0"]),
    (lambda: api.compare(42), ConfigError, ["a grid of type int"]),  # type: ignore[arg-type]
])
def test_bad_input_raises_one_line_errors(call: Any, error: type[Exception],
                                          fragments: list[str]) -> None:
    with pytest.raises(error) as info:
        call()
    message = str(info.value)
    assert len(message.splitlines()) == 1
    assert all(fragment in message for fragment in fragments), message


def test_epsilon_errors_are_the_cli_messages_with_python_names(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError) as info:
        api.epsilon(n=100, batch_size=200, noise_multiplier=1, epochs=1)
    code, _, err = run_cli(capsys, "epsilon", "--n", 100, "--batch-size", 200,
                           "--noise-multiplier", 1, "--epochs", 1)
    assert code == 2
    assert err.strip() == f"dpcompare epsilon: error: {info.value}".replace(
        "batch_size=", "--batch-size=")


def test_compare_errors_equal_the_cli_and_write_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    cases = [
        ({"data_dir": tmp_path / "nowhere"}, ["--data-dir", tmp_path / "nowhere"], DataError),
        ({"overrides": ["privacy.delta=7"]}, ["--set", "privacy.delta=7"], ConfigError),
    ]
    for kwargs, cli_args, error in cases:
        with pytest.raises(error) as info:
            api.compare("smoke", out=out, progress=False, **kwargs)
        code, _, err = run_cli(capsys, "compare", "--preset", "smoke", "--out", out,
                               "--no-report", "--quiet", *cli_args)
        assert code == 2 and err.strip() == f"dpcompare compare: error: {info.value}"
    with pytest.raises(ConfigError) as info:
        api.compare("no-such-preset", out=out)
    code, _, err = run_cli(capsys, "compare", "--preset", "no-such-preset", "--out", out)
    assert code == 2 and err.strip() == f"dpcompare compare: error: {info.value}"
    assert "valid:" in str(info.value) and "smoke" in str(info.value)
    with pytest.raises(ConfigError, match=r"executor='dask' is not valid; valid: local, ray"):
        api.compare("smoke", out=out, executor="dask")
    with pytest.raises(ConfigError, match=r"--ray-address only apply to --executor ray"):
        api.compare("smoke", out=out, ray_address="auto")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ConfigError, match="is a file"):
        api.compare("smoke", out=out, report=blocker / "rep", progress=False)
    assert not out.exists(), "nothing may be written before the checks"


def test_reading_a_folder_without_runs(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty" / "runs").mkdir(parents=True)
    for reader in (api.results, api.history, api.faithfulness):
        with pytest.raises(DataError, match="holds no runs"):
            reader(tmp_path / "empty")
    with pytest.raises(DataError) as info:
        api.report(tmp_path / "empty", tmp_path / "rep")
    code, _, err = run_cli(capsys, "report", tmp_path / "empty", "--out", tmp_path / "rep2")
    assert code == 2 and err.strip() == f"dpcompare report: error: {info.value}"
    assert not (tmp_path / "rep").exists() and not (tmp_path / "rep2").exists()


def test_load_model_rejects_an_unknown_backend(smoke: Path) -> None:
    run_dir = api.results(smoke).loc[0, "run_dir"]
    with pytest.raises(ConfigError, match=r"backend 'jax' is not known; valid: tf, torch"):
        api.load_model(run_dir, backend="jax")
    assert issubclass(ConfigError, DpCompareError) and issubclass(DataError, DpCompareError)


def test_datasets_equals_cli_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, err = run_cli(capsys, "datasets", "--json")
    assert code == 0, err
    table = api.datasets()
    rows = json.loads(stdout)["datasets"]
    assert list(table["name"]) == [row["name"] for row in rows]
    assert list(table["status"]) == [row["status"] for row in rows]
    assert {"digits", "mnist5k"} <= set(table["name"])


def test_config_from_a_mapping_a_file_or_a_run_folder(smoke: Path, tmp_path: Path) -> None:
    import yaml

    partial = {"data": {"name": "digits", "image_size": 16}, "train": {"steps": 3,
                                                                       "epochs": None}}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(partial))
    assert api.as_config(path) == api.as_config(partial) == api.as_config(api.as_config(path))
    row = api.results(smoke).iloc[0]
    assert api.as_config(row["run_dir"]).config_hash == row["config_hash"]
    with pytest.raises(ConfigError, match="does not exist"):
        api.as_config(tmp_path / "absent.yaml")
