"""A ``train`` run that collapsed says so in its summary instead of only "finished", by the rule
reports use (:func:`compare.reporting.collapse.collapse_reason`: predictions nearly all one
class, or accuracy not above the majority rate)."""

from __future__ import annotations

from pathlib import Path

import pytest

from compare.cli.train import print_summary, status_text
from compare.reporting.collapse import collapse_reason
from tests.compare.report_fakes import per_class


def summary(status: str, metrics: dict) -> dict:
    return {"status": status, "metrics": metrics,
            "privacy": {"mechanism": "dpsgd-gaussian", "epsilon_rdp": 1.0}, "timing": {}}


ONE_CLASS = {"accuracy": 0.5,  # every prediction 'dog': recall 1 for dog, 0 for cat
             "per_class": per_class([50, 50], [0.0, 1.0], [float("nan"), 0.5], ["cat", "dog"])}
AT_CHANCE = {"accuracy": 0.52,  # 0.52 of 1000 against a majority rate 0.5: p = 0.11
             "per_class": per_class([500, 500], [0.52, 0.52], [0.52, 0.52], ["cat", "dog"])}
LEARNT = {"accuracy": 0.9,
          "per_class": per_class([500, 500], [0.9, 0.9], [0.9, 0.9], ["cat", "dog"])}


@pytest.mark.parametrize("metrics", [ONE_CLASS, AT_CHANCE])
def test_a_collapsed_run_says_so_and_why(metrics: dict,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    reason = collapse_reason(metrics)
    assert reason is not None
    assert status_text(summary("finished", metrics)) == f"finished, but COLLAPSED: {reason}"
    print_summary(summary("finished", metrics), Path("r.json"), Path("c.npz"))
    (row,) = (line for line in capsys.readouterr().out.splitlines()
              if line.startswith("status"))
    assert row.endswith(f"finished, but COLLAPSED: {reason}")


def test_one_class_names_the_class_and_chance_names_the_test() -> None:
    assert "100.0% of predictions are 'dog'" in status_text(summary("finished", ONE_CLASS))
    assert "at chance: accuracy 0.520" in status_text(summary("finished", AT_CHANCE))


def test_a_run_that_learnt_or_did_not_finish_is_shown_as_it_is() -> None:
    assert status_text(summary("finished", LEARNT)) == "finished"
    assert status_text(summary("diverged", ONE_CLASS)) == "diverged"
