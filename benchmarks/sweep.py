"""Batch-size sweep: time per example and peak memory of the fast engines and their plain
steps on cnn4 (28x28), batch 64 to 4096 (powers of 2), plotted.

Every point (variant, batch) runs in a fresh Python process (``python -m benchmarks.sweep
--worker JSON``) that imports only its own framework, so its peak RSS is its own: the process
peak (``VmHWM``) over the warm-up and timed steps, and its increase over the RSS after the
model and engine were built. Data: seeded random uint8 images of MNIST's shape (the content
does not change the cost), chunked by 256 and converted to float as in training. Time per
example is wall-clock seconds per logical step / B over the timed steps (after one untimed
warm-up step, in which the fast engines choose each layer's route by timing: the routes are
recorded with the point); process CPU time is stored too (each point runs at its own time, so the
wall-clock ratios of two points are not paired against load changes; the CPU ones are
steadier). ``isolate=False`` runs the points in this
process instead (tests: seconds instead of minutes; memory then not variant-specific).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.memory import available_bytes, reset_peak, status_kib
from benchmarks.runtime import worker_env
from benchmarks.variants import FAST_TIERS, ModelCase

#: The sweep's batch sizes (powers of 2 from 64 to 4096) and ``--quick``'s.
BATCHES = (64, 128, 256, 512, 1024, 2048, 4096)
QUICK_BATCHES = (64, 256)
#: Examples timed per point (at least 2 steps): equal work at every batch size.
EXAMPLES_PER_POINT = 4096
MODEL = "cnn4"
SHAPE = (28, 28, 1)


def steps_for(batch: int, quick: bool) -> int:
    """Timed steps of one point."""
    return 1 if quick else max(2, EXAMPLES_PER_POINT // batch)


def measure_point(variant: str, batch: int, steps: int, seed: int = 0) -> dict[str, Any]:
    """Build ``variant`` for cnn4 at ``batch``, run one warm-up and ``steps`` timed steps."""
    from benchmarks.variants import make_batches, tf_variants, torch_variants

    rng = np.random.default_rng(seed)
    n = max(batch, 4096)
    x = rng.integers(0, 256, (n, *SHAPE), dtype=np.uint8)
    y = rng.integers(0, 10, n).astype(np.int64)
    case = ModelCase(MODEL, SHAPE, 10, batch)
    build = tf_variants if variant.startswith("tf") else torch_variants
    (v,) = build(case, [variant], available_bytes())
    if v.run is None:
        return {"skipped": v.skipped or "not run"}
    warm = make_batches(x, y, batch, 1, seed=1, task="image")
    timed = make_batches(x, y, batch, steps, seed=2, task="image")
    resettable = reset_peak()
    start_kib = status_kib("VmRSS") or 0
    v.run(warm)
    wall, cpu = time.perf_counter(), time.process_time()
    v.run(timed)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    peak_kib = (status_kib("VmHWM") or 0) if resettable else 0
    record = v.engine.perf_record() if hasattr(v.engine, "perf_record") else {}
    v.close()
    return {**({"routes": record["routes"]} if record.get("routes") else {}),
            "seconds_per_example": wall / (steps * batch),
            "cpu_seconds_per_example": cpu / (steps * batch),
            "seconds_per_step": wall / steps, "steps_timed": steps,
            "peak_rss_mb": peak_kib / 1024.0 if resettable else None,
            "peak_increase_mb": max(0, peak_kib - start_kib) / 1024.0 if resettable else None}


def _isolated(variant: str, batch: int, steps: int) -> dict[str, Any]:
    """:func:`measure_point` in a fresh process (its JSON on stdout)."""
    env, root = worker_env()
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.sweep", "--worker",
         json.dumps({"variant": variant, "batch": batch, "steps": steps})],
        capture_output=True, text=True, env=env, cwd=root, check=False)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"skipped": f"failed (exit {done.returncode}): {tail}"[:300]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_sweep(*, quick: bool = False, isolate: bool = True,
              batches: Sequence[int] | None = None, variants: Sequence[str] = FAST_TIERS,
              log: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Every (variant, batch) point; the points, and the fast / plain ratios per batch."""
    sizes = list(batches or (QUICK_BATCHES if quick else BATCHES))
    points: dict[str, dict[str, Any]] = {v: {} for v in variants}
    for batch in sizes:
        for variant in variants:
            steps = steps_for(batch, quick)
            log(f"[sweep] {variant} b{batch}: {steps} steps"
                + (" (fresh process)" if isolate else ""))
            point = (_isolated(variant, batch, steps) if isolate
                     else measure_point(variant, batch, steps))
            points[variant][str(batch)] = point
    return {"model": MODEL, "input_shape": list(SHAPE), "batches": sizes, "isolated": isolate,
            "points": points, "time_ratios": _ratios(points, sizes, "seconds_per_example"),
            "cpu_time_ratios": _ratios(points, sizes, "cpu_seconds_per_example"),
            "memory_ratios": _ratios(points, sizes, "peak_rss_mb"),
            "memory_increase_ratios": _ratios(points, sizes, "peak_increase_mb")}


def _ratios(points: dict[str, dict[str, Any]], sizes: Sequence[int], measure: str
            ) -> dict[str, dict[str, float | None]]:
    out: dict[str, dict[str, float | None]] = {}
    for batch in map(str, sizes):
        row: dict[str, float | None] = {}
        for fast, plain in (("tf_dp_fast", "tf_plain"), ("torch_dp_fast", "torch_plain"),
                            ("tf_dp_fast", "torch_dp_fast")):
            top = points.get(fast, {}).get(batch, {}).get(measure)
            bottom = points.get(plain, {}).get(batch, {}).get(measure)
            row[f"{fast}/{plain}"] = top / bottom if top is not None and bottom else None
        out[batch] = row
    return out


def table(sweep: dict[str, Any]) -> list[list[str]]:
    """Rows: batch, then per variant ms per example and peak RSS MiB (``-`` if not run)."""
    rows = []
    for batch in map(str, sweep["batches"]):
        row = [batch]
        for variant in sweep["points"]:
            p = sweep["points"][variant].get(batch, {})
            if "seconds_per_example" not in p:
                row += ["-", "-"]
                continue
            peak = p.get("peak_rss_mb")
            row += [f"{1000 * p['seconds_per_example']:.3f}",
                    "n/a" if peak is None else f"{peak:.0f}"]
        rows.append(row)
    return rows


def plot_sweep(sweep: dict[str, Any], path: str | Path) -> Path:
    """Two panels (ms per example; peak RSS MiB) against the batch on a log-2 x axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    styles = {"tf_plain": ("tab:orange", "--"), "tf_dp_fast": ("tab:orange", "-"),
              "torch_plain": ("tab:blue", "--"), "torch_dp_fast": ("tab:blue", "-")}
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(10, 4))
    for variant, points in sweep["points"].items():
        xs = [b for b in sweep["batches"] if "seconds_per_example" in points.get(str(b), {})]
        if not xs:
            continue
        color, line = styles.get(variant, ("gray", ":"))
        ax_t.plot(xs, [1000 * points[str(b)]["seconds_per_example"] for b in xs], line,
                  color=color, marker="o", label=variant)
        mem = [(b, points[str(b)].get("peak_rss_mb")) for b in xs]
        mem = [(b, m) for b, m in mem if m is not None]
        if mem:
            ax_m.plot([b for b, _ in mem], [m for _, m in mem], line, color=color, marker="o",
                      label=variant)
    where = "each point in a fresh process" if sweep["isolated"] else "one process"
    for ax, label in ((ax_t, "ms per example (wall clock)"), (ax_m, "peak RSS (MiB)")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sweep["batches"], [str(b) for b in sweep["batches"]])
        ax.set_xlabel("logical batch size B (chunks of 256)")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
    ax_t.set_title(f"{sweep['model']} 28x28: time per example")
    ax_m.set_title(f"peak memory ({where})")
    handles, labels = ax_t.get_legend_handles_labels()
    if handles:  # one legend for both panels, outside them, so that no line is hidden
        # long handles, so that the dashed (plain) and solid (DP) lines tell apart
        fig.legend(handles, labels, loc="center right", fontsize=8, handlelength=4)
    fig.tight_layout(rect=(0, 0, 0.86 if handles else 1, 1))
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _worker(spec: str) -> int:
    """``--worker JSON``: one point, its JSON on the last stdout line."""
    args = json.loads(spec)
    from benchmarks.runtime import configure

    configure(frameworks=("tf",) if args["variant"].startswith("tf") else ("torch",))
    result = measure_point(args["variant"], int(args["batch"]), int(args["steps"]))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--worker", required=True, help="JSON: variant, batch, steps")
    sys.exit(_worker(parser.parse_args().worker))
