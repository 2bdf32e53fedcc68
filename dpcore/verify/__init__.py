"""``dpcompare verify``: a conformance check of one configured DP step on one backend
(sensitivity, noise, divisor, accounting), framework-neutral; :func:`dpcore.verify.run.verify`
is the driver (imported from its module: this ``__init__`` imports only the leaf report types,
so that :mod:`dpcore.backend`'s type names from :mod:`dpcore.verify.steppers` close no cycle)."""

from dpcore.verify.report import CheckResult, StepReport, VerifyReport

__all__ = ["CheckResult", "StepReport", "VerifyReport"]
