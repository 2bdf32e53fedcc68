"""Process set-up shared by the benchmark and its sweep workers: the OpenMP wait policy,
seeds, deterministic kernels and threads as in training."""

from __future__ import annotations

import os
from collections.abc import Sequence

from dpcore.config import PerfSpec

#: OpenMP wait policy the benchmark asks for unless the environment sets one. Measured on this
#: 2-core machine under a load average of ~6: a plain torch cnn4 step (B=256, 2 threads) took
#: 0.196 s with libgomp's default (spinning) workers and 0.032 s with PASSIVE ones; TF's own
#: thread pool was not affected. The spinning default makes torch collapse on a shared machine.
OMP_WAIT_POLICY = "PASSIVE"


def set_omp_wait_policy() -> str:
    """Ask for :data:`OMP_WAIT_POLICY` unless the environment already sets one; returns the
    policy in effect. Only effective before torch (and its OpenMP runtime) is first imported.
    """
    import sys

    if "torch" not in sys.modules:
        os.environ.setdefault("OMP_WAIT_POLICY", OMP_WAIT_POLICY)
    return os.environ.get("OMP_WAIT_POLICY", "unset (libgomp default: spinning)")


def configure(frameworks: Sequence[str] = ("tf", "torch")) -> str:
    """OMP wait policy (before torch is imported), seeds, deterministic kernels, threads as
    in training; returns the OMP policy in effect."""
    policy = set_omp_wait_policy()
    if "tf" in frameworks:
        from tfpipe.train import configure_tensorflow

        configure_tensorflow(0, PerfSpec())
    if "torch" in frameworks:
        from torchpipe.train import configure_torch

        configure_torch(0, PerfSpec())
    return policy
