"""The one-run audit catches bugs placed in the backends' own code, and flags no honest run.

``dpcompare train --backend B --dataset digits --epsilon 1 --audit-canaries 1000`` (110 steps
of cnn4) with a bug of the catalogue :mod:`tests.verify.bugs` installed in one engine's code
(``Bug.applied(backend, step)``, never ``factors.fault``): the gradient canaries are
per-example records that the engine clips with its own code, so

* ``skip-clip`` (the engine clips nothing) lets the canaries through at their 100 C norm: the
  one-run bound (``audit.one_run.epsilon_lower_bound``) rises above the proved epsilon;
* ``noise-once-per-run`` (one noise vector reused at every step) leaves the per-step noise
  residuals at the canaries' coordinates predictable from the step before: the per-step
  audit (``audit.one_run.per_step``) flags it;

on both frameworks and on each engine (fast and reference) whose code holds the bug, and the
record and the printed summary say "PRIVACY VIOLATION". The same command without a bug must
not be flagged (each engine, and 5 seeds of the default engine per framework: the false alarms
counted here must be 0; the per-step check's designed rate is 1e-3 per run, the bound's at
most 5 %).

Each test is one training run (about 10 s on torch, 20 s on TF, on 2 busy cores).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from compare.cli.main import main
from dpcore.results import RunResult, read_result
from tests.verify.bugs import BUGS

COMMAND = ["train", "--dataset", "digits", "--epsilon", "1", "--audit-canaries", "1000",
           "--faithfulness-subset", "0", "--quiet"]
ENGINES = ("fast", "reference")

#: Bug name -> the part of the audit that must flag it: ``bound`` (the one-run epsilon bound
#: above the proved epsilon) or ``per_step`` (the noise at the canaries is not fresh).
CAUGHT_BY = {"skip-clip": "bound", "noise-once-per-run": "per_step"}


def _train(tmp_path: Path, backend: str, engine: str, seed: int = 0) -> RunResult:
    out = tmp_path / f"{backend}-{engine}-{seed}"
    code = main([*COMMAND, "--backend", backend, "--engine", engine, "--seed", str(seed),
                 "--out", str(out)])
    assert code == 0
    [path] = out.glob("runs/*/result.json")
    result = read_result(path)
    assert result is not None and result.audit is not None
    assert result.perf.get("engine_used") == engine
    return result


def _summary(result: RunResult) -> dict[str, Any]:
    one_run = result.audit["one_run"]
    per_step = one_run["per_step"]
    return {"bound": one_run["epsilon_lower_bound"], "proved": result.privacy["epsilon_proved"],
            "S": per_step["value"], "threshold": per_step["threshold"],
            "rho_1": per_step["rho_1"], "accuracy": result.metrics.get("accuracy")}


BUG_CASES = [pytest.param(name, backend, engine, id=f"{name}-{backend}-{engine}")
             for name in CAUGHT_BY for backend in ("tf", "torch") for engine in ENGINES
             if BUGS[name].skip_reason(backend, engine) is None]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "backend", "engine"), BUG_CASES)
def test_a_bug_in_the_backends_code_is_caught(name: str, backend: str, engine: str,
                                               tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    with BUGS[name].applied(backend, engine):
        result = _train(tmp_path, backend, engine)
    out = capsys.readouterr().out
    one_run = result.audit["one_run"]
    per_step = one_run["per_step"]
    assert one_run["violation"], _summary(result)
    assert "PRIVACY VIOLATION" in out
    if CAUGHT_BY[name] == "bound":
        assert one_run["epsilon_lower_bound"] > result.privacy["epsilon_proved"], \
            _summary(result)
    else:
        assert per_step["flagged"] and per_step["value"] < per_step["threshold"], \
            _summary(result)
        assert "NOT FRESH" in out


def test_both_bugs_have_a_case_on_each_framework_and_engine() -> None:
    """The cases above cover every (bug, backend, engine) the catalogue patches."""
    covered = {(n, b, e) for n, b, e in (p.values for p in BUG_CASES)}
    assert covered == {(n, b, e) for n in CAUGHT_BY for b in ("tf", "torch") for e in ENGINES}


HONEST_CASES = ([pytest.param(b, e, 0, id=f"{b}-{e}-seed0") for b in ("tf", "torch")
                 for e in ENGINES]
                + [pytest.param(b, "fast", s, id=f"{b}-fast-seed{s}") for b in ("tf", "torch")
                   for s in range(1, 5)])


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "engine", "seed"), HONEST_CASES)
def test_an_honest_run_is_not_flagged(backend: str, engine: str, seed: int, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    result = _train(tmp_path, backend, engine, seed)
    out = capsys.readouterr().out
    one_run = result.audit["one_run"]
    assert one_run["per_step"]["false_alarm_rate"] == pytest.approx(1e-3)
    assert one_run["per_step"]["steps"] == 110
    assert not one_run["violation"], _summary(result)
    assert "none found by the audit" in out
