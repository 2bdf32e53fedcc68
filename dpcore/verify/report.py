"""What ``dpcompare verify`` reports: one :class:`CheckResult` per test, grouped by the step
that was checked (:class:`StepReport`: one engine, or the library recipe) into a
:class:`VerifyReport`, with the false-alarm rate of the whole set by the union bound."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from dpcore.verify.stats import union_alpha


@dataclass(frozen=True)
class CheckResult:
    """One test of one step.

    Attributes:
        check: the check it belongs to (``sensitivity``, ``divisor``, ``noise-scale``...).
        test: what exactly was tested (e.g. ``add one example (gradient norm 3.1e+03 C)``).
        statistic: the measured statistic.
        threshold: its acceptance region in words (``<= 1.0012``, ``[0.97, 1.03]``...).
        alpha: the test's false-alarm rate (0: deterministic up to the stated float rounding).
        passed: True when the statistic lies in the region.
        detail: how the statistic was measured (units, what it would be for common bugs).
    """

    check: str
    test: str
    statistic: float
    threshold: str
    alpha: float
    passed: bool
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if not math.isfinite(self.statistic):
            out["statistic"] = str(self.statistic)
        return out


@dataclass
class StepReport:
    """The checks of one step (``engine``: ``fast``, ``reference`` or ``library``).

    Attributes:
        engine: the step checked.
        results: its tests, in the order they ran.
        skipped: check name -> why it could not run on this step.
        facts: what was measured with (batch sizes, scales, the adversarial example's raw
            gradient norm...), for the record.
        seconds: wall-clock time of this step's checks.
    """

    engine: str
    results: list[CheckResult] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    def failed_checks(self) -> list[str]:
        """Names of the checks with a failed test, in order, each once."""
        return list(dict.fromkeys(r.check for r in self.results if not r.passed))

    def false_alarm_rate(self) -> float:
        return union_alpha([r.alpha for r in self.results])

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "passed": self.passed,
                "false_alarm_rate": self.false_alarm_rate(),
                "failed_checks": self.failed_checks(), "skipped": dict(self.skipped),
                "facts": dict(self.facts), "seconds": self.seconds,
                "results": [r.to_dict() for r in self.results]}


@dataclass
class VerifyReport:
    """Every checked step of one configuration on one backend.

    Attributes:
        backend: ``tf`` or ``torch``.
        config_hash: the configuration checked.
        steps: one report per step checked.
        measured_how: how the checks read the step (printed above the tests).
        not_checked: step -> why it was not checked (e.g. an engine the model cannot run).
    """

    backend: str
    config_hash: str
    steps: list[StepReport] = field(default_factory=list)
    measured_how: list[str] = field(default_factory=list)
    not_checked: dict[str, str] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(s.passed for s in self.steps)

    def failed(self) -> list[str]:
        """``engine:check`` of every failed check."""
        return [f"{s.engine}:{name}" for s in self.steps for name in s.failed_checks()]

    def false_alarm_rate(self) -> float:
        """Probability, by the union bound over every test of every step, that an honest
        step fails some test."""
        return union_alpha([r.alpha for s in self.steps for r in s.results])

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "config_hash": self.config_hash,
                "passed": self.passed, "failed": self.failed(),
                "false_alarm_rate": self.false_alarm_rate(),
                "measured_how": list(self.measured_how),
                "not_checked": dict(self.not_checked),
                "steps": [s.to_dict() for s in self.steps]}

    def render(self) -> str:
        """The report as aligned text lines (what ``dpcompare verify`` prints)."""
        lines = [f"verify {self.backend} config {self.config_hash}"]
        lines += [f"  {line}" for line in self.measured_how]
        for engine, why in self.not_checked.items():
            lines.append(f"  {engine}: not checked ({why})")
        for step in self.steps:
            lines.append(f"{step.engine} ({step.seconds:.1f} s): "
                         f"{'PASS' if step.passed else 'FAIL'}")
            for key, value in step.facts.items():
                lines.append(f"  {key}: {value}")
            width = max((len(f"{r.check}: {r.test}") for r in step.results), default=0)
            for r in step.results:
                name = f"{r.check}: {r.test}"
                alpha = "exact" if r.alpha == 0 else f"alpha {r.alpha:.1e}"
                lines.append(f"  {'ok  ' if r.passed else 'FAIL'} {name:<{width}}  "
                             f"{r.statistic:.6g} (pass: {r.threshold}; {alpha})")
                if r.detail and not r.passed:
                    lines.append(f"       {r.detail}")
            for name, why in step.skipped.items():
                lines.append(f"  skip {name}: {why}")
        lines.append(f"false-alarm rate of the whole set (union bound): "
                     f"{self.false_alarm_rate():.2e}")
        lines.append("PASS: every check passed" if self.passed else
                     "FAIL: " + ", ".join(self.failed()))
        return "\n".join(lines)
