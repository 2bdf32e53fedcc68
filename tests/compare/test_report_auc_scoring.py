"""The accuracy section says how the AUCs it shows were scored: from the logits, from the
float32 softmax (every record that names no scoring), or a mix of both, with the settings
scored from the softmax named."""

from __future__ import annotations

from compare.reporting.accuracy_section import MAX_NAMED_SETTINGS, accuracy
from compare.reporting.frames import results_frame
from dpcore.results import RunResult
from dpcore.scoring import RUN_SCORING
from tests.compare.report_fakes import fake_result, render_section


def scored(run: RunResult) -> RunResult:
    run.metrics["scoring"] = dict(RUN_SCORING)
    return run


def runs(points: list[str], *, logits: bool) -> list[RunResult]:
    made = [fake_result(point=p, seed=s) for p in points for s in (0, 1)]
    return [scored(r) for r in made] if logits else made


def test_records_without_scoring_are_reported_as_the_float32_softmax() -> None:
    old = runs(["eps=1", "eps=8"], logits=False)
    assert set(results_frame(old)["auc_scoring"]) == {"softmax_float32"}
    text = "\n".join(render_section(accuracy, old).lines)
    assert ("AUC scored from the float32 softmax for all 4 runs: where a model is saturated, "
            "its float32 probabilities round to exactly 0 or 1 and tie") in text
    assert "from the logits" not in text.replace("re-scores such runs from their logits", "")


def test_records_scored_from_the_logits_say_so() -> None:
    text = "\n".join(render_section(accuracy, runs(["eps=1"], logits=True)).lines)
    assert "AUC scored from the logits for all 2 runs (the per-class log-odds" in text
    assert "float32 softmax" not in text


def test_a_report_that_mixes_both_says_so_and_names_the_softmax_settings() -> None:
    mixed = runs(["eps=1"], logits=True) + runs(["eps=8"], logits=False)
    text = "\n".join(render_section(accuracy, mixed).lines)
    assert ("This report mixes two AUC scorings: 2 runs from the logits, 2 runs from the "
            "float32 softmax (mnist5k · eps=8)") in text
    many = runs(["eps=1"], logits=True) + runs(
        [f"eps={e}" for e in range(MAX_NAMED_SETTINGS + 2)], logits=False)
    text = "\n".join(render_section(accuracy, many).lines)
    assert "and 2 more settings);" in text


def test_runs_without_an_auc_are_not_counted() -> None:
    done = runs(["eps=1"], logits=True)
    done[0].metrics["auc"] = None
    assert list(results_frame(done)["auc_scoring"]).count("") == 1
    text = "\n".join(render_section(accuracy, done).lines)
    assert "AUC scored from the logits for the one run (" in text
