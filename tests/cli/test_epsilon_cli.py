"""`dpcompare epsilon`: shared accountant next to Opacus's and TF Privacy's own."""

from __future__ import annotations

import json
import re

import pytest

from compare.cli.main import main


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["epsilon", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_library_benchmark_setting_all_accountants_agree(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = run_json(capsys, "--n", "60000", "--batch-size", "1024", "--sampling-rate", "0.0169",
                   "--noise-multiplier", "1.0", "--epochs", "60", "--delta", "1e-5")
    eps = out["epsilon"]
    assert set(eps) == {"rdp", "pld", "opacus_rdp", "opacus_prv", "tf_privacy",
                        "tf_privacy_user"}
    assert out["steps"] == 60 * 59 and out["sampling_rate"] == pytest.approx(0.0169)
    # Same event, same method: the RDP figures agree to the orders' resolution.
    assert eps["opacus_rdp"] == pytest.approx(eps["rdp"], rel=0.02)
    assert eps["tf_privacy"] == pytest.approx(eps["rdp"], rel=0.02)
    # PLD and PRV are both tight numerical accountants: they agree closely and beat RDP.
    assert eps["opacus_prv"] == pytest.approx(eps["pld"], rel=0.03)
    assert eps["pld"] < eps["rdp"]


def test_target_epsilon_calibrates(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, "--n", "60000", "--batch-size", "256", "--target-epsilon", "1",
                   "--steps", "500", "--no-library")
    # the default delta: the largest power of ten below 1/(10 N) (dpcore default_delta)
    assert out["calibrated"] and out["delta"] == pytest.approx(1e-6)
    assert out["epsilon"]["rdp"] == pytest.approx(1.0, rel=0.01)
    assert out["epsilon"]["opacus_rdp"] is None  # --no-library


def test_laplace_has_no_library_figures(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, "--n", "1000", "--batch-size", "10", "--noise-multiplier", "5",
                   "--steps", "20", "--mechanism", "laplace")
    assert out["epsilon"]["pld"] > 0 and out["epsilon"]["rdp"] is None
    assert any("Laplace" in note for note in out["notes"])


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--n", "100", "--batch-size", "200", "--noise-multiplier", "1", "--epochs", "1"],
         "--batch-size=200"),
        (["--n", "100", "--batch-size", "10", "--noise-multiplier", "1", "--epochs", "1",
          "--delta", "1"], "--delta=1.0"),
        (["--n", "100", "--batch-size", "10", "--target-epsilon", "-1", "--epochs", "1"],
         "--target-epsilon=-1.0"),
        (["--n", "100", "--batch-size", "10", "--noise-multiplier", "1", "--epochs", "1",
          "--sampling-rate", "1.5"], "--sampling-rate=1.5"),
    ],
)
def test_bad_values_exit_2_with_one_line(
    capsys: pytest.CaptureFixture[str], args: list[str], fragment: str
) -> None:
    assert main(["epsilon", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and fragment in err and "Traceback" not in err


def test_human_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["epsilon", "--n", "1000", "--batch-size", "50", "--noise-multiplier", "1.2",
                 "--epochs", "3", "--no-library"]) == 0
    out = capsys.readouterr().out
    assert "epsilon, shared RDP (dp_accounting)" in out
    assert re.search(r"^steps\s+60$", out, flags=re.M)
