"""One rule for the privacy figures of the steps that ran (``dpcore.as_run``), read alike by
the proved-epsilon check, the tidy tables and the report's run table; and one rule per
derived column of the tidy tables and the report's run table."""

from __future__ import annotations

import pytest

from compare.reporting.frames import results_frame
from compare.tidy import library_accountant_epsilon, results_table
from dpcore.as_run import as_run_privacy
from dpcore.proved import step_facts
from tests.compare.report_fakes import fake_result

PLANNED = {"mechanism": "dpsgd-gaussian", "noise_multiplier": 1.0, "delta": 1e-5, "steps": 100,
           "sampling_rate": 0.01, "epsilon_rdp": 2.0, "epsilon_pld": 1.9}
CONFIG = {"privacy": {"mechanism": "dpsgd-gaussian", "sampling": "poisson"}}


@pytest.mark.parametrize(("extra", "expected"), [
    ({}, {"steps": 100, "sampling_rate": 0.01, "steps_per_epoch": None, "epsilon_rdp": 2.0,
          "epsilon_pld": 1.9}),
    ({"steps_completed": 40}, {"steps": 40, "sampling_rate": 0.01, "steps_per_epoch": None,
                               "epsilon_rdp": 2.0, "epsilon_pld": 1.9}),
    ({"steps_completed": 40, "as_run": {"steps": 120, "sampling_rate": 0.008,
                                        "steps_per_epoch": 60, "epsilon_rdp": 2.2,
                                        "epsilon_pld": None}},
     {"steps": 120, "sampling_rate": 0.008, "steps_per_epoch": 60, "epsilon_rdp": 2.2,
      "epsilon_pld": 1.9}),
])
def test_the_steps_that_ran(extra: dict, expected: dict) -> None:
    privacy = {**PLANNED, **extra}
    assert as_run_privacy(privacy) == expected
    facts = step_facts(CONFIG, "tf", privacy)
    assert (facts.steps, facts.sampling_rate) == (expected["steps"], expected["sampling_rate"])
    if expected["steps_per_epoch"] is not None:
        assert facts.steps_per_epoch == expected["steps_per_epoch"]


def test_the_report_and_the_tidy_table_derive_their_columns_alike() -> None:
    run = fake_result()
    run.privacy.update({**PLANNED, "as_run": {"steps": 120, "epsilon_rdp": 2.2},
                        "library_epsilon": {"tf_privacy_compute_dp_sgd_privacy": 1.31,
                                            "opacus_prv (PrivacyEngine.accountant)": 1.2}})
    run.timing["epoch_seconds"] = [5.0, 1.0, 1.2, 1.1]
    report, tidy = results_frame([run]).iloc[0], results_table([run]).iloc[0]
    assert report["epsilon"] == tidy["epsilon"] == 2.2  # the steps that ran, RDP
    assert report["epoch_seconds"] == tidy["timing.epoch_seconds_mean"] == pytest.approx(1.1)
    for name in ("tf_privacy", "opacus_prv"):
        assert report[f"epsilon_{name}"] == tidy[f"epsilon_{name}"]
    assert tidy["epsilon_tf_privacy"] == 1.31 and tidy["epsilon_opacus_rdp"] is None
    assert library_accountant_epsilon({"opacus_prv": 1.2}, "opacus_rdp") is None
