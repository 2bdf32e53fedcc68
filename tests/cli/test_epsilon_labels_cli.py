"""The labels of the CLI's epsilon figures (``dpcompare epsilon``, ``train``'s summary,
``audit``): each epsilon named by its accountant and kind, the epsilon of what ran beside the
planned one, and tables whose labels never run into their values."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from compare.cli.main import main
from compare.cli.train import print_summary


def value_columns(text: str) -> set[int]:
    """The column where each line's value starts (after the label's padding)."""
    return {match.end() for line in text.splitlines()
            if (match := re.match(r"^\S.*?\s{2,}", line))}


def test_epsilon_table_names_tf_privacy_both_ways_and_aligns(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["epsilon", "--n", "60000", "--batch-size", "256", "--noise-multiplier", "1",
                 "--epochs", "1", "--no-library"]) == 0
    out = capsys.readouterr().out
    assert "epsilon, TF Privacy RDP on these steps" in out
    assert "epsilon, TF Privacy compute_dp_sgd_privacy(n, batch, epochs)" in out
    assert "shared RDP (dp_accounting)" in out and "shared PLD (dp_accounting)" in out
    table = "\n".join(line for line in out.splitlines() if not line.startswith("note"))
    assert len(value_columns(table)) == 1


def test_a_sampling_rate_that_contradicts_the_batch_size_is_said() -> None:
    from compare import api

    out = api.epsilon(n=60000, batch_size=1024, noise_multiplier=1.0, epochs=1,
                      sampling_rate=0.0169, library=False)
    assert any("1024/60000 = 0.01707" in note for note in out["notes"])


def result(privacy: dict, metrics: dict | None = None) -> dict:
    return {"status": "finished", "metrics": metrics or {"accuracy": 0.9}, "privacy": privacy,
            "timing": {}, "defaults": {"train.momentum": 0.9}}


def test_summary_gives_the_epsilon_of_what_ran_beside_the_planned_one(
        capsys: pytest.CaptureFixture[str]) -> None:
    privacy = {"mechanism": "dpsgd-gaussian", "steps": 44, "epsilon_rdp": 7.9992,
               "epsilon_pld": 6.5, "as_run": {"steps": 46, "epsilon_rdp": 8.0401,
                                              "epsilon_pld": 6.6},
               "library_epsilon": {"opacus_prv (PrivacyEngine.accountant)": 6.5019}}
    print_summary(result(privacy), Path("r.json"), Path("c.npz"))
    out = capsys.readouterr().out
    assert "epsilon, shared RDP" in out and "8.0401 (46 steps ran; 7.9992 planned for 44)" in out
    assert "opacus_prv (PrivacyEngine.accountant)  " in out  # never "...accountant)6.5019"
    assert len(value_columns(out)) == 1
    assert "from defaults" in out and "train.momentum=0.9" in out


def test_summary_of_a_local_dp_run_states_pure_epsilons(
        capsys: pytest.CaptureFixture[str]) -> None:
    privacy = {"mechanism": "ldp", "epsilon_rdp": 256.0013,
               "ldp": {"epsilon_per_value": 1.0, "delta_per_value": 0.0,
                       "epsilon_per_image": 256.0, "delta_per_image": 0.0}}
    print_summary(result(privacy), Path("r.json"), Path("c.npz"))
    out = capsys.readouterr().out
    assert "epsilon per image (local DP, pure)" in out and "256.0000" in out
    assert "RDP" not in out


def test_the_audit_bound_names_the_epsilon_it_uses(capsys: pytest.CaptureFixture[str]) -> None:
    from compare.cli.audit import print_audit

    audit = {"n_members": 10, "n_nonmembers": 10, "member_accuracy": 1.0,
             "nonmember_accuracy": 0.9, "member_mean_loss": 0.1, "nonmember_mean_loss": 0.2,
             "attacks": {}, "loss_threshold": {"heldout_advantage": 0.01, "confidence": 0.95,
                                               "ci_low": 0.0, "ci_high": 0.05},
             "epsilon": 0.8905, "delta": 1e-5, "bound": 0.42,
             "claim": "claimed epsilon: epsilon_pld of the shared accountant",
             "suspected_privacy_bug": False}
    print_audit(audit, Path("r.json"))
    assert "epsilon 0.8905 by the shared PLD accountant" in capsys.readouterr().out
