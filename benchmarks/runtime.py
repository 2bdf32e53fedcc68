"""Process set-up shared by the benchmark and its sweep workers: the OpenMP wait policy
(:mod:`dpcore.threads`, measured there), seeds, deterministic kernels and threads as in training."""

from __future__ import annotations

from collections.abc import Sequence

from dpcore.config import PerfSpec
from dpcore.threads import prefer_passive_openmp


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
