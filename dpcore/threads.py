"""Thread settings of the process that trains: one home for the OpenMP wait policy.

PyTorch's CPU kernels run on libgomp (OpenMP), whose idle worker threads spin by default. On a
machine whose cores are shared with other processes, the spinning workers take the cores from
the threads that have work: measured on this project's 2-core machine under a load average of
about 6, a plain torch cnn4 step (batch 256, 2 threads) took 0.196 s with the default (spinning)
workers and 0.032 s with ``OMP_WAIT_POLICY=PASSIVE`` (``dpcompare bench``); a full-MNIST DP-SGD
run (cnn4, batch 1024, 15 epochs) took 606 s of training with the default and 427 s with
PASSIVE while other jobs ran. TensorFlow's own thread pool is not affected.
"""

from __future__ import annotations

import os
import sys

#: The policy asked for unless the environment already sets one.
OMP_WAIT_POLICY = "PASSIVE"


def prefer_passive_openmp() -> str:
    """Ask for :data:`OMP_WAIT_POLICY` unless the environment already sets ``OMP_WAIT_POLICY``.

    Only effective before torch (and its OpenMP runtime) is first imported: afterwards the
    environment is left unchanged. Returns the policy in effect for this process (the
    environment's value, or a phrase naming libgomp's spinning default).
    """
    if "torch" not in sys.modules:
        os.environ.setdefault("OMP_WAIT_POLICY", OMP_WAIT_POLICY)
    return os.environ.get("OMP_WAIT_POLICY", "unset (libgomp default: spinning)")
