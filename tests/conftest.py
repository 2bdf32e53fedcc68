"""Suite-wide process settings, applied before any test module imports torch.

The test processes ask for passive OpenMP workers, as the CLI does (:mod:`dpcore.threads`):
the suite runs on two pytest-xdist workers on a 2-core machine, and libgomp's default spinning
workers of one process take the cores from the other's (measured here, with a training job
beside them: tests/backends/test_fast_engine_torch.py + test_dp_equivalence.py in 55.7 s with
the default, 45.2 s with PASSIVE). The policy changes how idle threads wait, not a result.
A policy the environment sets is kept.
"""

from __future__ import annotations

import os

import pytest

from dpcore.threads import prefer_passive_openmp

prefer_passive_openmp()

#: Threads of each test process's torch (OpenMP) and TensorFlow pools, unless the environment
#: sets them: the suite runs two pytest-xdist workers on a 2-core machine, so two threads per
#: pool oversubscribe the cores. Measured here with nothing else running, three long backend
#: files on two workers: 162 s wall / 281 s CPU with the frameworks' defaults (one thread a
#: core), 155 s / 260 s with one. Inherited by the CLI processes the tests start. Speed only:
#: the tests that compare two computations make both in one process, at one thread count.
#: NumPy's BLAS follows OMP_NUM_THREADS too: that is how a report figure summed by BLAS was
#: found to depend on the core count (compare.exact_sums now sums it exactly).
SUITE_THREADS = {"OMP_NUM_THREADS": "1", "TF_NUM_INTRAOP_THREADS": "1",
                 "TF_NUM_INTEROP_THREADS": "1"}
for _name, _value in SUITE_THREADS.items():
    os.environ.setdefault(_name, _value)


#: The longest test files, longest first (seconds of one full run with --durations, with
#: nothing else running on this 2-core machine: 838 s wall for the whole suite).
#: pytest-xdist's loadfile hands whole files to idle workers in collection order, so a long
#: file collected last runs alone at the end while the other worker idles; these go first.
#: Order only: every test runs.
LONGEST_FIRST: tuple[str, ...] = (
    "tests/end_to_end/test_audit_catches_bugs.py",  # 104 s
    "tests/verify/test_verify_bugs.py",  # 96 s
    "tests/compare/test_report_rebuild.py",  # 91 s
    "tests/backends/test_fast_engine.py",  # 85 s
    "tests/backends/test_frontcache.py",  # 76 s
    "tests/executors/test_ray_executor.py",  # 69 s
    "tests/compare/test_presets_dry_run.py",  # 58 s
    "tests/backends/test_models_scatter.py",  # 57 s
    "tests/end_to_end/test_killed_grid_resumes.py",  # 53 s
    "tests/compare/test_report_contract.py",  # 51 s
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put the files of :data:`LONGEST_FIRST` first, in its order; the rest keep theirs."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}

    def key(item: pytest.Item) -> int:
        path = item.nodeid.split("::", 1)[0]
        return rank.get(path, len(rank))
    items.sort(key=key)  # stable: the order within a file and among the rest is kept
