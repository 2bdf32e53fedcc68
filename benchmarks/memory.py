"""Peak resident memory of a block of code, and the memory a variant may ask for.

Peak memory is the process's peak resident set size (``VmHWM`` of ``/proc/self/status``),
reset before each measured block through ``/proc/self/clear_refs`` (Linux >= 4.0); reported
as the peak and as the increase over the RSS at the block's start. Where the reset is
unavailable ``ru_maxrss`` (monotone) is reported instead. The ``/proc`` reading and the
reset are :mod:`dpcore.memory`'s, which the training runs' peaks use too (no library offers
the reset: psutil reads the same counters but cannot clear the mark).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

from dpcore.memory import max_rss_mb, status_kib
from dpcore.memory import reset_peak_rss as reset_peak

#: Share of the memory available at a case's start that a variant's per-example gradients
#: may take (estimate); a variant over it is recorded as "not run (memory)", not attempted:
#: an out-of-memory on Linux kills the process (or a neighbour) rather than raising.
MEMORY_SHARE = 0.3
#: Bytes of one float32 entry.
FLOAT_BYTES = 4


@contextlib.contextmanager
def peak_rss() -> Iterator[dict[str, float]]:
    """Measures the block's peak RSS (MiB) and its increase over the RSS at the start."""
    out: dict[str, float] = {}
    resettable = reset_peak()
    start = status_kib("VmRSS") if resettable else None
    yield out
    if resettable and start is not None:
        peak = status_kib("VmHWM") or 0
        out.update(peak_rss_mb=peak / 1024.0, peak_increase_mb=max(0, peak - start) / 1024.0)
    else:
        out.update(peak_rss_mb=max_rss_mb(), peak_increase_mb=math.nan)


def memory_method() -> str:
    """How :func:`peak_rss` measures on this machine (for the report)."""
    if reset_peak():
        return ("per tier, the rise of the process's peak RSS (VmHWM, reset before each block "
                "via /proc/self/clear_refs) over its RSS at the block's start, during the "
                "tier's warm-up and during its timed steps: what the tier allocated on top of "
                "what was loaded already (all tiers share one process and the allocators keep "
                "freed memory, which a later tier may reuse without a rise: a lower bound of "
                "the tier's own need)")
    return ("ru_maxrss of the process (monotone: a later tier cannot report less; no per-tier "
            "figure on this system)")


def available_bytes() -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` in bytes (None where unreadable)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def per_example_gradient_bytes(examples: int, parameters: int) -> int:
    """Estimated bytes of ``examples`` materialised per-example gradients of a model with
    ``parameters`` trainable parameters, twice (the gradients and their clipped copy / the
    jacobian's workspace), float32."""
    return 2 * examples * parameters * FLOAT_BYTES


def too_big(examples: int, parameters: int, available: int | None) -> str | None:
    """Why ``examples`` per-example gradients must not be attempted, or None if they fit in
    :data:`MEMORY_SHARE` of ``available`` bytes (None: unknown, attempted)."""
    return over_share(per_example_gradient_bytes(examples, parameters), available,
                      f"{examples} per-example gradients of {parameters:,} parameters")


def over_share(need: int, available: int | None, what: str) -> str | None:
    """Why ``what`` (``need`` bytes, estimated) must not be attempted, or None if it fits in
    :data:`MEMORY_SHARE` of ``available`` bytes (None: unknown, attempted)."""
    if available is None or need <= MEMORY_SHARE * available:
        return None
    return (f"not run (memory): {what} need ~{need / 2**30:.1f} GiB, over "
            f"{MEMORY_SHARE:.0%} of the {available / 2**30:.1f} GiB available")
