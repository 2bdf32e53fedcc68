"""Suite-wide process settings, applied before any test module imports torch.

The test processes ask for passive OpenMP workers, as the CLI does (:mod:`dpcore.threads`):
the suite runs on two pytest-xdist workers on a 2-core machine, and libgomp's default spinning
workers of one process take the cores from the other's (measured here, with a training job
beside them: tests/backends/test_fast_engine_torch.py + test_dp_equivalence.py in 55.7 s with
the default, 45.2 s with PASSIVE). The policy changes how idle threads wait, not a result.
A policy the environment sets is kept.
"""

from __future__ import annotations

from dpcore.threads import prefer_passive_openmp

prefer_passive_openmp()
