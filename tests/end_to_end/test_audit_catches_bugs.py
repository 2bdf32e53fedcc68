"""The one-run audit catches bugs placed in the backends' own code, and flags no honest run.

``dpcompare train --backend B --dataset digits --epsilon 1 --audit-canaries 1000`` (110 steps
of cnn4) with a bug of the catalogue :mod:`tests.verify.bugs` installed in one engine's code
(``Bug.applied(backend, step)``, never ``factors.fault``): the gradient canaries are
per-example records that the engine clips with its own code, so

* ``skip-clip`` (the engine clips nothing) lets the canaries through at their 100 C norm: the
  per-step clipping check (``audit.one_run.per_step.clip``) flags it, and under Poisson
  sampling the one-run bound (``audit.one_run.epsilon_lower_bound``) rises above the proved
  epsilon too (under shuffling the proved epsilon has no amplification, out of reach of a
  bound from 100 guesses);
* ``noise-once-per-run`` (one noise vector reused at every step) leaves the per-step noise
  residuals at the canaries' coordinates predictable from the step before: the per-step
  audit (``audit.one_run.per_step``) flags it;

on both frameworks and on each engine (fast and reference) whose code holds the bug, and the
record and the printed summary say "PRIVACY VIOLATION". The same command without a bug must
not be flagged (each engine, and 5 seeds of the default engine per framework: the false alarms
counted here must be 0; the designed rates per run: 1e-3 for each per-step check, at most
5 % for the bound).

The same two bugs placed in the libraries' own code (TF Privacy's ``GaussianSumQuery``,
Opacus's ``DPOptimizer``: patches of this file, not of the catalogue, which patches the
bench's backends) are caught under ``--recipe library``, whose gradient canaries go through
the library's own clipping (Opacus's ``clip_and_accumulate`` of ``grad_sample`` rows; TF
Privacy's ``accumulate_record``): the audit is white-box on the libraries themselves.

Each test is one training run (about 5 to 15 s on 2 busy cores).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from compare.cli.main import main
from dpcore.results import RunResult, read_result
from tests.verify.bugs import BUGS
from tests.verify.library_bugs import LIBRARY_BUGS

COMMAND = ["train", "--dataset", "digits", "--epsilon", "1", "--audit-canaries", "1000",
           "--faithfulness-subset", "0", "--quiet"]
ENGINES = ("fast", "reference")

#: The bugs of the issue's table (:func:`_check_caught` says which check must flag each).
CAUGHT_BY = ("skip-clip", "noise-once-per-run")


def _train(tmp_path: Path, backend: str, engine: str, seed: int = 0,
           settings: tuple[str, ...] = ()) -> RunResult:
    """One audited run; ``engine`` ``library`` runs ``--recipe library``; ``settings`` are
    ``--set`` overrides."""
    out = tmp_path / f"{backend}-{engine}-{seed}"
    step = (["--recipe", "library"] if engine == "library" else ["--engine", engine])
    sets = [arg for setting in settings for arg in ("--set", setting)]
    code = main([*COMMAND, "--backend", backend, *step, "--seed", str(seed), *sets,
                 "--out", str(out)])
    assert code == 0
    [path] = out.glob("runs/*/result.json")
    result = read_result(path)
    assert result is not None and result.audit is not None
    if engine != "library":
        assert result.perf.get("engine_used") == engine
    return result


def _summary(result: RunResult) -> str:
    """The audit's figures of a run, for a failure message."""
    one_run = result.audit["one_run"]
    per_step = one_run["per_step"]
    return str({"bound": one_run["epsilon_lower_bound"],
                "proved": result.privacy["epsilon_proved"],
                "claimed": result.privacy["epsilon_claimed"], "S": per_step["value"],
                "threshold": per_step["threshold"], "rho_1": per_step["rho_1"],
                "clip": per_step.get("clip"), "accuracy": result.metrics.get("accuracy")})


def _check_caught(result: RunResult, name: str, out: str) -> None:
    one_run = result.audit["one_run"]
    per_step = one_run["per_step"]
    assert one_run["violation"], _summary(result)
    assert "PRIVACY VIOLATION" in out
    if name == "skip-clip":
        assert per_step["clip"]["flagged"], _summary(result)
        assert per_step["clip"]["value"] > per_step["clip"]["threshold"]
        assert "NOT CLIPPED" in out
        if result.config["privacy"]["sampling"] == "poisson":  # the bound sees it as well
            assert one_run["epsilon_lower_bound"] > result.privacy["epsilon_proved"], \
                _summary(result)
    else:
        assert per_step["flagged"] and per_step["value"] < per_step["threshold"], \
            _summary(result)
        assert "NOT FRESH" in out


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
    _check_caught(result, name, capsys.readouterr().out)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["tf", "torch"])
def test_a_microbatch_clipped_as_one_example_is_caught(backend: str, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    """The reference engine's microbatched path (``factors.microbatch_size`` k = 4, shuffled
    batches): each canary enters as a microbatch of k copies, whose mean the engine clips.
    The catalogue's ``microbatch-clip-scaled`` (a microbatch's clipped mean counted k times)
    lets each canary through at k C: the per-step clipping check flags it; the same run
    without the bug is not flagged."""
    bug = BUGS["microbatch-clip-scaled"]
    with bug.applied(backend, "reference"):
        result = _train(tmp_path / "bug", backend, "reference", settings=bug.settings)
    out = capsys.readouterr().out
    clip = result.audit["one_run"]["per_step"]["clip"]
    assert result.audit["one_run"]["violation"] and clip["flagged"], _summary(result)
    assert clip["mean_shift"] > 1.0 and "NOT CLIPPED" in out  # k C - C = 3 C expected
    honest = _train(tmp_path / "honest", backend, "reference", settings=bug.settings)
    assert not honest.audit["one_run"]["violation"], _summary(honest)
    assert "none found by the audit" in capsys.readouterr().out


#: Further bugs of the catalogue the audit catches on the fast engines (measured: with
#: ``actual-divisor``, ``noise-per-chunk`` and ``noise-key-fixed`` it finds nothing; they are
#: ``dpcompare verify``'s), and the per-step check that must flag each: ``clip`` or ``fresh``.
FURTHER = {"clip-after-sum": "clip", "clip-norm-default": "clip",
           "noise-once-per-epoch": "fresh", "noise-skip-biases": "fresh",
           "noise-skip-last-layer": "fresh"}


@pytest.mark.slow
@pytest.mark.parametrize(("name", "backend"), [pytest.param(n, b, id=f"{n}-{b}")
                                               for n in FURTHER for b in ("tf", "torch")])
def test_further_catalogue_bugs_are_caught_on_the_fast_engine(
        name: str, backend: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bug = BUGS[name]
    with bug.applied(backend, "fast"):
        result = _train(tmp_path, backend, "fast", settings=bug.settings)
    out = capsys.readouterr().out
    per_step = result.audit["one_run"]["per_step"]
    assert result.audit["one_run"]["violation"] and "PRIVACY VIOLATION" in out, \
        _summary(result)
    if FURTHER[name] == "clip":
        assert per_step["clip"]["flagged"] and "NOT CLIPPED" in out, _summary(result)
    else:
        assert per_step["flagged"] and "NOT FRESH" in out, _summary(result)


def test_both_bugs_have_a_case_on_each_framework_and_engine() -> None:
    """The cases above cover every (bug, backend, engine) the catalogue patches."""
    covered = {(n, b, e) for n, b, e in (p.values for p in BUG_CASES)}
    assert covered == {(n, b, e) for n in CAUGHT_BY for b in ("tf", "torch") for e in ENGINES}


@pytest.mark.slow
@pytest.mark.parametrize(("name", "backend"), [pytest.param(*key, id=f"{key[0]}-{key[1]}")
                                               for key in LIBRARY_BUGS])
def test_a_bug_in_the_librarys_own_code_is_caught(name: str, backend: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.MonkeyPatch.context() as mp:
        LIBRARY_BUGS[(name, backend)](mp)
        result = _train(tmp_path, backend, "library")
    _check_caught(result, name, capsys.readouterr().out)


HONEST_CASES = ([pytest.param(b, e, 0, id=f"{b}-{e}-seed0") for b in ("tf", "torch")
                 for e in (*ENGINES, "library")]
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
    assert one_run["per_step"]["steps"] == (110 if engine != "library" else
                                            result.privacy["as_run"]["steps"])
    assert not one_run["violation"], _summary(result)
    assert "none found by the audit" in out
