"""What produced a run: the provenance every RunResult carries (``RunResult.provenance``).

A difference between two records of one config can come from the code or from the machine.
The record says both, so a reproduction (:mod:`compare.reproduce`) can tell which:

* ``sources``: a SHA-256 digest of the training-path sources (:data:`TRAINING_SOURCES`, the
  one definition of that set: every ``.py`` file of ``dpcore``, ``tfpipe`` and ``torchpipe``
  and the modules of ``compare`` a run goes through), with one digest per part, so a changed
  digest names the package that changed;
* ``git``: the commit, where the training-path sources have no uncommitted change (else
  ``commit`` is null and ``modified`` lists them; outside a git checkout a note says so);
* ``packages``: the installed versions of every package whose code computes a recorded
  figure (a superset of ``RunResult.versions``);
* ``cpu``: the CPU's model name and its instruction-set flags among :data:`ISA_FLAGS` (from
  ``/proc/cpuinfo``; the kernels TensorFlow, PyTorch and numpy pick depend on them), the
  logical CPU count and the CPUs this process may run on;
* ``threads``: the thread counts in effect (the framework's, as the backend reports them in
  ``perf.threads_in_effect``; the threads asked for, ``perf.threads``; the thread variables
  of the environment);
* ``device``: where the run computed (``perf.device``: ``cpu``, ``cuda:0``, ``/device:CPU:0``).

Reading the sources and asking git happen once per process (the code a process trains with
is the code it imported). Nothing here imports a framework.
"""

from __future__ import annotations

import copy
import hashlib
import os
import platform
import subprocess
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from dpcore.backend import BACKEND_PACKAGES

__all__ = [
    "ISA_FLAGS", "PROVENANCE_PACKAGES", "THREAD_VARIABLES", "TRAINING_SOURCES",
    "cpu_record", "current_sources", "git_record", "provenance_record", "repository_root",
    "source_digest", "source_files",
]

#: The training-path sources, relative to the repository root (the folder holding the
#: ``dpcore`` package): a package folder means every ``.py`` file under it, a file itself.
#: The one definition of the set the ``sources`` digest covers.
TRAINING_SOURCES: tuple[str, ...] = (
    "dpcore", *BACKEND_PACKAGES.values(),
    "compare/training.py", "compare/cellrun.py", "compare/calibrators.py",
)

#: Packages whose installed versions a record's provenance lists (the code of each computes
#: part of a recorded figure: training, accounting, metrics, the audit, the scattering).
PROVENANCE_PACKAGES: tuple[str, ...] = (
    "numpy", "scipy", "scikit-learn", "dp-accounting", "tensorflow", "tensorflow-privacy",
    "tensorflow-empirical-privacy", "keras", "torch", "opacus", "kymatio",
)

#: The instruction-set flags recorded when the CPU has them (x86: the SIMD and FMA extensions
#: the frameworks' kernels dispatch on; Arm: ``asimd``/``sve``).
ISA_FLAGS: tuple[str, ...] = (
    "sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512dq", "avx512bw",
    "avx512vl", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16",
    "amx_int8", "asimd", "sve", "sve2",
)

#: Environment variables that set thread counts of the numeric libraries.
THREAD_VARIABLES: tuple[str, ...] = (
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TF_NUM_INTRAOP_THREADS",
    "TF_NUM_INTEROP_THREADS", "OMP_WAIT_POLICY",
)

#: Where the CPU describes itself on Linux.
CPUINFO = Path("/proc/cpuinfo")


def repository_root() -> Path:
    """The folder holding the ``dpcore`` package (a checkout's root, or site-packages)."""
    return Path(__file__).resolve().parent.parent


def source_files(root: Path | None = None) -> list[tuple[str, Path]]:
    """(path relative to ``root`` in POSIX form, file) of every training-path source
    (:data:`TRAINING_SOURCES`) under ``root`` (default :func:`repository_root`), sorted by
    the relative path; an entry absent under ``root`` contributes nothing."""
    root = root or repository_root()
    found: dict[str, Path] = {}
    for entry in TRAINING_SOURCES:
        path = root / entry
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path] if path.is_file() else []
        for file in files:
            if "__pycache__" not in file.parts:
                found[file.relative_to(root).as_posix()] = file
    return sorted(found.items())


def source_digest(root: Path | None = None) -> dict[str, Any]:
    """The ``sources`` entry: ``digest`` (SHA-256, hex, of every training-path source's
    relative path and SHA-256 of its bytes, in path order), ``parts`` (the same digest per
    top-level folder: ``dpcore``, ``tfpipe``, ``torchpipe``, ``compare``) and ``files`` (how
    many files). Two checkouts with byte-identical training sources give the same digest."""
    total = hashlib.sha256()
    parts: dict[str, Any] = {}
    files = source_files(root)
    for relative, path in files:
        line = f"{relative}\0{hashlib.sha256(path.read_bytes()).hexdigest()}\n".encode()
        total.update(line)
        parts.setdefault(relative.split("/", 1)[0], hashlib.sha256()).update(line)
    return {"digest": total.hexdigest(), "files": len(files),
            "parts": {name: h.hexdigest() for name, h in sorted(parts.items())}}


def _git(root: Path, *args: str) -> str | None:
    """Output of ``git -C root ARGS`` (stripped), or None when git is missing or fails."""
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True,
                              text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_record(root: Path | None = None) -> dict[str, Any]:
    """The ``git`` entry: ``{"commit": SHA, "clean": True}`` when ``root`` is the top of a git
    checkout whose training-path sources match its HEAD; ``{"commit": None, "head": SHA,
    "clean": False, "modified": [...]}`` when some differ (uncommitted or untracked; the
    ``sources`` digest identifies the code that ran); ``{"commit": None, "note": ...}`` when
    there is no git checkout (an installed package) or no git."""
    root = (root or repository_root()).resolve()
    top = _git(root, "rev-parse", "--show-toplevel")
    if top is None:
        return {"commit": None, "note": "not a git checkout (or git is not installed): the "
                                        "sources digest identifies the code"}
    if Path(top).resolve() != root:
        return {"commit": None, "note": "the packages are not at the root of a git checkout: "
                                        "the sources digest identifies the code"}
    head = _git(root, "rev-parse", "HEAD")
    changed = _git(root, "diff", "--name-only", "HEAD", "--", *TRAINING_SOURCES)
    untracked = _git(root, "ls-files", "--others", "--exclude-standard", "--",
                     *TRAINING_SOURCES)
    if head is None or changed is None or untracked is None:
        return {"commit": None, "note": "git could not read the checkout's HEAD or status"}
    modified = sorted({name.strip() for name in (changed + "\n" + untracked).splitlines()
                       if name.strip().endswith(".py")})
    if not modified:
        return {"commit": head, "clean": True}
    return {"commit": None, "head": head, "clean": False, "modified": modified}


def _cpuinfo_fields(text: str) -> dict[str, str]:
    """The first value of each ``name : value`` line of ``/proc/cpuinfo`` text."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip() and name.strip() not in out:
            out[name.strip()] = value.strip()
    return out


def cpu_record(cpuinfo: str | None = None) -> dict[str, Any]:
    """The ``cpu`` entry: ``model`` (the model name), ``isa`` (the flags of :data:`ISA_FLAGS`
    the CPU has, in that order), ``logical_cpus`` and ``usable_cpus`` (those this process may
    run on). ``cpuinfo``: the text of ``/proc/cpuinfo`` (default: read it); without it (not
    Linux) ``model`` is :func:`platform.processor` and ``isa`` is None with a note."""
    if cpuinfo is None:
        try:
            cpuinfo = CPUINFO.read_text(encoding="utf-8", errors="replace")
        except OSError:
            cpuinfo = None
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    out: dict[str, Any] = {"logical_cpus": os.cpu_count(), "usable_cpus": usable}
    if not cpuinfo:
        return {**out, "model": platform.processor() or platform.machine(), "isa": None,
                "note": "no /proc/cpuinfo: instruction-set flags not known"}
    fields = _cpuinfo_fields(cpuinfo)
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    model = fields.get("model name") or fields.get("Model") or fields.get("CPU part") or ""
    return {**out, "model": model or platform.processor() or platform.machine(),
            "isa": [flag for flag in ISA_FLAGS if flag in flags]}


def package_versions() -> dict[str, str]:
    """Installed version of each of :data:`PROVENANCE_PACKAGES` (absent ones left out)."""
    from dpcore.results import installed_versions

    return installed_versions(PROVENANCE_PACKAGES)


@cache
def _process_provenance() -> dict[str, Any]:
    """What is fixed for the process: sources, git, packages, CPU, Python and platform."""
    return {"sources": source_digest(), "git": git_record(), "packages": package_versions(),
            "cpu": cpu_record(), "python": platform.python_version(),
            "platform": platform.platform()}


def current_sources() -> dict[str, Any]:
    """The ``sources`` entry of the code this process runs (computed once per process)."""
    return copy.deepcopy(_process_provenance()["sources"])


def provenance_record(perf: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The RunResult ``provenance`` entry of a run whose ``perf`` record (the performance
    switches and what the backend reported: ``threads_in_effect``, ``device``) is ``perf``:
    the process's sources, git, packages, CPU, Python and platform (computed once per process)
    plus this run's ``threads`` and ``device``. JSON-ready; names no folder of the machine."""
    perf = perf or {}
    env = {name: os.environ[name] for name in THREAD_VARIABLES if name in os.environ}
    return {
        **copy.deepcopy(_process_provenance()),
        "threads": {"in_effect": perf.get("threads_in_effect"),
                    "requested": perf.get("threads"), "environment": env},
        "device": perf.get("device"),
    }
