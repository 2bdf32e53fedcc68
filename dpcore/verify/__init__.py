"""``dpcompare verify``: a conformance check of one configured DP step on one backend
(sensitivity, noise, divisor, accounting), framework-neutral; :func:`dpcore.verify.run.verify`
is the driver."""

from dpcore.verify.report import CheckResult, StepReport, VerifyReport
from dpcore.verify.run import ALPHA, verify

__all__ = ["ALPHA", "CheckResult", "StepReport", "VerifyReport", "verify"]
