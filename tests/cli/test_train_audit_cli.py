"""``dpcompare train`` with an audit, end to end: ``dpcompare train --dataset digits --epsilon 1
--audit-canaries 1000 --set factors.fault=no_noise`` reports a privacy violation on both
backends, and the same command without the fault reports none.

Integration test (four short trainings, about 10 s each on 2 cores): marked ``slow``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from compare.cli.main import main
from dpcore.results import read_result

COMMAND = ["train", "--dataset", "digits", "--epsilon", "1", "--audit-canaries", "1000",
           "--faithfulness-subset", "0", "--quiet"]


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["tf", "torch"])
@pytest.mark.parametrize("fault", ["no_noise", None])
def test_no_noise_is_caught_and_the_honest_run_is_not(
        backend: str, fault: str | None, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    extra = ["--set", f"factors.fault={fault}"] if fault else []
    assert main([*COMMAND, "--backend", backend, "--out", str(tmp_path), *extra]) == 0
    out = capsys.readouterr().out
    [path] = tmp_path.glob("runs/*/result.json")
    result = read_result(path)
    assert result is not None
    one_run = result.audit["one_run"]
    assert result.privacy["epsilon_claimed"] == pytest.approx(1.0, abs=1e-3)
    assert result.privacy["epsilon_proved"] == pytest.approx(1.0, abs=1e-3)
    if fault:
        assert one_run["violation"] and one_run["epsilon_lower_bound"] > 1.0
        assert "PRIVACY VIOLATION" in out and "DELIBERATELY BROKEN" in out
        assert one_run["deliberately_broken"] == "no_noise"
    else:
        assert not one_run["violation"] and one_run["epsilon_lower_bound"] <= 1.0
        assert re.search(r"privacy violation +none found", out) and "BROKEN" not in out


@pytest.mark.parametrize("args, message", [
    (["--set", "factors.fault=no_noise"], "factors.fault='no_noise' deliberately breaks DP"),
    (["--audit-canaries", "5000", "--set", "audit_canaries.kind=input"],
     "more than the 1437 training examples"),
    (["--audit-canaries", "10000000"], "weight coordinates of model 'cnn4'"),
])
def test_bad_audit_input_is_one_line_and_writes_nothing(
        args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "store"
    code = main(["train", "--backend", "torch", "--dataset", "digits", "--epsilon", "1",
                 "--out", str(out), "--quiet", *args])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and len(err.strip().splitlines()) == 1
    assert not list(out.glob("runs/*/*"))


def test_input_canaries_on_text_data_are_refused_before_loading(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["train", "--backend", "torch", "--dataset", "imdb", "--model", "textcnn",
                 "--epsilon", "1", "--out", str(tmp_path / "s"), "--quiet",
                 "--audit-canaries", "10", "--set", "audit_canaries.kind=input"])
    err = capsys.readouterr().err
    assert code == 2 and "needs an image data set; data.name='imdb' is text" in err
    assert not list((tmp_path / "s").glob("runs/*/*"))
