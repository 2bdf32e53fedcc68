"""Every end-to-end test gets its own data cache and no inherited data root."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DPCOMPARE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("DPCOMPARE_DATA_DIR", raising=False)
