"""A fake trainer for the run-claim tests, usable in this process, in a subprocess and in a Ray
worker: it counts each training in ``CONTROL/trained.log`` (one ``pid run_id`` line) and
stores a schema-valid ``finished`` record in no time.

Modes (``CLAIM_TEST_MODE``, or the ``mode`` argument):

* ``plain``: train and store at once;
* ``meet``: this process's first training waits until two processes have each started one
  (files ``CONTROL/started-PID``), so that both provably train at the same time;
* ``hold``: this process's first training announces itself (``CONTROL/holding-PID`` holding
  the run id) and never returns (the test kills the process).

As a script: ``python -m tests.executors.claim_worker CONTROL MODE -- COMPARE-ARGS...`` runs
``dpcompare compare COMPARE-ARGS`` with the fake trainer in place of
:func:`compare.cellrun.run_one`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from compare.training import incomplete_record
from dpcore.results import ResultsStore, RunResult, run_id, utc_now

ROOT = Path(__file__).resolve().parents[2]
#: Bound on waiting for another process (a hang guard: the tests wait for files, not times).
WAIT_S = 300.0
_FIRST: dict[int, bool] = {}


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what}")
        time.sleep(0.02)


def trained(control: Path) -> list[tuple[int, str]]:
    """Every training counted so far: (pid, run id)."""
    log = control / "trained.log"
    if not log.is_file():
        return []
    return [(int(pid), rid) for pid, rid in
            (line.split() for line in log.read_text().splitlines() if line.strip())]


def fake_train(control: Path, mode: str, cell: Any, backend: str, grid_name: str,
               store: ResultsStore) -> RunResult:
    """Count one training of ``(cell, backend)``, behave as ``mode`` says, store the record."""
    rid = run_id(cell.config.config_hash, backend)
    pid = os.getpid()
    with (control / "trained.log").open("a") as handle:  # one small O_APPEND write
        handle.write(f"{pid} {rid}\n")
    first = _FIRST.setdefault(pid, True)
    _FIRST[pid] = False
    if first and mode == "meet":
        (control / f"started-{pid}").write_text(rid)
        wait_for(lambda: len(list(control.glob("started-*"))) >= 2, "the other process")
    if first and mode == "hold":
        (control / f"holding-{pid}").write_text(rid)
        while True:
            time.sleep(1)
    record = incomplete_record(cell.config, backend, None, status="finished", error="",
                               started=utc_now(), labels=cell.labels, grid_name=grid_name)
    record.error = None
    store.save(record)
    return record


def fake_run_one(cell: Any, backend: str, grid: Any, store: ResultsStore, datasets: Any,
                 **_options: Any) -> RunResult:
    """Stands in for :func:`compare.cellrun.run_one` (same signature)."""
    control = Path(os.environ["CLAIM_TEST_CONTROL"])
    return fake_train(control, os.environ.get("CLAIM_TEST_MODE", "plain"), cell, backend,
                      grid.name, store)


def start_worker(control: Path, mode: str, out: Path, *extra: str) -> subprocess.Popen[str]:
    """``dpcompare compare --preset smoke --out OUT --no-report EXTRA`` with the fake trainer
    in ``mode``, in a new process (output: its stdout, stderr merged)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.executors.claim_worker", str(control), mode, "--",
         "--preset", "smoke", "--out", str(out), "--no-report", *extra],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def main(argv: list[str]) -> int:
    from compare import cellrun
    from compare.cli.main import main as cli

    control, mode, sep, *args = argv
    assert sep == "--", argv
    os.environ["CLAIM_TEST_CONTROL"] = control
    os.environ["CLAIM_TEST_MODE"] = mode
    cellrun.run_one = fake_run_one
    return cli(["compare", *args])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
