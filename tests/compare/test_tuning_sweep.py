"""benchmarks/tuning_sweep.py: candidates are validated with clear errors, each candidate is
trained on the validation split at each epsilon, and the table names its command."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from benchmarks.tuning_sweep import load_candidates, main, run_config
from dpcore.errors import ConfigError

pytest.importorskip("torch")

CANDIDATES = """
candidates:
  - {label: small, model: {name: cnn4, activation: tanh},
     data: {image_size: 16, train_limit: 200},
     train: {optimizer: sgd, lr: 0.1, momentum: 0.9, batch_size: 32, epochs: 1}}
  - {label: wide, model: {name: cnn4, activation: tanh, width: 2.0},
     data: {image_size: 16, train_limit: 200},
     train: {optimizer: sgd, lr: 0.1, momentum: 0.9, batch_size: 32, epochs: 1}}
"""


def test_candidates_need_labels_and_known_sections(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("candidates: [{label: x, optimiser: {lr: 1}}]\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"unknown keys \['optimiser'\].*valid"):
        load_candidates(bad)
    bad.write_text("candidates: []\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="non-empty 'candidates'"):
        load_candidates(bad)
    bad.write_text("candidates: [{model: {name: cnn4}}]\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="with a 'label'"):
        load_candidates(bad)


def test_candidate_is_laid_over_the_dp_base(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(CANDIDATES, encoding="utf-8")
    config = run_config("digits", load_candidates(path)[1], epsilon=2.0)
    assert config.privacy.target_epsilon == 2.0 and config.privacy.delta == 1e-5
    assert config.privacy.mechanism == "dpsgd-gaussian" and config.model.width == 2.0
    assert config.data.name == "digits" and config.data.image_size == 16


def test_a_candidate_may_carry_an_augment_section(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("candidates: [{label: flip, train: {epochs: 1},\n"
                    "              augment: {hflip: true, crop_padding: 2}}]\n",
                    encoding="utf-8")
    candidate = load_candidates(path)[0]
    config = run_config("digits", candidate, epsilon=2.0)
    assert config.augment.hflip is True and config.augment.crop_padding == 2
    assert config.privacy.target_epsilon == 2.0  # the base is kept beside it
    plain = run_config("digits", {"label": "plain", "train": {"epochs": 1}}, epsilon=2.0)
    assert "augment" not in plain.to_dict()
    assert plain.config_hash != config.config_hash


@pytest.mark.slow
def test_sweep_scores_the_validation_split(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(CANDIDATES, encoding="utf-8")
    (tmp_path / "my tables").mkdir()
    out = tmp_path / "my tables" / "t.md"  # a space: the header's command must quote it
    argv = ["--dataset", "digits", "--candidates", str(path), "--epsilons", "4,8",
            "--only", "small", "--out", str(out)]
    assert main(argv) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["label"], r["epsilon"]) for r in rows] == [("small", 4.0), ("small", 8.0)]
    assert all(r["n_validation"] == 40 and r["n_fit"] == 160 for r in rows)  # 20 % of 200
    assert [round(r["epsilon_rdp"], 2) for r in rows] == [4.0, 8.0]
    text = out.read_text(encoding="utf-8")
    assert "python -m benchmarks.tuning_sweep --dataset digits" in text
    command = text.split("Command: `", 1)[1].split("`", 1)[0]
    assert shlex.split(command) == ["python", "-m", "benchmarks.tuning_sweep", *argv]
    assert "## epsilon 4" in text and "No test image is scored" in text
    with pytest.raises(SystemExit):
        main(["--dataset", "digits", "--candidates", str(path), "--only", "nope"])


def test_protocol_arguments_are_checked(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(CANDIDATES, encoding="utf-8")
    with pytest.raises(SystemExit) as exc:
        main(["--dataset", "digits", "--candidates", str(path), "--protocol", "geometric:10"])
    assert exc.value.code == 2
    assert "valid: tnb:ETA:GAMMA" in capsys.readouterr().err


@pytest.mark.slow
def test_protocol_selects_on_noised_scores_and_states_the_total(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dpcore.tuning import RepetitionLaw, SelectionDraws, parse_selection
    from dpcore.tuning.bound import ScoreMechanism

    path = tmp_path / "c.yaml"
    path.write_text(CANDIDATES, encoding="utf-8")
    out, blocks = tmp_path / "p.md", tmp_path / "s.json"
    args = ["--dataset", "digits", "--candidates", str(path), "--epsilons", "3",
            "--protocol", "tnb:1:0.4", "--score-noise", "0.1", "--seed", "3",
            "--out", str(out), "--selection-out", str(blocks)]
    assert main(args) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    law = RepetitionLaw.truncated_negative_binomial(1, 0.4)
    draws = SelectionDraws(law, 2, 3)
    assert [r["candidate"] for r in rows] == list(draws.candidates) and len(rows) == draws.k
    # the validation part: a keyed hash of each example (one example added or removed
    # moves no other), about 20 % of the 200 training images
    from benchmarks.defaults_sweep import keyed_validation_split
    from dpcore.data.splits import keyed_split
    from dpcore.pipeline import prepare_dataset

    base = prepare_dataset(run_config("digits", load_candidates(path)[0], 1.0), None)
    n_val = len(keyed_split(base.x_train, base.y_train, 0.2)[1])
    assert 20 <= n_val <= 60 and n_val == len(keyed_validation_split(base).y_test)
    # the released scores are the exact accuracies plus the seeded noise, nothing else
    score = ScoreMechanism("accuracy", 0.1, 1 / n_val)
    assert [r["noised_score"] for r in rows] == pytest.approx(
        [draws.noised(r["exact_accuracy"], score) for r in rows])
    best = max(rows, key=lambda r: r["noised_score"])
    text = out.read_text(encoding="utf-8")
    assert f"Winner: **{best['label']}** (repetition {best['repetition']}" in text
    assert "exact accuracy (reader only)" in text and "## total epsilon 3" in text
    assert f"on {n_val} images plus Gaussian noise" in text and "keyed hash" in text
    assert "keyed hash" in json.loads(blocks.read_text(encoding="utf-8"))["3"]["scored_on"]
    assert "python -m benchmarks.tuning_sweep --dataset digits" in text
    block = json.loads(blocks.read_text(encoding="utf-8"))["3"]
    selection = parse_selection(block)  # its epsilon is what its facts give
    assert selection.epsilon is not None and 0.98 * 3 <= selection.epsilon <= 3
    assert f"**{selection.epsilon:.3f}**" in text
    assert all(r["run_epsilon"] < 3 for r in rows)
    # a total no per-run budget reaches: refused before anything trains
    assert main([*args[:5], "0.05", *args[6:]]) == 2


def test_candidates_without_dp_sgd_are_tabled_once_with_the_mean_over_seeds() -> None:
    from benchmarks.tuning_sweep import aggregate, is_dpsgd, markdown

    assert is_dpsgd({"label": "x"}) and not is_dpsgd({"privacy": {"mechanism": "none"}})
    assert not is_dpsgd({"privacy": {"mechanism": "ldp"}})
    base = {"dataset": "pneumoniamnist", "n_fit": 80, "n_validation": 20, "majority": 0.75,
            "status": "finished", "noise_multiplier": None}
    rows = [{**base, "epsilon": None, "label": "sgd", "seed": 0, "mechanism": "none",
             "val_accuracy": 0.90, "val_auc": 0.95, "seconds": 10.0},
            {**base, "epsilon": None, "label": "sgd", "seed": 1, "mechanism": "none",
             "val_accuracy": 0.80, "val_auc": 0.85, "seconds": 12.0},
            {**base, "epsilon": None, "label": "adam", "seed": 0, "mechanism": "none",
             "val_accuracy": 0.86, "val_auc": 0.99, "seconds": 5.0},
            {**base, "epsilon": None, "label": "adam", "seed": 1, "mechanism": "none",
             "val_accuracy": None, "val_auc": None, "seconds": 5.0, "status": "diverged"}]
    (sgd, adam) = aggregate(rows)
    assert sgd["val_accuracy"] == pytest.approx(0.85) and sgd["seconds"] == 22.0
    assert adam["val_accuracy"] is None  # a diverged seed: no mean
    text = markdown(rows, "python -m benchmarks.tuning_sweep ...", "torch", "accuracy")
    assert "## without DP-SGD" in text and "## epsilon" not in text
    assert "mean over seeds 0, 1" in text and "Sorted by validation accuracy" in text
    assert "(mechanism none) trained once" in text
    assert text.index("| sgd |") < text.index("| adam |")  # 0.85 beats a diverged seed


def test_balanced_accuracy_ranks_by_the_mean_per_class_recall() -> None:
    """``--rank-by balanced_accuracy``: the mean of the per-class recalls (blind to the
    classes' proportions), from a run's per_class metrics; a candidate that is better on the
    minority class ranks first although its plain accuracy is lower."""
    from benchmarks.defaults_sweep import balanced_accuracy
    from benchmarks.tuning_sweep import main, markdown

    per_class = [{"support": 25, "recall": 0.6}, {"support": 75, "recall": 0.98},
                 {"support": 0, "recall": float("nan")}]  # a class without examples: left out
    assert balanced_accuracy({"per_class": per_class}) == pytest.approx(0.79)
    assert balanced_accuracy({}) is None
    base = {"dataset": "pneumoniamnist", "n_fit": 80, "n_validation": 100, "majority": 0.75,
            "status": "finished", "noise_multiplier": None, "epsilon": None,
            "mechanism": "none", "seed": 0, "seconds": 1.0}
    rows = [{**base, "label": "plain", "val_accuracy": 0.885, "val_balanced_accuracy": 0.79,
             "val_auc": 0.95},
            {**base, "label": "balanced", "val_accuracy": 0.87, "val_balanced_accuracy": 0.85,
             "val_auc": 0.95}]
    text = markdown(rows, "python -m benchmarks.tuning_sweep ...", "torch", "balanced_accuracy")
    assert "Sorted by validation balanced accuracy (mean per-class recall)" in text
    assert text.index("| balanced |") < text.index("| plain |")
    assert "| balanced | – | 0.870 | 0.850 | 0.950 | 1 |" in text
    by_accuracy = markdown(rows, "...", "torch", "accuracy")
    assert by_accuracy.index("| plain |") < by_accuracy.index("| balanced |")
    with pytest.raises(SystemExit):
        main(["--dataset", "digits", "--candidates", "x.yaml", "--rank-by", "recall"])
