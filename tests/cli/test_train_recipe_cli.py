"""`dpcompare train --recipe library` end to end on both backends (tiny data set), and the
bad-input rule of the CLI: one line on stderr, exit 2, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from compare.cli.main import main
from dpcore.results import read_result

pytest.importorskip("tensorflow")
pytest.importorskip("torch")
pytest.importorskip("opacus")

DIGITS = ["--dataset", "digits", "--model", "cnn4", "--batch-size", "64", "--lr", "0.1",
          "--set", "data.image_size=16", "--set", "data.train_limit=320",
          "--set", "data.test_limit=100", "--epochs", "2", "--noise-multiplier", "1.0",
          "--faithfulness-subset", "0", "--quiet"]


@pytest.mark.parametrize(("backend", "sampling", "jacobian", "trainer", "own_key", "claim"), [
    ("tf", "shuffle", "64", "VectorizedDPKerasSGDOptimizer via model.fit",
     "tf_privacy_compute_dp_sgd_privacy", "claimed, not proved"),
    ("tf", "shuffle", None, "DPKerasSGDOptimizer (gradient_accumulation_steps=4) via model.fit",
     "tf_privacy_compute_dp_sgd_privacy", "claimed, not proved"),
    ("torch", "poisson", None, "PrivacyEngine.make_private",
     "opacus_prv (PrivacyEngine.accountant)", "proved"),
])
def test_train_recipe_library_end_to_end(tmp_path: Path, backend: str, sampling: str,
                                         jacobian: str | None, trainer: str, own_key: str,
                                         claim: str) -> None:
    """Batch 64: on tf the whole batch in one TF Privacy Jacobian (the vectorised optimizer),
    or by default 4 accumulated Jacobians of 16 (DPKerasSGDOptimizer)."""
    extra = [] if jacobian is None else ["--library-jacobian-batch-size", jacobian]
    code = main(["train", "--backend", backend, "--recipe", "library", *DIGITS, *extra,
                 "--set", f"privacy.sampling={sampling}", "--out", str(tmp_path)])
    assert code == 0
    (path,) = tmp_path.rglob("result.json")
    result = read_result(path)  # schema-validated
    assert result.config["recipe"] == "library"
    assert result.recipe is not None and result.recipe["trainer"] == trainer
    assert result.recipe["privacy_claim"]["status"] == claim
    own = result.privacy["library_epsilon"][own_key]
    as_run = result.privacy["as_run"]
    assert 0 < own < 100 and 0 < as_run["epsilon_rdp"] < 100
    assert as_run["steps"] == 2 * as_run["steps_per_epoch"]
    # what the start line and summary predicted before training is what ran
    from dpcore.recipes import library_schedule

    assert library_schedule(result.run_config, 320, backend) == (
        as_run["steps_per_epoch"], pytest.approx(as_run["sampling_rate"]))
    assert len(result.history) == 2 and 0 <= result.metrics["accuracy"] <= 1


def test_poisson_through_model_fit_is_refused_before_anything(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "runs"  # explicit: without a sampling, tf's library recipe shuffles
    code = main(["train", "--backend", "tf", "--recipe", "library", *DIGITS, "--set",
                 "privacy.sampling=poisson", "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "privacy.sampling='poisson'" in err and "valid" in err
    assert len(err.splitlines()) == 1 and not out.exists()


def test_microbatches_not_dividing_the_batch_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["train", "--backend", "torch", *DIGITS, "--set", "privacy.sampling=shuffle",
                 "--set", "factors.microbatch_size=5", "--out", str(tmp_path / "runs")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "factors.microbatch_size=5" in err and len(err.splitlines()) == 1
