"""Suite-wide process settings, applied before any test module imports torch.

The test processes ask for passive OpenMP workers, as the CLI does (:mod:`dpcore.threads`):
the suite runs on two pytest-xdist workers on a 2-core machine, and libgomp's default spinning
workers of one process take the cores from the other's (measured here, with a training job
beside them: tests/backends/test_fast_engine_torch.py + test_dp_equivalence.py in 55.7 s with
the default, 45.2 s with PASSIVE). The policy changes how idle threads wait, not a result.
A policy the environment sets is kept.
"""

from __future__ import annotations

import pytest

from dpcore.threads import prefer_passive_openmp

prefer_passive_openmp()


#: The longest test files, longest first (seconds of one full run with --durations, under a
#: load of about 5 on this 2-core machine: about 2.4 times CI's). pytest-xdist's loadfile
#: hands whole files to idle workers in collection order, so a long file collected last runs
#: alone at the end while the other worker idles; these go first. Order only: every test runs.
LONGEST_FIRST: tuple[str, ...] = (
    "tests/verify/test_verify_bugs.py",  # 688 s
    "tests/backends/test_frontcache.py",  # 353 s
    "tests/backends/test_fast_engine.py",  # 327 s
    "tests/end_to_end/test_audit_catches_bugs.py",  # 265 s
    "tests/compare/test_presets_dry_run.py",  # 239 s
    "tests/compare/test_report_rebuild.py",  # 226 s
    "tests/verify/test_verify_presets.py",  # 219 s
    "tests/backends/test_train_contract.py",  # 192 s
    "tests/backends/test_models_scatter.py",  # 178 s
    "tests/executors/test_ray_executor.py",  # 114 s
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put the files of :data:`LONGEST_FIRST` first, in its order; the rest keep theirs."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}

    def key(item: pytest.Item) -> int:
        path = item.nodeid.split("::", 1)[0]
        return rank.get(path, len(rank))
    items.sort(key=key)  # stable: the order within a file and among the rest is kept
