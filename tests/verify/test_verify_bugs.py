"""``dpcompare verify`` against the catalogue of implementation bugs (tests/verify/bugs.py):
every bug is caught on both frameworks and on every step where its code path exists, by one of
the checks it names; the same configurations without a bug pass. The two bugs that passed the
end-of-training canary audit (the fast engine clips nothing; one noise vector reused at every
step) have their own test on both frameworks."""

from __future__ import annotations

import pytest

from tests.verify.bugs import BACKENDS, BUGS, STEPS, cases
from tests.verify.helpers import bug_report, failed_checks, honest_report

pytestmark = pytest.mark.slow

pytest.importorskip("tensorflow")
pytest.importorskip("torch")


def test_the_catalogue_holds_at_least_eight_bugs_each_on_both_frameworks() -> None:
    assert len(BUGS) >= 8
    for bug in BUGS.values():
        assert bug.breaks and bug.where and bug.caught_by, bug.name
        frameworks = {backend for backend, _ in bug.patches}
        assert frameworks == set(BACKENDS), (bug.name, frameworks)
        for backend in BACKENDS:
            for step in STEPS:
                has_patch = (backend, step) in bug.patches
                assert has_patch or bug.skips.get((backend, step)), (bug.name, backend, step)


@pytest.mark.parametrize(("bug", "backend", "step"), cases())
def test_verify_catches_the_bug(bug: str, backend: str, step: str) -> None:
    reason = BUGS[bug].skip_reason(backend, step)
    if reason is not None:
        pytest.skip(reason)
    report = bug_report(bug, backend, step)
    caught = failed_checks(report) & set(BUGS[bug].caught_by)
    assert not report.passed and caught, (
        f"{bug} on {backend}/{step} not caught by {BUGS[bug].caught_by}; failed: "
        f"{report.failed()}")


def _honest_settings() -> list[tuple[str, str, tuple[str, ...], tuple[tuple[str, object], ...]]]:
    """Each distinct configuration a bug is tested on, on each step that has a bug on it."""
    seen = {}
    for name, backend, step in cases():
        bug = BUGS[name]
        if bug.skip_reason(backend, step) is None:
            key = (backend, step, bug.settings, tuple(sorted(bug.perf.items())))
            seen[key] = key
    return sorted(seen, key=str)


@pytest.mark.parametrize(("backend", "step", "settings", "perf"), _honest_settings())
def test_the_bug_configurations_pass_without_the_bug(
        backend: str, step: str, settings: tuple[str, ...],
        perf: tuple[tuple[str, object], ...]) -> None:
    report = honest_report(backend, step, settings, perf)
    assert report.passed, report.render()
    assert 0 < report.false_alarm_rate() < 2e-3


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_issue_table_bugs_are_caught_on_both_frameworks(backend: str) -> None:
    no_clip = bug_report("skip-clip", backend, "fast")
    assert "sensitivity" in failed_checks(no_clip), no_clip.render()
    reused = bug_report("noise-once-per-run", backend, "fast")
    assert "noise-fresh" in failed_checks(reused), reused.render()
    for step in ("fast", "reference"):
        assert not bug_report("noise-once-per-run", backend, step).passed
