"""Peak memory of one training run: the peak resident set size (RSS) of this process from the
run's start, where the operating system can reset the peak, else since the process started.

A grid trains all its runs in one process. ``getrusage``'s ``ru_maxrss`` never goes down, so
by it every run of a grid after the largest reports the largest run's peak (both backends of
``mnist-tuned`` showed 1466 MiB). Linux resets the peak RSS (``VmHWM`` in
``/proc/self/status``) when ``5`` is written to ``/proc/self/clear_refs`` (kernel >= 4.0,
``Documentation/filesystems/proc.rst``); Python and psutil offer no reset, so this module
does it by hand. ``benchmarks/memory.py`` measures its variants with the same primitives
(:func:`status_kib`, :func:`reset_peak_rss`, :func:`max_rss_mb`).

The run's peak includes everything resident at its start (framework runtime, data sets,
models of earlier runs not yet freed): compare runs of one process, or runs of one kind.
"""

from __future__ import annotations

import resource
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PeakMemory", "PeakMemoryWindow", "max_rss_mb", "reset_peak_rss", "status_kib"]

_CLEAR_REFS = Path("/proc/self/clear_refs")
_STATUS = Path("/proc/self/status")


@dataclass(frozen=True)
class PeakMemory:
    """A peak resident set size.

    Attributes:
        mb: the peak, in MiB.
        scope: ``run`` (since the window started) or ``process`` (since the process
            started; a later run of the same process cannot report less than an earlier one).
    """

    mb: float
    scope: str

    @property
    def note(self) -> str:
        """What the number is, for the run record."""
        if self.scope == "run":
            return ("peak resident set size of the process during this run (Linux VmHWM, "
                    "reset at the run's start; includes the data and runtime already loaded)")
        return ("process peak resident set size since the process started (getrusage "
                "ru_maxrss; a later run of the same process cannot report less)")


class PeakMemoryWindow:
    """The peak RSS from the moment this object is made (``scope == "run"``), or, where the
    kernel offers no reset, since the process started (``scope == "process"``)."""

    def __init__(self) -> None:
        self.scope = "run" if reset_peak_rss() else "process"

    def peak(self) -> PeakMemory:
        """The peak so far, in MiB."""
        if self.scope == "run":
            high_water = status_kib("VmHWM")
            if high_water is not None:
                return PeakMemory(high_water / 1024.0, "run")
        return PeakMemory(max_rss_mb(), "process")


def status_kib(key: str) -> int | None:
    """The ``key`` line of ``/proc/self/status`` in KiB (``VmHWM``: peak RSS, ``VmRSS``: RSS
    now), or None where unreadable (not Linux)."""
    try:
        for line in _STATUS.read_text(encoding="ascii").splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return None


def reset_peak_rss() -> bool:
    """Reset the kernel's peak RSS (``VmHWM``) of this process (Linux >= 4.0); False where that
    is not possible."""
    if not sys.platform.startswith("linux") or status_kib("VmHWM") is None:
        return False
    try:
        _CLEAR_REFS.write_text("5", encoding="ascii")
    except OSError:
        return False
    return True


def max_rss_mb() -> float:
    """The process's peak RSS since it started, in MiB (``getrusage`` ru_maxrss; monotone)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    scale = 1024.0 * 1024.0 if sys.platform == "darwin" else 1024.0  # macOS reports bytes
    return float(rss) / scale
