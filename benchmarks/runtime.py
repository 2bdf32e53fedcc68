"""Process set-up shared by the benchmark and its sweep workers: the OpenMP wait policy
(:mod:`dpcore.threads`, measured there), seeds, deterministic kernels and threads as in training."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from dpcore.config import PerfSpec
from dpcore.threads import OMP_WAIT_POLICY, prefer_passive_openmp


def configure(frameworks: Sequence[str] = ("tf", "torch")) -> str:
    """OMP wait policy (before torch is imported), seeds, deterministic kernels, threads as
    in training; returns the OMP policy in effect."""
    policy = prefer_passive_openmp()
    if "tf" in frameworks:
        from tfpipe.train import configure_tensorflow

        configure_tensorflow(0, PerfSpec())
    if "torch" in frameworks:
        from torchpipe.train import configure_torch

        configure_torch(0, PerfSpec())
    return policy


def worker_env() -> tuple[dict[str, str], str]:
    """(environment, working folder) of a benchmark worker process (an isolated sweep point,
    a case, a per-layer table): this checkout first on ``PYTHONPATH``, passive OpenMP waits
    and TF's C++ logging at warnings unless the caller set them."""
    root = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("OMP_WAIT_POLICY", OMP_WAIT_POLICY)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env, root
