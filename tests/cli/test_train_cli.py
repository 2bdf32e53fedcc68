"""`dpcompare train`: options -> RunConfig, and one short run per backend writing a valid
RunResult and a checkpoint."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from compare.cli.main import build_parser, main
from compare.cli.train import build_config
from dpcore.results import read_result
from dpcore.trained import read_checkpoint

# cnn4 needs >= 16x16 inputs; sklearn's digits are 8x8, so the runs resize them.
DIGITS_ARGS = ["--dataset", "digits", "--model", "cnn4", "--batch-size", "64", "--lr", "0.1",
               "--set", "data.image_size=16"]


def parse(*args: str) -> argparse.Namespace:
    return build_parser().parse_args(["train", "--backend", "torch", *args])


def test_options_build_the_config(tmp_path: Path) -> None:
    config = build_config(parse("--dataset", "digits", "--epochs", "2", "--batch-size", "32",
                                "--noise-multiplier", "1.5", "--max-grad-norm", "0.5",
                                "--seed", "4", "--set", "train.optimizer=adam",
                                "--set", "privacy.delta=1e-6"))
    assert config.data.name == "digits" and config.train.epochs == 2.0
    assert config.privacy.mechanism == "dpsgd-gaussian"
    assert config.privacy.noise_multiplier == 1.5 and config.privacy.max_grad_norm == 0.5
    assert config.privacy.delta == 1e-6 and config.train.optimizer == "adam"
    assert config.seed == 4
    from compare.cli.train import build_perf

    assert build_perf(parse("--dataset", "digits", "--epochs", "1")).engine is None
    assert build_perf(parse("--dataset", "digits", "--epochs", "1", "--engine", "fast")
                      ).engine == "fast"
    assert build_perf(parse("--dataset", "digits", "--epochs", "1")).cache_fixed_front is True
    assert build_perf(parse("--dataset", "digits", "--epochs", "1", "--no-front-cache")
                      ).cache_fixed_front is False

    path = tmp_path / "run.yaml"
    path.write_text("privacy: {mechanism: dpsgd-laplace, target_epsilon: 3}\n"
                    "train: {epochs: null, steps: 7}\n")
    from_file = build_config(parse("--config", str(path), "--noise-multiplier", "2"))
    assert from_file.privacy.mechanism == "dpsgd-laplace"  # kept: noise flag fits Laplace too
    assert from_file.privacy.noise_multiplier == 2.0 and from_file.privacy.target_epsilon is None
    assert from_file.train.steps == 7
    plain = build_config(parse("--config", str(path), "--mechanism", "none"))
    assert plain.privacy.mechanism == "none" and plain.privacy.target_epsilon is None
    target = build_config(parse("--epsilon", "2", "--steps", "10"))
    assert target.privacy.target_epsilon == 2.0 and target.train.steps == 10


def test_augment_option_sets_the_augment_section() -> None:
    base = ("--dataset", "digits", "--epochs", "1")
    assert "augment" not in build_config(parse(*base)).to_dict()
    both = build_config(parse(*base, "--augment", "hflip,crop4"))
    assert both.to_dict()["augment"] == {"hflip": True, "crop_padding": 4}
    same = build_config(parse(*base, "--set", "augment.hflip=true",
                              "--set", "augment.crop_padding=4"))
    assert same.config_hash == both.config_hash
    assert build_config(parse(*base, "--augment", "crop2")).augment.hflip is False
    # the flag states the whole augmentation; a later --set still wins
    assert build_config(parse(*base, "--augment", "none")).augment.active is False
    mixed = build_config(parse(*base, "--augment", "hflip", "--set", "augment.crop_padding=1"))
    assert mixed.augment.hflip and mixed.augment.crop_padding == 1


@pytest.mark.parametrize(("value", "fragment"), [
    ("vflip", "--augment token 'vflip' is not known; valid: comma-separated hflip and cropN"),
    ("crop", "--augment token 'crop' is not known"),
    ("crop-2", "--augment token 'crop-2' is not known"),
    ("hflip,hflip", "gives hflip twice"),
    (",", "names no augmentation"),
])
def test_a_bad_augment_token_is_one_line_and_exit_2(
        value: str, fragment: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["train", "--backend", "torch", "--dataset", "digits", "--augment", value])
    err = capsys.readouterr().err
    assert code == 2 and fragment in err and len(err.strip().splitlines()) == 1


def test_bad_value_is_one_line_and_exit_2(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["train", "--backend", "tf", "--dataset", "digits", "--batch-size", "0",
                 "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "batch_size" in err and "Traceback" not in err


@pytest.mark.parametrize("backend", ["tf", "torch"])
def test_train_writes_result_and_checkpoint(backend: str, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["train", "--backend", backend, *DIGITS_ARGS, "--epochs", "1",
                 "--noise-multiplier", "1.0", "--engine", "fast", "--out", str(tmp_path)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    runs = list((tmp_path / "runs").glob(f"*-{backend}"))
    assert len(runs) == 1
    result = read_result(runs[0] / "result.json")
    assert result is not None and result.status == "finished" and result.backend == backend
    assert result.privacy["mechanism"] == "dpsgd-gaussian"
    assert result.privacy["noise_multiplier"] == 1.0
    assert len(result.history) == 1 and result.history[0]["epsilon_spent"] > 0
    assert result.privacy["library_epsilon"]
    assert result.perf["engine"] == "fast"
    if backend == "tf":
        assert result.perf["engine_used"] == "fast"
    # Grad-CAM faithfulness on the fixed seeded test subset (digits has 360 test images)
    assert result.faithfulness is not None and result.faithfulness["n"] == 360
    assert 0.0 <= result.faithfulness["average_drop"] <= 100.0
    weights, meta = read_checkpoint(runs[0] / "checkpoint.npz")
    assert meta["backend"] == backend and "conv1.kernel" in weights
    assert tmp_path / result.checkpoint == runs[0] / "checkpoint.npz"
    # stderr is not a terminal here: no bar, one line per epoch instead
    assert "epoch 1/1" in captured.err and "loss" in captured.err and "eps" in captured.err
    assert "status" in captured.out and "result" in captured.out


def test_target_epsilon_is_calibrated_and_quiet_prints_nothing_on_stderr(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["train", "--backend", "torch", *DIGITS_ARGS, "--steps", "3", "--epsilon", "2",
                 "--out", str(tmp_path), "--quiet", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "epoch" not in captured.err
    result = json.loads(captured.out)
    assert result["privacy"]["calibrated"] is True
    assert result["privacy"]["epsilon_rdp"] == pytest.approx(2.0, rel=1e-3)


@pytest.mark.parametrize("backend", ["tf", "torch"])
def test_calibrate_with_prv_reaches_the_target_by_opacus_prv(
        backend: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Opacus's PRV calibrates --epsilon on either backend (registered by the torch backend);
    the noise it picks gives a PRV epsilon at most the target and within 1 % of it."""
    from torchpipe.accounting import opacus_prv_epsilon

    code = main(["train", "--backend", backend, *DIGITS_ARGS, "--epochs", "1", "--epsilon", "2",
                 "--calibrate-with", "prv", "--out", str(tmp_path), "--quiet", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    result = json.loads(captured.out)
    privacy = result["privacy"]
    assert privacy["calibrated"] is True
    assert result["recipe"]["factors"]["calibration_accountant"] == "prv"
    assert result["recipe"]["effective_factors"]["calibration_accountant"] == "prv"
    prv = opacus_prv_epsilon(privacy["noise_multiplier"], privacy["sampling_rate"],
                             privacy["steps"], privacy["delta"])
    assert prv is not None and 0.99 * 2.0 <= prv <= 2.0
    # PRV is tighter than RDP: the RDP epsilon of that noise is above the target
    assert privacy["epsilon_rdp"] > 2.0


def test_calibrate_with_prv_refuses_laplace_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["train", "--backend", "tf", *DIGITS_ARGS, "--epochs", "1", "--epsilon", "2",
                 "--mechanism", "laplace", "--calibrate-with", "prv", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    # the one accountant that knows Laplace is offered (rdp refuses subsampled Laplace too)
    assert code == 2 and "'prv'" in err and err.rstrip().endswith("valid: pld")
    assert "Traceback" not in err and not [p for p in tmp_path.rglob("*") if p.is_file()]


def test_unclipped_local_dp_run_records_why_faithfulness_was_skipped(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["train", "--backend", "torch", *DIGITS_ARGS, "--steps", "2",
                 "--mechanism", "ldp", "--set", "data.ldp_mechanism=laplace",
                 "--set", "data.ldp_params={scale: 2.0}", "--faithfulness-subset", "16",
                 "--quiet", "--out", str(tmp_path)])
    assert code == 0, capsys.readouterr().err
    (run,) = (tmp_path / "runs").glob("*-torch")
    result = read_result(run / "result.json")
    assert result is not None and result.status == "finished"
    assert result.faithfulness is None
    assert "outside [0, 1]" in result.metrics["faithfulness_note"]


def test_the_train_cli_passes_route_choice() -> None:
    from compare.cli.main import build_parser
    from compare.cli.train import build_perf

    args = build_parser().parse_args(["train", "--backend", "torch", "--route-choice", "measure"])
    assert build_perf(args).route_choice == "measure"
    assert build_perf(build_parser().parse_args(["train", "--backend", "tf"])).route_choice == \
        "rule"


@pytest.mark.parametrize(("args", "fragment"), [
    ((), "noise key seed (derived from the seed and the config hash)"),
    (("--noise-key", "secret"), "noise key secret (OS entropy, kept nowhere; not "
                                "bit-reproducible)"),
])
def test_the_start_line_says_which_noise_key(args: tuple[str, ...], fragment: str,
                                             tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--backend", "torch", "--dataset", "digits", "--steps", "2",
                 "--epsilon", "1", *args, "--dry-run", "--out", str(tmp_path / "o")]) == 0
    assert fragment in capsys.readouterr().out
    assert build_config(parse("--dataset", "digits", "--epsilon", "1", *args)
                        ).privacy.noise_key == (args[1] if args else None)


def test_a_folder_of_the_user_s_images_refuses_shared_noise_by_default(tmp_path: Path) -> None:
    """``imagefolder:`` defaults to a secret key, which shared noise cannot have."""
    from dpcore.errors import ConfigError

    with pytest.raises(ConfigError, match="noise_source='shared'"):
        build_config(parse("--dataset", f"imagefolder:{tmp_path}", "--epsilon", "1",
                           "--set", "privacy.noise_source=shared"))


def test_the_summary_names_the_noise_key_and_the_rdp_figure_beside_a_pld_one() -> None:
    from compare.cli.train import privacy_figure_rows

    result = {"privacy": {"epsilon_claimed": 3.4, "epsilon_proved": 62.24,
                          "epsilon_proved_rdp": 65.42, "epsilon_proved_reason": "shuffled",
                          "noise_key": "secret"}, "audit": None}
    rows = dict(privacy_figure_rows(result))
    assert rows["  (by RDP)"].startswith("65.4200")
    assert rows["noise key"].startswith("secret") and "not bit-reproducible" in rows["noise key"]
