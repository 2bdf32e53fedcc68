"""The audit catches bugs placed in the backends' own code, and flags no honest run.

``dpcompare train --backend B --dataset digits --epsilon 1 --audit-canaries 1000`` (the
command of the audit's acceptance check) with each bug of :data:`tests.audit.bugs.BUGS`
placed in the backend's code, on every engine whose code path holds it: the run must be
flagged by the part of the audit the bug names (the one-run bound above the proved epsilon,
or the per-step noise check), and the record and the printed summary must say "PRIVACY
VIOLATION". The same command without a bug, over 5 seeds on each backend, must not be
flagged: the false alarms are counted and must be 0 here (the per-step check's designed rate
is 1e-3 per run, the bound's at most 5 %).

Integration tests (about 15 s a run on 2 cores): marked ``slow``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from compare.cli.main import main
from dpcore.results import read_result
from tests.audit.bugs import BUGS, BugPatch

COMMAND = ["train", "--dataset", "digits", "--epsilon", "1", "--audit-canaries", "1000",
           "--faithfulness-subset", "0", "--quiet"]
SEEDS = range(5)


def _train(tmp_path: Path, backend: str, engine: str, seed: int = 0) -> tuple[Any, str]:
    out = tmp_path / f"{backend}-{engine}-{seed}"
    code = main([*COMMAND, "--backend", backend, "--engine", engine, "--seed", str(seed),
                 "--out", str(out)])
    assert code == 0
    [path] = out.glob("runs/*/result.json")
    result = read_result(path)
    assert result is not None and result.audit is not None
    return result, str(result.perf.get("engine_used"))


CASES = [pytest.param(bug, engine, id=f"{bug.key}-{engine}")
         for bug in BUGS.values() for engine in bug.engines]


@pytest.mark.slow
@pytest.mark.parametrize(("bug", "engine"), CASES)
def test_a_bug_in_the_backends_code_is_caught(bug: BugPatch, engine: str, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    bug.place(monkeypatch)
    result, used = _train(tmp_path, bug.backend, engine)
    out = capsys.readouterr().out
    assert used == engine
    one_run = result.audit["one_run"]
    per_step = one_run["per_step"]
    assert one_run["violation"], (bug.key, one_run["epsilon_lower_bound"], per_step["value"])
    assert "PRIVACY VIOLATION" in out
    if bug.caught_by == "bound":
        assert one_run["epsilon_lower_bound"] > result.privacy["epsilon_proved"]
    else:
        assert per_step["flagged"] and per_step["value"] < per_step["threshold"]
        assert "NOT FRESH" in out


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["tf", "torch"])
def test_honest_runs_are_not_flagged_over_five_seeds(backend: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    flagged = []
    for seed in SEEDS:
        result, _ = _train(tmp_path, backend, "fast", seed)
        one_run = result.audit["one_run"]
        if one_run["violation"]:
            flagged.append((seed, one_run["epsilon_lower_bound"], one_run["per_step"]))
        assert one_run["per_step"]["false_alarm_rate"] == pytest.approx(1e-3)
    capsys.readouterr()
    assert flagged == [], f"false alarms on honest {backend} runs: {flagged}"
