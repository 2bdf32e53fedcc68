"""``dpcompare train`` with a gate inside its training and a short claim poll, for the tests of
two ``train`` processes on one ``--out`` (tests/cli/test_train_claims.py).

Usage::

    python -m tests.cli.train_claim_worker CONTROL MODE -- TRAIN-ARGS...

Every call of the backend's ``train`` appends this process's id to ``CONTROL/trained.log`` (the
count of trainings). In mode ``gate`` the first call then creates ``CONTROL/training-PID`` and
waits until the file ``CONTROL/release`` exists (the test creates it) before it trains; in mode
``plain`` it trains at once. A process waiting for another's claim looks again every 0.05 s
(:func:`compare.train_claim.claim_policy` patched), so the tests wait on files and output
lines, never on a clock. Nothing of this lives in the product.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import Any

import compare.train_claim as train_claim
import compare.training as training
from compare.cli.main import main

#: Bound on waiting for the release file (a hang guard: the test creates it).
WAIT_S = 600.0


class GatedTrain:
    """A backend module whose ``train`` is counted and, in mode ``gate``, held once."""

    def __init__(self, module: Any, control: Path, mode: str) -> None:
        self._module, self._control, self._mode = module, control, mode

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)

    def train(self, *args: Any, **kwargs: Any) -> Any:
        pid = os.getpid()
        with (self._control / "trained.log").open("a") as handle:
            handle.write(f"{pid}\n")
        if self._mode == "gate":
            (self._control / f"training-{pid}").touch()
            deadline = time.monotonic() + WAIT_S
            while not (self._control / "release").exists() and time.monotonic() < deadline:
                time.sleep(0.02)
        return self._module.train(*args, **kwargs)


def install(control: Path, mode: str) -> None:
    real_backend, real_policy = training.load_backend, train_claim.claim_policy

    def load_backend(name: str) -> Any:
        return GatedTrain(real_backend(name), control, mode)

    def claim_policy(*args: Any, **kwargs: Any) -> Any:
        return dataclasses.replace(real_policy(*args, **kwargs), poll_s=0.05)

    training.load_backend = load_backend  # type: ignore[assignment]
    train_claim.claim_policy = claim_policy  # type: ignore[assignment]


if __name__ == "__main__":
    control_dir, worker_mode, separator, *train_args = sys.argv[1:]
    assert separator == "--", sys.argv
    install(Path(control_dir), worker_mode)
    sys.exit(main(["train", *train_args]))
