"""``dpcompare verify`` on the command line and from ``compare.api``: exit 0 when every check
passes, 1 naming the failed checks, 2 refused before anything is checked; ``--json`` for
machines; the train command's options."""

from __future__ import annotations

import json

import pytest

from compare.cli.main import main
from tests.verify.bugs import BUGS

pytest.importorskip("torch")

ARGS = ["verify", "--backend", "torch", "--dataset", "digits", "--noise-multiplier", "1",
        "--engine", "fast"]


def test_an_honest_step_passes_with_exit_0_and_prints_every_check(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(ARGS) == 0
    out = capsys.readouterr().out
    for check in ("sensitivity", "divisor", "noise-scale", "noise-coordinates", "noise-mean",
                  "noise-fresh", "noise-independence", "noise-keys", "accounting-sigma",
                  "accounting-sampling", "accounting-steps"):
        assert f" {check}: " in out, check
    assert "plain SGD, lr 1, momentum 0" in out
    assert "false-alarm rate of the whole set (union bound)" in out
    assert out.rstrip().endswith("PASS: every check passed")


def test_a_bug_fails_with_exit_1_naming_the_check(capsys: pytest.CaptureFixture[str]) -> None:
    with BUGS["skip-clip"].applied("torch", "fast"):
        assert main([*ARGS, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["passed"] is False
    assert "fast:sensitivity" in report["failed"]
    step = report["steps"][0]
    assert step["engine"] == "fast" and 0 < step["false_alarm_rate"] < 1e-3
    assert all({"statistic", "threshold", "alpha", "passed"} <= set(r) for r in step["results"])


@pytest.mark.parametrize(("extra", "message"), [
    (["--mechanism", "none"], "has no DP-SGD step to verify"),
    (["--noise-multiplier", "1", "--model", "nosuchmodel"], "nosuchmodel"),
    (["--noise-multiplier", "1", "--model", "resnet18", "--set",
      "factors.microbatch_size=2", "--set", "privacy.sampling=shuffle"],
     "--engine fast does not apply"),
])
def test_refused_input_exits_2(extra: list[str], message: str,
                               capsys: pytest.CaptureFixture[str]) -> None:
    args = [a for a in ARGS if a not in ("--noise-multiplier", "1")] + extra
    assert main(args) == 2
    assert message in capsys.readouterr().err


def test_the_api_returns_the_report() -> None:
    from compare import api

    report = api.verify({"data": {"name": "digits"}, "model": {"name": "cnn4"},
                         "privacy": {"mechanism": "dpsgd-gaussian", "noise_multiplier": 1.0}},
                        "opacus", engine="reference")
    assert report.passed and report.backend == "torch"
    assert [s.engine for s in report.steps] == ["reference"]
