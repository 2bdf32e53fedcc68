"""The ray executor on one local Ray (2 CPUs, started once for this module): the same
results as the local executor, finished runs skipped, a killed worker retried then recorded
as failed while the grid goes on, two workers writing one store at once, Ctrl-C on the driver,
the bad-input errors, and run claims (a Ray driver and a local process sharing one store train
each run once; a claim of a SIGKILLed process is taken over, a live one left to its holder).

Faults are made deterministic by task wrappers (module-level functions, so Ray ships them
by reference) that react to files in a folder the test controls: a worker kills itself with
SIGKILL (a real process death), two runs wait for each other before writing, a run blocks
until the driver has been interrupted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import pytest

ray = pytest.importorskip(
    "ray", reason="the ray executor tests need Ray: pip install -c constraints.txt -e '.[ray]'")

from compare.cli.main import main  # noqa: E402
from compare.executors import Executor, GridJob  # noqa: E402
from compare.executors.ray_executor import RayExecutor, RayOptions, run_in_worker  # noqa: E402
from compare.grid import Grid, GridCell, expand_grid, load_preset  # noqa: E402
from compare.runner import GridOutcome, run_grid  # noqa: E402
from dpcore.claims import ClaimBoard, ClaimPolicy  # noqa: E402
from dpcore.results import ResultsStore, RunResult, read_result, run_id  # noqa: E402
from tests.executors.claim_worker import fake_train, start_worker, trained  # noqa: E402

#: Bound on waiting for a state another process must reach (a hang guard, not a timing race:
#: every test waits for a file, never for a duration).
WAIT_S = 300.0


@pytest.fixture(scope="module", autouse=True)
def local_ray() -> Iterator[None]:
    """One local Ray for the module; the executors join it (and so leave it running)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RAY_enable_metrics_collection", "0")  # core Ray has no metrics agent
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # Ray 2.52: future GPU masking note
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                     object_store_memory=256 * 1024**2,  # results are small
                     configure_logging=False)
        yield
        ray.shutdown()


def smoke_grid(backends: list[str] | None = None) -> Grid:
    return expand_grid(load_preset("smoke"), backends=backends)


def quiet_run(grid: Grid, out: Path, executor: Executor) -> GridOutcome:
    return run_grid(grid, out, progress=False, log=lambda _m: None, executor=executor)


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


def attempt(control: Path, rid: str) -> int:
    """Count this try of run ``rid`` in ``control``; returns its number (1 = first try)."""
    log = control / f"{rid}.attempts"
    with log.open("a") as handle:
        handle.write(f"{os.getpid()}\n")
    return len(log.read_text().split())


# --- task wrappers run inside the Ray workers -------------------------------------------------

def die_then_run(control: Path, always_dies: str, dies_once: str, job: GridJob,
                 cell: GridCell, backend: str) -> RunResult:
    """SIGKILL this worker on every try of ``always_dies`` and on the first of ``dies_once``."""
    rid = run_id(cell.config.config_hash, backend)
    tries = attempt(control, rid)
    if rid == always_dies or (rid == dies_once and tries == 1):
        os.kill(os.getpid(), signal.SIGKILL)
    return run_in_worker(job, cell, backend)


def meet_then_run(control: Path, job: GridJob, cell: GridCell, backend: str) -> RunResult:
    """Wait until both runs are in a worker, then both train and write the store at once."""
    rid = run_id(cell.config.config_hash, backend)
    seen = {"pid": os.getpid(), "cache": os.environ.get("DPCOMPARE_CACHE_DIR")}
    (control / f"{rid}.ready").write_text(json.dumps(seen))
    wait_for(lambda: len(list(control.glob("*.ready"))) == 2, "the other worker")
    return run_in_worker(job, cell, backend)


def block_second(control: Path, job: GridJob, cell: GridCell, backend: str) -> RunResult:
    """The first run trains; the second announces itself and blocks until cancelled."""
    rid = run_id(cell.config.config_hash, backend)
    if attempt(control, "order") == 2:
        (control / "blocked").write_text(rid)
        while True:  # cancelled by the driver's Ctrl-C (KeyboardInterrupt raised here)
            time.sleep(0.05)
    return run_in_worker(job, cell, backend)


def fake_task(control: Path, mode: str, job: GridJob, cell: GridCell,
              backend: str) -> RunResult:
    """The claim tests' fake trainer (counts the training, stores a record at once)."""
    return fake_train(control, mode, cell, backend, job.grid.name, ResultsStore(job.out_dir))


# --- tests --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def local_and_ray(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The smoke preset run by both executors into two stores."""
    local_out = tmp_path_factory.mktemp("local")
    ray_out = tmp_path_factory.mktemp("ray")
    assert main(["compare", "--preset", "smoke", "--out", str(local_out), "--no-report",
                 "--quiet"]) == 0
    with pytest.MonkeyPatch.context() as patch:  # a relative --out: the workers' cwd differs
        patch.chdir(ray_out.parent)
        assert main(["compare", "--preset", "smoke", "--executor", "ray", "--out",
                     ray_out.name, "--no-report", "--quiet"]) == 0
    return local_out, ray_out


def test_ray_gives_the_same_results_as_local(local_and_ray: tuple[Path, Path]) -> None:
    local = {r.run_id: r for r in ResultsStore(local_and_ray[0]).list_runs()}
    remote = {r.run_id: r for r in ResultsStore(local_and_ray[1]).list_runs()}
    assert len(local) == 4 and local.keys() == remote.keys()  # same config hashes
    for rid, a in local.items():
        b = remote[rid]
        assert a.status == b.status == "finished"
        assert a.config == b.config and a.dataset == b.dataset
        # The bench's own accounting is equal to the bit; Opacus's PRV epsilon (a library
        # figure printed beside it) sums float arrays with numpy, whose reductions were seen
        # to differ in the last digit between the two processes (1.5209243699500674 and
        # ...663): equal to 12 digits.
        theirs = dict(b.privacy)
        assert {k: v for k, v in a.privacy.items() if k != "library_epsilon"} == {
            k: v for k, v in theirs.items() if k != "library_epsilon"}
        assert a.privacy["library_epsilon"] == pytest.approx(theirs["library_epsilon"],
                                                             rel=1e-12)
        assert (local_and_ray[1] / b.checkpoint).is_file()
        assert b.perf["executor"]["name"] == "ray" and b.perf["executor"]["gpu_ids"] == []
        assert "executor" not in a.perf
        # Same metrics up to float summation order (a Ray task runs torch on 1 thread).
        assert a.metrics.keys() == b.metrics.keys()
        assert a.metrics["accuracy"] == b.metrics["accuracy"]
        assert a.metrics["loss"] == pytest.approx(b.metrics["loss"], rel=1e-6)
        assert a.metrics["per_class"] == b.metrics["per_class"]
        for ha, hb in zip(a.history, b.history, strict=True):
            assert ha["test_accuracy"] == hb["test_accuracy"]
            assert ha["loss"] == pytest.approx(hb["loss"], rel=1e-6)


def test_ray_skips_finished_runs(local_and_ray: tuple[Path, Path]) -> None:
    out = local_and_ray[1]
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.glob("runs/*/result.json")}
    executor = RayExecutor(task=partial(die_then_run, out, "", ""))  # a task that ran would
    outcome = quiet_run(smoke_grid(), out, executor)                  # leave an attempt file
    assert len(outcome.skipped) == 4 and not outcome.ran
    assert not list(out.glob("*.attempts"))
    after = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.glob("runs/*/result.json")}
    assert after == before


def test_killed_worker_is_retried_then_recorded_failed_and_the_grid_goes_on(
    tmp_path: Path,
) -> None:
    grid = smoke_grid(["torch"])
    always, once = (run_id(cell.config.config_hash, "torch") for cell in grid.cells)
    control = tmp_path / "control"
    control.mkdir()
    executor = RayExecutor(RayOptions(max_retries=1),
                           task=partial(die_then_run, control, always, once))
    outcome = quiet_run(grid, tmp_path / "out", executor)
    assert sorted(outcome.ran) == sorted([always, once])
    assert outcome.failed == [always]
    # 1 try + max_retries=1 retry each: both runs' workers really died and were replaced.
    assert len((control / f"{always}.attempts").read_text().split()) == 2
    assert len((control / f"{once}.attempts").read_text().split()) == 2
    store = ResultsStore(tmp_path / "out")
    failed = store.load(*always.rsplit("-", 1))
    assert failed is not None and failed.status == "failed"
    assert "after 1 retry" in failed.error and "WorkerCrashedError" in failed.error
    retried = store.load(*once.rsplit("-", 1))
    assert retried is not None and retried.status == "finished"


def test_two_workers_write_one_store_at_once(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    control = tmp_path / "control"
    control.mkdir()
    # Set after the module's Ray started: its workers get it only from the driver's task.
    monkeypatch.setenv("DPCOMPARE_CACHE_DIR", str(tmp_path / "cache"))
    executor = RayExecutor(RayOptions(cpus_per_run=1, max_concurrent=2),
                           task=partial(meet_then_run, control))
    outcome = quiet_run(smoke_grid(["torch"]), tmp_path / "out", executor)
    assert len(outcome.ran) == 2 and not outcome.failed
    seen = [json.loads(p.read_text()) for p in control.glob("*.ready")]
    assert len({s["pid"] for s in seen}) == 2, "the two runs must run in two workers at once"
    assert all(s["cache"] == str(tmp_path / "cache") for s in seen)  # DPCOMPARE_* passed on
    results = [read_result(p) for p in sorted((tmp_path / "out").glob("runs/*/result.json"))]
    assert len(results) == 2 and all(r is not None and r.status == "finished" for r in results)
    assert not list((tmp_path / "out").glob("runs/*/.*.tmp"))  # no stray temporary file


def test_ctrl_c_cancels_outstanding_runs_keeps_finished_ones_and_resumes(
    tmp_path: Path,
) -> None:
    control = tmp_path / "control"
    control.mkdir()
    out = tmp_path / "out"
    grid = smoke_grid(["torch"])

    def interrupt_when_blocked() -> None:
        wait_for((control / "blocked").is_file, "the blocked run")
        os.kill(os.getpid(), signal.SIGINT)

    thread = threading.Thread(target=interrupt_when_blocked, daemon=True)
    thread.start()
    with pytest.raises(KeyboardInterrupt):
        quiet_run(grid, out, RayExecutor(RayOptions(max_concurrent=1),
                                         task=partial(block_second, control)))
    thread.join()
    blocked = (control / "blocked").read_text()
    finished = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.glob("runs/*/result.json")}
    assert len(finished) == 1 and blocked not in str(next(iter(finished)))
    assert json.loads(next(iter(finished.values()))[0])["status"] == "finished"

    outcome = quiet_run(grid, out, RayExecutor())  # the next invocation resumes
    assert len(outcome.skipped) == 1 and outcome.ran == [blocked]
    for path, state in finished.items():  # the finished run was not touched
        assert (path.read_bytes(), path.stat().st_mtime_ns) == state


@pytest.mark.parametrize(("argv", "message"), [
    (["--ray-address", "127.0.0.1:1"], "--ray-address=127.0.0.1:1: cannot connect"),
    (["--gpus-per-run", "1"], "no node of the Ray cluster has that (largest node: 2 CPUs, 0 GPUs)"),
    (["--cpus-per-run", "64"], "--cpus-per-run=64 --gpus-per-run=0: no node"),
])
def test_bad_ray_input_is_a_one_line_error_and_writes_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], message: str,
) -> None:
    out = tmp_path / "out"
    code = main(["compare", "--preset", "smoke", "--executor", "ray", *argv,
                 "--out", str(out), "--report", str(tmp_path / "report")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert message in err
    assert not out.exists() and not (tmp_path / "report").exists()
    assert ray.is_initialized()  # the module's Ray (joined, not owned) is left running


def test_a_ray_driver_and_a_local_process_share_a_store_each_run_once(
    tmp_path: Path, processes: list[subprocess.Popen[str]],
) -> None:
    control, out = tmp_path / "control", tmp_path / "out"
    control.mkdir()
    grid = expand_grid(load_preset("smoke"), seeds=3)  # 12 runs
    local = start_worker(control, "meet", out, "--seeds", "3")
    processes.append(local)
    executor = RayExecutor(RayOptions(max_concurrent=1), task=partial(fake_task, control,
                                                                      "meet"))
    outcome = quiet_run(grid, out, executor)
    assert local.wait(timeout=WAIT_S) == 0, local.communicate()[0]
    counted = trained(control)
    every = sorted(run_id(c.config.config_hash, b) for c, b in grid.runs())
    assert sorted(rid for _pid, rid in counted) == every  # each run trained exactly once
    by_local = [rid for pid, rid in counted if pid == local.pid]
    assert by_local and len(by_local) < 12  # both sides trained (they met in a training)
    assert sorted(outcome.ran) == sorted(set(every) - set(by_local))
    assert sorted(outcome.elsewhere) == sorted(by_local)
    for rid in outcome.ran:  # the driver held the claims of its tasks
        result = ResultsStore(out).load(*rid.rsplit("-", 1))
        assert result is not None and result.perf["claim"]["pid"] == os.getpid()
    assert not list((out / "claims").iterdir())


def test_ray_takes_over_a_sigkilled_holder_and_leaves_a_live_claim(
    tmp_path: Path, processes: list[subprocess.Popen[str]],
) -> None:
    control, out = tmp_path / "control", tmp_path / "out"
    control.mkdir()
    grid = smoke_grid()
    holder = start_worker(control, "hold", out)
    processes.append(holder)
    wait_for((control / f"holding-{holder.pid}").is_file, "the worker to hold a claim")
    killed = (control / f"holding-{holder.pid}").read_text()
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    every = [run_id(c.config.config_hash, b) for c, b in grid.runs()]
    live = next(rid for rid in every if rid != killed)
    ClaimBoard(out, host="node-b", pid=7).try_claim(live)  # another host, heartbeat fresh
    executor = RayExecutor(task=partial(fake_task, control, "plain"),
                           claims=ClaimPolicy(wait_s=0))
    outcome = quiet_run(grid, out, executor)
    assert outcome.still_claimed == [live]
    assert sorted(outcome.ran) == sorted(set(every) - {live})
    taken = ResultsStore(out).load(*killed.rsplit("-", 1))
    assert taken is not None and taken.status == "finished"
    assert taken.perf["claim"]["taken_over_from"]["pid"] == holder.pid
    assert (out / "claims" / f"{live}.json").is_file()
