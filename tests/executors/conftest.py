"""Fixtures of the executor tests."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    """Worker processes a test starts; any still running at its end are killed."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:  # a failed test must not leave a worker behind
        if proc.poll() is None:
            proc.kill()
            proc.wait()
