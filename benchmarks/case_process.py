"""One benchmark case in a fresh Python process (:func:`run_case_in_process`), so that what
a case allocates (both frameworks' models, traced and compiled steps, the per-layer probes,
the allocators' kept memory) is given back before the next case starts.

Measured: the full ``dpcompare bench`` in one process grew past 20 GB of resident memory by
``resnet18_b256``'s per-layer costs and was killed by the kernel's out-of-memory killer on
this 24 GB machine; each case's own peak is far lower. A case's figures are the same
whichever process runs it (its tiers still share one process, as :mod:`benchmarks.bench`
describes); only the process peak becomes per case.

The worker (``python -m benchmarks.case_worker JSON``, :mod:`benchmarks.case_worker`) prints
its progress lines on stderr (prefixed by :data:`LOG_PREFIX`, forwarded live to the caller's
``log``) and its result as JSON on the last line of stdout. A plain ``subprocess``, as
:mod:`benchmarks.sweep`'s isolated points use: ``multiprocessing`` would unpickle the
parent's objects, and their frameworks, into the child.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from benchmarks.layer_costs import layer_tables
from benchmarks.runtime import worker_env
from dpcore.errors import DpCompareError

#: Marks a worker's progress line on its stderr (other stderr lines are the frameworks').
LOG_PREFIX = "@@bench "
#: Lines of a failed worker's stderr kept for its error message.
TAIL_LINES = 5


def history_to_json(history: dict[tuple[str, str, str], tuple[str, float]]) -> list[Any]:
    return [[*key, case, ratio] for key, (case, ratio) in history.items()]


def history_from_json(rows: list[Any]) -> dict[tuple[str, str, str], tuple[str, float]]:
    return {(fw, name, model): (case, float(ratio)) for fw, name, model, case, ratio in rows}


def run_worker(argv: list[str], env: dict[str, str], cwd: str,
               log: Callable[[str], None]) -> tuple[int, str, list[str]]:
    """Run ``argv``; forward its stderr lines that start with :data:`LOG_PREFIX` to ``log``
    as they come. Returns (exit status, its whole stdout, the last :data:`TAIL_LINES` other
    stderr lines). Stdout is drained by a thread of its own while stderr is read: a worker
    whose result outgrows the pipe's buffer would otherwise block on its write while this
    side waits for its stderr to end (measured: the ResNet-18 case's figures hung there)."""
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    chunks: list[str] = []
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=env, cwd=cwd) as child:
        assert child.stderr is not None and child.stdout is not None
        stdout = child.stdout
        reader = threading.Thread(target=lambda: chunks.append(stdout.read()), daemon=True)
        reader.start()
        for line in child.stderr:
            line = line.rstrip("\n")
            if line.startswith(LOG_PREFIX):
                log(line[len(LOG_PREFIX):])
            elif line.strip():
                tail.append(line.strip())
        reader.join()
        code = child.wait()
    return code, "".join(chunks), list(tail)


def run_case_in_process(case: Any, *, quick: bool, data_dir: str | None, compile_steps: bool,
                        roofline: dict[str, Any] | None,
                        history: dict[tuple[str, str, str], tuple[str, float]],
                        log: Callable[[str], None] = lambda _: None
                        ) -> tuple[dict[str, Any], str]:
    """:func:`benchmarks.bench.run_case` of ``case`` (a :class:`benchmarks.bench.Case`) in a
    fresh process, then each of its per-layer tables in a fresh process of its own (a table
    whose process fails, e.g. killed for memory, is recorded as skipped with why: measured,
    the ResNet-18 case at batch 256, in a process of its own, was killed for memory during
    its per-layer tables, and its timings went with it); returns (its figures, its data's
    description) and updates ``history``
    (the compile give-ups, :func:`benchmarks.bench.choose_compiled`) in place.

    Raises:
        DpCompareError: the worker failed (its exit status, whether the kernel killed it, and
            the last lines of its stderr).
    """
    env, root = worker_env()
    spec = {"case": dataclasses.asdict(case), "quick": quick, "data_dir": data_dir,
            "compile_steps": compile_steps, "roofline": roofline,
            "history": history_to_json(history)}
    code, out, tail = run_worker(
        [sys.executable, "-m", "benchmarks.case_worker", json.dumps(spec)], env, root, log)
    if code != 0:
        raise DpCompareError(f"benchmark case {case.name} failed in its own process: exit "
                             f"{code}{_killed(code)}; last lines: " + " | ".join(tail))
    result = json.loads(out.strip().splitlines()[-1])
    history.update(history_from_json(result["history"]))
    figures = result["figures"]
    figures["layers"] = {}
    for table in layer_tables(case.tiers):  # each table in a process of its own
        code, out, tail = run_worker([sys.executable, "-m", "benchmarks.case_worker",
                                      json.dumps({**spec, "layers": table})], env, root, log)
        if code == 0:
            figures["layers"].update(json.loads(out.strip().splitlines()[-1])["layers"])
        else:  # recorded, as a table that raises is (the benchmark goes on)
            figures["layers"][table] = {"skipped": (
                f"failed in its own process: exit {code}{_killed(code)}; last lines: "
                + " | ".join(tail))[:300]}
    return figures, result["data"]


def _killed(code: int) -> str:
    return (" (killed by signal 9: most likely the kernel's out-of-memory killer)"
            if code == -9 else "")
