"""Files another generator writes into a report folder, which the report's own writer and its
rebuild check leave alone (glob patterns, relative to the folder).

``detection-matrix.*``: the catalogue bugs against ``dpcompare verify`` and the one-run audit,
written into reports/audit-check by ``python -m tests.verify.detection_matrix``.
"""

from __future__ import annotations

from fnmatch import fnmatch

#: Glob patterns of the files a report rewrite never removes and a rebuild does not compare.
FOREIGN_FILES: tuple[str, ...] = ("detection-matrix.*",)


def is_foreign(name: str) -> bool:
    """Whether ``name`` (a path relative to the report folder) is another generator's file."""
    return any(fnmatch(name, pattern) for pattern in FOREIGN_FILES)
