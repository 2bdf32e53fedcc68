"""Peak memory per run (dpcore.memory): a window started after a large run reports that run's
peak no longer, and without the kernel's reset the scope says the number is process-wide."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import dpcore.memory as memory

LINUX_RESET = sys.platform.startswith("linux") and Path("/proc/self/clear_refs").exists()


@pytest.mark.skipif(not LINUX_RESET, reason="the peak RSS reset is Linux's /proc/self/clear_refs")
def test_a_new_window_does_not_report_an_earlier_runs_peak() -> None:
    first = memory.PeakMemoryWindow()
    big = np.ones(400 * 2**20 // 8)  # 400 MiB, every page touched
    big_peak = first.peak()
    del big  # a large numpy array is unmapped when freed: RSS falls back
    second = memory.PeakMemoryWindow()
    small = np.ones(8 * 2**20 // 8)
    small_peak = second.peak()
    del small
    assert (big_peak.scope, small_peak.scope) == ("run", "run")
    assert big_peak.mb - small_peak.mb > 300, (big_peak, small_peak)
    assert "reset at the run's start" in small_peak.note


def test_without_the_reset_the_peak_is_the_processes_and_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "_CLEAR_REFS", tmp_path / "no" / "such" / "clear_refs")
    peak = memory.PeakMemoryWindow().peak()
    assert peak.scope == "process" and peak.mb > 0
    assert "ru_maxrss" in peak.note and "cannot report less" in peak.note
