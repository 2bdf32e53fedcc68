"""The ``ray`` executor: each unfinished run of a grid is one Ray task, on a local Ray or a
cluster, writing its RunResult into the same results store as the local executor.

Ray does not move files between nodes: on a multi-node cluster the store (``--out``) and the
data root must be on storage every node mounts at the same path (NFS, a shared volume), and
this package must be installed on every node. The driver (the ``dpcompare compare`` process)
only schedules, collects the results and writes the report.

Faults:

* a worker process that dies mid-run (killed, out of memory, node lost) is retried by Ray up to
  ``max_retries`` times; after the last try the driver stores the run as ``failed`` with Ray's
  reason, and the grid goes on;
* an error inside a run is recorded as ``failed`` by :func:`compare.cellrun.run_one` itself
  (not retried: it would fail the same way);
* Ctrl-C on the driver cancels the outstanding tasks (a running task gets KeyboardInterrupt,
  so ``run_one`` stores an ``interrupted`` record, redone by the next invocation) and re-raises;
  results already stored are never touched.

Ray itself is imported only when this executor is prepared, so importing this module (and the
CLI) works without the ``ray`` extra.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from compare.executors.base import GridJob, RunTracker
from compare.executors.claiming import GridClaims
from dpcore.claims import Claim, ClaimPolicy
from dpcore.errors import ConfigError
from dpcore.results import ResultsStore, RunResult, run_id, utc_now

if TYPE_CHECKING:
    from compare.cellrun import DatasetCache
    from compare.grid import GridCell

INSTALL_HINT = 'install the extra: pip install -c constraints.txt -e ".[ray]"'
#: Seconds to wait for a TCP connection to ``--ray-address`` before calling it unreachable.
CONNECT_TIMEOUT_S = 5.0
#: Seconds the driver waits for cancelled tasks to stop (and store their ``interrupted``
#: record) after Ctrl-C, before it force-kills their workers.
CANCEL_GRACE_S = 20.0
#: Seconds between two checks of the outstanding tasks (the driver stays responsive to Ctrl-C).
POLL_S = 0.5

#: A run as executed inside a Ray worker: ``(job, cell, backend) -> stored RunResult``.
RunTask = Callable[[GridJob, "GridCell", str], RunResult]


def run_in_worker(job: GridJob, cell: GridCell, backend: str) -> RunResult:
    """The body of one Ray task: :func:`compare.cellrun.run_one` against the shared store.

    Returns the stored RunResult; its ``perf["executor"]`` says where it ran (performance
    facts only: the config hash and the metrics are those of any executor).
    """
    from compare.cellrun import DatasetCache, run_one

    store = ResultsStore(job.out_dir)
    result = run_one(cell, backend, job.grid, store, DatasetCache(job.data_dir),
                     progress=False, log=lambda _msg: None)
    result.perf["executor"] = placement()
    store.save(result)  # atomic: a kill in between leaves run_one's own, complete record
    return result


def placement() -> dict[str, Any]:
    """Where this Ray task runs: the executor, the node's IP, and the GPUs Ray gave it (their
    ids, and ``CUDA_VISIBLE_DEVICES`` as the frameworks see it; empty without a GPU)."""
    import ray

    return {"name": "ray", "node_ip": ray.util.get_node_ip_address(),
            "gpu_ids": [str(gpu) for gpu in ray.get_gpu_ids()],
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}


def call_task(task: RunTask, job: GridJob, cell: GridCell, backend: str) -> RunResult:
    """The Ray remote function: calls ``task`` (shipped as an argument, so it may be any
    picklable callable such as a ``functools.partial``, which ``ray.remote`` itself refuses)."""
    return task(job, cell, backend)


@dataclass(frozen=True)
class RayOptions:
    """How runs are placed on Ray.

    Attributes:
        address: ``None`` starts a local Ray for this grid (stopped at the end); ``"auto"``
            joins the Ray already running on this machine (``ray start --head``);
            ``"HOST:PORT"`` joins that cluster's head (``ray://HOST:PORT`` uses Ray Client).
        cpus_per_run: CPU cores Ray reserves for one run (> 0; fractions allowed).
        gpus_per_run: GPUs Ray reserves for one run (>= 0; the task sees only those, through
            ``CUDA_VISIBLE_DEVICES``).
        max_concurrent: most runs in flight at once; ``None``: as many as the cluster's
            resources fit (total CPUs / cpus_per_run, and GPUs / gpus_per_run).
        max_retries: times Ray reruns a task whose worker died (>= 0).
    """

    address: str | None = None
    cpus_per_run: float = 1.0
    gpus_per_run: float = 0.0
    max_concurrent: int | None = None
    max_retries: int = 2

    def __post_init__(self) -> None:
        if not self.cpus_per_run > 0:
            raise ConfigError(f"--cpus-per-run={self.cpus_per_run} must be > 0 (e.g. 1)")
        if self.gpus_per_run < 0:
            raise ConfigError(f"--gpus-per-run={self.gpus_per_run} must be >= 0 (0: CPU only)")
        if self.max_concurrent is not None and self.max_concurrent < 1:
            raise ConfigError(f"--max-concurrent={self.max_concurrent} must be >= 1")
        if self.max_retries < 0:
            raise ConfigError(f"max_retries={self.max_retries} must be >= 0")
        if self.address not in (None, "auto"):
            split_address(self.address)  # a malformed address is an error before Ray loads


class RayExecutor:
    """Runs a grid's pending runs as Ray tasks (see the module docstring for the guarantees).

    Args:
        options: resources and address, see :class:`RayOptions`.
        task: the function a worker runs per run (default :func:`run_in_worker`); tests pass
            a wrapper around it (a module-level function or a ``functools.partial`` of one).
        init_kwargs: extra arguments of ``ray.init`` when a local Ray is started.
        claims: how runs are claimed in the store (:mod:`dpcore.claims`). The driver claims a
            run before it submits its task and keeps the claim alive (heartbeat) until the
            task's result is collected, so a driver sharing the store with other drivers or
            local processes trains only runs nobody else holds.
    """

    name = "ray"

    def __init__(self, options: RayOptions | None = None, *, task: RunTask = run_in_worker,
                 init_kwargs: dict[str, Any] | None = None,
                 claims: ClaimPolicy | None = None) -> None:
        self.options = options or RayOptions()
        self.claims = claims or ClaimPolicy()
        self.task = task
        self.init_kwargs = dict(init_kwargs or {})
        self._ray: Any = None
        self._owns_ray = False
        self._slots = 1

    def prepare(self) -> None:
        """Import Ray, connect (or start a local Ray) and check that some node can hold one
        run. Idempotent. Raises ConfigError (nothing written) when Ray is not installed, the
        address is unreachable, or no node has the requested resources."""
        if self._ray is not None:
            return
        if self.options.address is None and "ray" not in sys.modules:
            # Core Ray has no metrics agent: without this, Ray's processes log that they cannot
            # reach one. Read when Ray is imported, inherited by the local Ray started below;
            # a user's own setting wins.
            os.environ.setdefault("RAY_enable_metrics_collection", "0")
        try:
            import ray
        except ImportError as exc:
            raise ConfigError(f"--executor ray needs Ray, which is not installed; "
                              f"{INSTALL_HINT}, or use --executor local") from exc
        address = self.options.address
        if address not in (None, "auto"):
            check_reachable(address)
        if not ray.is_initialized():  # else: join the Ray this process already runs
            try:
                with warnings.catch_warnings():
                    # Ray 2.52 warns that a future Ray stops hiding GPUs from num_gpus=0 tasks.
                    warnings.simplefilter("ignore", FutureWarning)
                    if address is None:  # no dashboard / metrics agent: a grid needs neither
                        ray.init(include_dashboard=False, log_to_driver=False,
                                 configure_logging=False, **self.init_kwargs)
                    else:
                        ray.init(address=address, log_to_driver=False,
                                 configure_logging=False)
            except ConnectionError as exc:
                where = "on this machine" if address == "auto" else "there"
                raise ConfigError(
                    f"--ray-address={address}: no running Ray found {where}; start one with "
                    "'ray start --head', give the head's HOST:PORT, or omit --ray-address to "
                    "start a local Ray") from exc
            self._owns_ray = True
        self._ray = ray
        try:
            self._slots = self._check_resources()
        except ConfigError:
            self.close()
            raise

    def _check_resources(self) -> int:
        """Runs that fit at once on the cluster; ConfigError if not one fits on any node."""
        opts = self.options
        nodes = [n.get("Resources", {}) for n in self._ray.nodes() if n.get("Alive")]
        fits = [n for n in nodes if n.get("CPU", 0) >= opts.cpus_per_run
                and n.get("GPU", 0) >= opts.gpus_per_run]
        if not fits:
            most_cpu = max((n.get("CPU", 0) for n in nodes), default=0)
            most_gpu = max((n.get("GPU", 0) for n in nodes), default=0)
            raise ConfigError(
                f"--cpus-per-run={opts.cpus_per_run:g} --gpus-per-run={opts.gpus_per_run:g}: "
                f"no node of the Ray cluster has that (largest node: {most_cpu:g} CPUs, "
                f"{most_gpu:g} GPUs); ask for less or add such a node")
        slots = sum(int(n.get("CPU", 0) // opts.cpus_per_run) if opts.gpus_per_run == 0 else
                    min(int(n.get("CPU", 0) // opts.cpus_per_run),
                        int(n.get("GPU", 0) // opts.gpus_per_run)) for n in fits)
        return max(1, slots)

    @property
    def slots(self) -> int:
        """Runs in flight at once: ``max_concurrent``, or what the cluster fits."""
        return self.options.max_concurrent or self._slots

    def run(self, job: GridJob, pending: Sequence[tuple[GridCell, str]],
            tracker: RunTracker, log: Callable[[str], None], datasets: DatasetCache) -> None:
        self.prepare()
        ray = self._ray
        remote = ray.remote(num_cpus=self.options.cpus_per_run,
                            num_gpus=self.options.gpus_per_run,
                            max_retries=self.options.max_retries,
                            retry_exceptions=False,
                            runtime_env={"env_vars": bench_environment()})(call_task)
        in_flight: dict[Any, tuple[GridCell, str, Claim]] = {}
        with (GridClaims(job.out_dir, pending, tracker, log, self.claims).active() as claims,
              _ctrl_c_as_flag() as interrupted):
            try:
                while True:
                    while len(in_flight) < self.slots and (taken := claims.next()) is not None:
                        cell, backend, claim = taken
                        in_flight[remote.remote(self.task, job, cell, backend)] = taken
                        tracker.started(cell, backend)
                    if not in_flight:
                        if claims.wait():
                            continue
                        break
                    ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=POLL_S)
                    if interrupted.is_set():
                        raise KeyboardInterrupt
                    for ref in ready:
                        cell, backend, claim = in_flight.pop(ref)
                        result = self._collect(ref, job, cell, backend, log)
                        result = claims.finished(claim, result)
                        tracker.finished(run_id(cell.config.config_hash, backend), result)
            except KeyboardInterrupt:
                self._cancel(list(in_flight), log)
                raise

    def _collect(self, ref: Any, job: GridJob, cell: GridCell, backend: str,
                 log: Callable[[str], None]) -> RunResult:
        """The task's RunResult, or a ``failed`` record stored by the driver when the task
        itself died (worker killed after the last retry, task code not importable...)."""
        ray = self._ray
        try:
            return ray.get(ref)
        except ray.exceptions.RayError as exc:
            from compare.cellrun import failed_cell_record

            reason = (f"Ray task failed after {self.options.max_retries} retr"
                      f"{'y' if self.options.max_retries == 1 else 'ies'}: "
                      f"{type(exc).__name__}: {one_line(exc)}")
            log(f"  {backend} {cell.setting}: failed: {reason}")
            record = failed_cell_record(cell.config, backend, job.grid, cell, None, reason,
                                    utc_now())
            record.labels = dict(cell.labels)
            record.grid = job.grid.name
            ResultsStore(job.out_dir).save(record)
            return record

    def _cancel(self, refs: list[Any], log: Callable[[str], None]) -> None:
        """Cancel ``refs`` (KeyboardInterrupt in the running tasks), wait up to
        ``CANCEL_GRACE_S`` for them to stop, then force-kill the workers of the rest."""
        ray = self._ray
        if not refs:
            return
        log(f"interrupted: cancelling {len(refs)} outstanding Ray task(s); finished results "
            "are kept, the next invocation resumes")
        for ref in refs:
            ray.cancel(ref, force=False)
        deadline = time.monotonic() + CANCEL_GRACE_S
        left = refs
        while left and time.monotonic() < deadline:
            _, left = ray.wait(left, num_returns=len(left), timeout=POLL_S)
        for ref in left:
            ray.cancel(ref, force=True)

    def close(self) -> None:
        """Shut down the Ray this executor started (a cluster it joined keeps running)."""
        if self._ray is not None and self._owns_ray:
            self._ray.shutdown()
        self._ray = None
        self._owns_ray = False


@contextlib.contextmanager
def _ctrl_c_as_flag() -> Iterator[threading.Event]:
    """While active, SIGINT (Ctrl-C) on the driver only sets the yielded event, which the
    polling loop checks after every ``ray.wait``; the previous handler is restored on exit.

    Why: Python's default handler raises KeyboardInterrupt wherever the main thread next
    checks for signals, possibly inside Ray's C code, and a driver whose SIGINT was inherited
    as ignored (a background job, nohup) gets no KeyboardInterrupt at all; either way it
    would wait forever for a task only Ctrl-C cancels. A handler that raises nothing cannot
    be lost. Off the main thread (where Python allows no signal handler) this does nothing.
    """
    event = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield event
        return
    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, lambda _signum, _frame: event.set())
    try:
        yield event
    finally:
        signal.signal(signal.SIGINT,
                      previous if previous is not None else signal.default_int_handler)


def bench_environment() -> dict[str, str]:
    """The driver's ``DPCOMPARE_*`` variables (data root, data cache), handed to every task:
    a worker on another node does not inherit the driver's environment."""
    return {key: value for key, value in os.environ.items() if key.startswith("DPCOMPARE_")}


def split_address(address: str) -> tuple[str, int]:
    """(host, port) of ``[ray://]HOST:PORT``; ConfigError naming the value otherwise."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError(f"--ray-address={address!r} is not HOST:PORT (e.g. 10.0.0.5:6379), "
                          "ray://HOST:PORT or auto")
    return host, int(port)


def check_reachable(address: str) -> None:
    """ConfigError unless a TCP connection to ``[ray://]HOST:PORT`` opens within
    ``CONNECT_TIMEOUT_S`` (Ray itself would retry for a long time before giving up)."""
    host, port = split_address(address)
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        raise ConfigError(
            f"--ray-address={address}: cannot connect ({exc.strerror or exc}); start the head "
            "with 'ray start --head' there, check HOST:PORT, or omit --ray-address to start "
            "a local Ray") from exc


def one_line(exc: BaseException) -> str:
    """The first non-empty line of an exception's message (Ray's carry tracebacks)."""
    for line in str(exc).splitlines():
        if line.strip():
            return line.strip()
    return type(exc).__name__

