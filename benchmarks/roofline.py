"""This CPU's peak FLOP/s and memory bandwidth, measured with two torch micro-benchmarks, for the
cost model's roofline (:mod:`benchmarks.costmodel`).

* **peak FLOP/s**: one float32 ``torch.mm`` of two :data:`GEMM_SIZE` square matrices (2 n^3
  FLOP), the fastest of :data:`REPEATS` runs after one untimed run, with torch's intra-op
  threads as training uses them: what one large product reaches (the plain step's weight
  gradients are such products; small batched products reach less);
* **memory bandwidth**: ``dst.copy_(src)`` of two :data:`COPY_MB` MiB float32 tensors (bytes
  moved = 2 x the size: one read, one write; both touched before timing, so no page faults),
  the fastest of :data:`REPEATS` runs: the stream bandwidth an elementwise op sees.

On a loaded machine both are lower bounds of the idle figures (the fastest run is kept so
that an occasional preemption does not count).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

GEMM_SIZE = 2048
COPY_MB = 256
REPEATS = 5


def fastest(run: Callable[[], Any], repeats: int = REPEATS) -> float:
    """Wall-clock seconds of the fastest of ``repeats`` calls of ``run`` (after one untimed
    call)."""
    run()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def measure() -> dict[str, Any]:
    """``{"peak_flops", "bandwidth_bytes_per_s", "threads", "method"}`` of this CPU."""
    import torch

    a = torch.randn(GEMM_SIZE, GEMM_SIZE)
    b = torch.randn(GEMM_SIZE, GEMM_SIZE)
    gemm = fastest(lambda: torch.mm(a, b))
    elements = COPY_MB * 1024 * 1024 // 4
    src = torch.ones(elements)
    dst = torch.zeros(elements)
    copy = fastest(lambda: dst.copy_(src))
    return {"peak_flops": 2.0 * GEMM_SIZE ** 3 / gemm,
            "bandwidth_bytes_per_s": 2.0 * 4 * elements / copy,
            "threads": torch.get_num_threads(),
            "method": (f"peak: float32 torch.mm of two {GEMM_SIZE}x{GEMM_SIZE} matrices; "
                       f"bandwidth: torch copy_ of {COPY_MB} MiB (read + write); fastest of "
                       f"{REPEATS} runs each, {torch.get_num_threads()} torch threads")}
