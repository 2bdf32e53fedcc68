"""Wall time of ``dpcompare verify`` per configuration, as the README's table quotes it.

``python -m benchmarks.verify_times [--out reports/benchmarks/verify-times.json] [--quick]``
runs ``python -m compare.cli.main verify --backend B --dataset D --model M --epsilon E`` (both
engines, ``--processes auto``; and for ResNet-18 also ``--engine fast``, and both engines one
after another, ``--processes 1``, and at the same time, ``--processes 2``) in a fresh process
per configuration and
backend, and records its wall-clock seconds (the framework's import included), its exit
status and the load average before and after (a loaded machine gives upper figures).
``--quick`` leaves ResNet-18 out. The JSON holds the exact command of every row;
``tests/test_readme_times.py`` checks the README's figures against it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

#: (dataset, model, target epsilon, extra verify options) of every timed configuration.
CONFIGURATIONS: tuple[tuple[str, str, float, tuple[str, ...]], ...] = (
    ("digits", "cnn4", 1.0, ()),
    ("mnist", "cnn4", 1.0, ()),
    ("retinamnist", "resnet18", 8.0, ()),
    ("retinamnist", "resnet18", 8.0, ("--engine", "fast")),
    ("retinamnist", "resnet18", 8.0, ("--processes", "1")),
    ("retinamnist", "resnet18", 8.0, ("--processes", "2")),
)
BACKENDS = ("tf", "torch")
DEFAULT_OUT = Path("reports/benchmarks/verify-times.json")


@dataclass(frozen=True)
class VerifyTime:
    """One timed ``verify`` call: ``seconds`` of wall clock, its ``exit_code`` (0: every check
    passed) and the 1-minute load average before and after it."""

    dataset: str
    model: str
    epsilon: float
    options: tuple[str, ...]
    backend: str
    command: str
    seconds: float
    exit_code: int
    load_before: float
    load_after: float


def time_verify(dataset: str, model: str, epsilon: float, options: tuple[str, ...],
                backend: str) -> VerifyTime:
    """Run one ``verify`` in a fresh Python process and time it (wall clock)."""
    argv = [sys.executable, "-m", "compare.cli.main", "verify", "--backend", backend,
            "--dataset", dataset, "--model", model, "--epsilon", f"{epsilon:g}", *options]
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    command = " ".join(["python", *argv[1:]])
    return VerifyTime(dataset, model, epsilon, options, backend, command, round(seconds, 1),
                      done.returncode, load_before, os.getloadavg()[0])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON file to write")
    parser.add_argument("--quick", action="store_true", help="leave ResNet-18 out")
    args = parser.parse_args(argv)
    rows = []
    for dataset, model, epsilon, options in CONFIGURATIONS:
        if args.quick and model == "resnet18":
            continue
        for backend in BACKENDS:
            row = time_verify(dataset, model, epsilon, options, backend)
            print(json.dumps(asdict(row)), flush=True)
            rows.append(asdict(row))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "command": "python -m benchmarks.verify_times" + (" --quick" if args.quick else ""),
        "cpus": os.cpu_count(), "rows": rows}, indent=1) + "\n", encoding="utf-8")
    return 0 if all(r["exit_code"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
