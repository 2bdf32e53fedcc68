"""The command line (``compare.cli.main``) before anything trains: ``--version``, backend
aliases, names checked with did-you-mean before the start line, a grid checked whole, a dry
run for every command, one mechanism vocabulary, and a refused ``train`` that writes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from compare import api
from compare.cli.main import main
from dpcore.config import RunConfig
from dpcore.errors import ConfigError

PLAIN_GRID = {"name": "plain", "base": {"data": {"name": "digits"}, "model": {"name": "cnn4"}},
              "axes": {"privacy": [
                  {"label": "eps=8", "privacy": {"mechanism": "gaussian",
                                                 "target_epsilon": 8}},
                  {"label": "np", "privacy": {"mechanism": "none"}}]}}


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.startswith("dpcompare ")


@pytest.mark.parametrize(("alias", "backend"), [("opacus", "torch"), ("pytorch", "torch"),
                                                 ("tensorflow", "tf"), ("tf-privacy", "tf")])
def test_backend_aliases(alias: str, backend: str, tmp_path: Path,
                         capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["train", "--backend", alias, "--dataset", "digits", "--steps", "2",
                   "--mechanism", "none", "--dry-run", "--out", str(tmp_path / "o")])
    assert status == 0
    assert capsys.readouterr().out.startswith(f"{backend}: cnn4 on digits")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(("args", "fragment"), [
    (["--dataset", "mnsit"], "did you mean 'mnist'?"),
    (["--dataset", "MNIST5k"], "did you mean 'mnist5k'?"),
    (["--dataset", "digits", "--model", "cnn5"], "did you mean 'cnn4'?"),
    (["--dataset", "digits", "--set", "train.learning_rate=1", "--set", "model.nam=x"],
     "model.nam (did you mean 'name'?)"),
])
def test_typos_are_named_before_the_start_line(args: list[str], fragment: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["train", "--backend", "torch", "--epsilon", "8", "--out",
                   str(tmp_path / "o"), *args])
    captured = capsys.readouterr()
    assert status == 2 and fragment in captured.err
    assert "torch: " not in captured.err + captured.out  # no start line
    assert not (tmp_path / "o").exists()


def test_every_unknown_key_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as info:
        RunConfig.from_dict({"foo": 1, "train": {"learning_rate": 1, "epoch": 2},
                             "model": {"nam": "cnn4"}})
    message = str(info.value)
    for key in ("foo", "train.learning_rate", "train.epoch", "model.nam"):
        assert key in message
    assert "\n" not in message


def test_a_file_may_say_gaussian_as_the_command_line_does() -> None:
    short = RunConfig.from_dict({"privacy": {"mechanism": "gaussian", "noise_multiplier": 1}})
    full = RunConfig.from_dict({"privacy": {"mechanism": "dpsgd-gaussian",
                                            "noise_multiplier": 1}})
    assert short == full and short.config_hash == full.config_hash


def test_preset_typo_suggests_the_preset(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "--preset", "demoo"]) == 2
    assert "did you mean 'demo'?" in capsys.readouterr().err


def test_a_grid_is_checked_whole_before_its_first_run(tmp_path: Path) -> None:
    """An image too small for the model (digits at 8x8) and a target no noise reaches are
    found before any run trains; nothing is written."""
    grid = {**PLAIN_GRID, "base": {"data": {"name": "digits", "image_size": 8},
                                   "model": {"name": "cnn4"}}}
    with pytest.raises(ConfigError, match=r"before any training.*too small for model 'cnn4'"):
        api.compare(grid, out=tmp_path / "runs", progress=False)
    unreachable = {**PLAIN_GRID, "axes": {"privacy": [
        {"label": "huge", "privacy": {"mechanism": "gaussian", "target_epsilon": 1e12}}]}}
    with pytest.raises(ConfigError, match=r"huge: target_epsilon=1e\+12 needs a noise"):
        api.compare(unreachable, out=tmp_path / "runs", progress=False)
    assert not (tmp_path / "runs").exists()


def test_compare_dry_run_lists_the_runs_with_their_settings(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    grid_file = tmp_path / "grid.yaml"
    import yaml

    grid_file.write_text(yaml.safe_dump(PLAIN_GRID), encoding="utf-8")
    assert main(["compare", "--config", str(grid_file), "--backends", "opacus",
                 "--out", str(tmp_path / "runs"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "would run torch eps=8 seed 0" in out and "momentum 0.9 (default)" in out
    assert "2 to train" in out and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("command", [
    ["epsilon", "--n", "1000", "--batch-size", "10", "--noise-multiplier", "1", "--steps",
     "5"],
    ["datasets"],
])
def test_every_command_has_a_dry_run(command: list[str],
                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*command, "--dry-run"]) == 0
    assert "dry run" in capsys.readouterr().out


def test_ldp_states_the_epsilon_per_image_train_uses(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """digits: ``train`` upscales to 16x16 by default, and ``ldp`` now states the epsilon of
    those images (Laplace b=1 per pixel in [0, 1]: 256 pixels -> epsilon 256), not of 8x8."""
    import json

    assert main(["ldp", "--dataset", "digits", "--mechanism", "laplace", "--scale", "1",
                 "--train-limit", "20", "--test-limit", "10", "--montage-rows", "0",
                 "--out", str(tmp_path / "ldp"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["image_shape"] == [16, 16, 1]
    assert result["epsilon"]["per_image"]["epsilon"] == pytest.approx(256.0)


def test_medmnist_files_saved_by_the_medmnist_package_are_found(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``pip install medmnist`` saves ``~/.medmnist/pneumoniamnist.npz``: used when the data
    root lacks the file."""
    from dpcore.config import DataSpec
    from dpcore.data import load_dataset
    from tests.dpcore.data_writers import isolate, write_medmnist

    isolate(monkeypatch, tmp_path)
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    arrays = write_medmnist(home / ".medmnist" / "pneumoniamnist.npz")
    root = tmp_path / "root"
    root.mkdir()
    dataset = load_dataset(DataSpec(name="pneumoniamnist"), root)
    assert len(dataset.x_train) == len(arrays["train_images"])


@pytest.mark.parametrize("args", [
    ["--epsilon", "1e9"],  # no noise reaches it: refused by the privacy plan
    ["--set", "data.image_size=8"],  # too small for cnn4: refused by the shape check
])
def test_a_refused_train_writes_nothing(args: list[str], tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code = main(["train", "--backend", "torch", "--dataset", "digits", "--model", "cnn4",
                 "--out", str(out), *args])
    assert code == 2 and len(capsys.readouterr().err.strip().splitlines()) == 1
    assert not out.exists()
