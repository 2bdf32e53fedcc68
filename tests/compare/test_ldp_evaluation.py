"""Local DP evaluated both ways (:mod:`dpcore.evaluation.ldp`): ``data.ldp_test_inputs`` picks the
test images of a local-DP run's headline metrics (clean or privatised) without changing its training
images or, at its default, its config hash; the run records both; the report shows both and ranks
local DP, DP-SGD and non-private under each. On digits with the Laplace mechanism."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from compare.reporting.frames import results_frame
from compare.reporting.ldp_eval import ldp_evaluation_section, ranking_sentences
from compare.training import Evaluation, train_and_record
from dpcore.config import RunConfig
from dpcore.data import as_float01, load_dataset
from dpcore.errors import ConfigError
from dpcore.pipeline import prepare_dataset
from dpcore.results import ResultsStore
from tests.compare.report_fakes import fake_result

LDP: dict[str, Any] = {
    "data": {"name": "digits", "image_size": 16, "ldp_mechanism": "laplace",
             "ldp_params": {"scale": 1.0}},
    "model": {"name": "cnn4"}, "privacy": {"mechanism": "ldp"},
    "train": {"steps": 6, "batch_size": 64, "lr": 0.1}}


def _config(test_inputs: str | None) -> RunConfig:
    data = dict(LDP["data"])
    if test_inputs is not None:
        data["ldp_test_inputs"] = test_inputs
    return RunConfig.from_dict({**LDP, "data": data})


@pytest.fixture(autouse=True)
def _isolated_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DPCOMPARE_CACHE_DIR", str(tmp_path / "cache"))


def test_the_default_keeps_stored_hashes_and_clean_is_a_new_config() -> None:
    default, privatised, clean = _config(None), _config("privatised"), _config("clean")
    assert default.config_hash == privatised.config_hash
    assert "ldp_test_inputs" not in default.to_dict()["data"]
    assert RunConfig().config_hash == "5044f4443cf0821c"
    assert clean.config_hash != default.config_hash
    assert RunConfig.from_dict(clean.to_dict()) == clean
    with pytest.raises(ConfigError,
                       match=r"data.ldp_test_inputs='noisy' is not known; valid: privatised"):
        _config("noisy")
    with pytest.raises(ConfigError, match="applies to local-DP runs only") as info:
        RunConfig.from_dict({"data": {"name": "digits", "ldp_test_inputs": "clean"}})
    assert "\n" not in str(info.value)


def test_both_modes_train_on_the_same_images_and_carry_both_test_sets() -> None:
    privatised = prepare_dataset(_config(None))
    clean = prepare_dataset(_config("clean"))
    original = as_float01(load_dataset(_config(None).data).x_test)
    np.testing.assert_array_equal(privatised.x_train, clean.x_train)
    np.testing.assert_array_equal(clean.x_test, original)
    assert not np.allclose(privatised.x_test, original)  # Laplace b = 1 noise
    for data in (privatised, clean):
        np.testing.assert_array_equal(data.ldp_test_images["clean"], original)
        np.testing.assert_array_equal(data.ldp_test_images["privatised"], privatised.x_test)
    assert "ldp_test_inputs" in clean.extra and "ldp_test_inputs" not in privatised.extra


def test_a_run_records_both_and_the_report_ranks_them(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    config = _config("clean")
    result, _ = train_and_record(config, prepare_dataset(config), "torch",
                                 ResultsStore(tmp_path), progress=False,
                                 evaluation=Evaluation(faithfulness_subset=0),
                                 labels={"data": "digits", "privacy": "LDP b=1"})
    both = result.metrics["ldp_test_inputs"]
    assert both["headline"] == "clean"
    assert both["clean"]["accuracy"] == pytest.approx(result.metrics["accuracy"])
    # both sets' AUCs scored from the logits, as the run's own; on the clean images (the
    # headline here) the very figures of the run's metrics
    assert both["clean"]["scoring"] == both["privatised"]["scoring"] == \
        result.metrics["scoring"] == {"accuracy": "softmax_float32",
                                      "loss": "softmax_float32", "auc": "logits"}
    assert both["clean"]["auc"] == result.metrics["auc"]
    assert both["clean"]["n"] == both["privatised"]["n"] == 360
    assert 0.0 <= both["privatised"]["accuracy"] <= 1.0
    assert len(both["privatised"]["per_class"]) == 10
    ldp = both["clean"]["accuracy"], both["privatised"]["accuracy"]
    # DP-SGD between the two local-DP figures, non-private above both
    dp_acc, np_acc = (ldp[0] + ldp[1]) / 2, max(ldp) + 0.05
    result.seed = 0
    others = [fake_result(dataset="digits", backend="torch", point=p, mechanism=m,
                          epsilon=e, accuracy=a, labels={"data": "digits", "privacy": p})
              for p, m, e, a in (("eps=8", "dpsgd-gaussian", 8.0, dp_acc),
                                 ("non-private", "none", 0.0, np_acc))]
    frame = results_frame([result, *others])
    sentences = ranking_sentences(frame)
    assert len(sentences) == 2
    by_clean = ("clean", "privatised") if ldp[0] > ldp[1] else ("privatised", "clean")
    assert sentences[0].startswith("digits, torch, on clean test images: non-private")
    assert sentences[1].startswith("digits, torch, on privatised test images: non-private")
    better = next(s for s in sentences if f"on {by_clean[0]} test images" in s)
    worse = next(s for s in sentences if f"on {by_clean[1]} test images" in s)
    assert better.index("LDP b=1") < better.index("DP-SGD eps=8")
    assert worse.index("DP-SGD eps=8") < worse.index("LDP b=1")
    assert "LDP LDP" not in better and "DP-SGD DP-SGD" not in better
    text = "\n".join(ldp_evaluation_section(frame))
    assert "accuracy, clean test images" in text and "accuracy, privatised test images" in text
    assert f"{ldp[0]:.3f} (1 seed)" in text and "| clean |" in text


def test_the_check_before_training_accepts_clean_evaluation(tmp_path: Path) -> None:
    """The pre-training check loads each data set without its local-DP step; a run evaluated
    on clean test images passes it (a refusal there, "applies to local-DP runs only", would
    stop every medical preset)."""
    from compare.grid import GridCell
    from compare.preflight import check_grid

    runs = [(GridCell(config=_config(mode), labels={}), backend)
            for mode in ("clean", "privatised") for backend in ("tf", "torch")]
    assert check_grid(runs, tmp_path) == 4



def test_the_ranking_joins_equal_settings_and_names_collapsed_ones() -> None:
    """Three models at the majority rate are equal, not ranked by digits the sentence does not
    show, and each says it collapsed."""
    runs = []
    for point, mechanism, accuracy in (("LDP b=1", "ldp", 0.625), ("eps=8", "dpsgd-gaussian",
                                                                   0.776),
                                       ("non-private", "none", 0.625)):
        run = fake_result(dataset="pneumoniamnist", backend="tf", point=point,
                          mechanism=mechanism, accuracy=accuracy,
                          classes=[{"index": 0, "name": "normal", "support": 234,
                                    "recall": 0.0, "precision": float("nan"), "auc": 0.5},
                                   {"index": 1, "name": "pneumonia", "support": 390,
                                    "recall": 1.0, "precision": 0.625, "auc": 0.5}]
                          if accuracy < 0.7 else None,
                          labels={"data": "pneumonia", "privacy": point})
        if mechanism == "ldp":
            run.config["data"]["ldp_test_inputs"] = "clean"
            run.metrics["ldp_test_inputs"] = {
                "headline": "clean",
                **{name: {"accuracy": 0.625, "n": 624, "per_class": run.metrics["per_class"]}
                   for name in ("clean", "privatised")}}
        runs.append(run)
    sentences = ranking_sentences(results_frame(runs))
    assert sentences, "no ranking for a panel with local-DP runs"
    clean = next(s for s in sentences if "on clean test images" in s)
    assert clean.endswith(": DP-SGD eps=8 0.776 > LDP b=1 0.625 (collapsed) = "
                          "non-private 0.625 (collapsed)"), clean
