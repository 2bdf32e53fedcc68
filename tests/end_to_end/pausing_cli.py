"""``dpcompare`` with a test-only pause inside training, so a signal always lands mid-run.

Usage (as the fault tests start it)::

    python -m tests.end_to_end.pausing_cli MARKER N dpcompare-args...

The N-th training run of the process (1-based) pauses at the end of its first epoch, inside
the backend's training loop (an epoch callback), after creating the file MARKER; it then
sleeps until a signal ends it (at most :data:`MAX_PAUSE_SECONDS`, then it goes on). Every other
run is untouched. The test waits for MARKER and sends SIGINT or SIGKILL: the signal therefore
always arrives while a run is in progress, whatever the machine's speed. Nothing of this lives
in the product: the hook is installed by patching ``compare.training.load_backend``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import compare.training as training
from compare.cli.main import main

MAX_PAUSE_SECONDS = 600.0


class _PausingTrain:
    """A backend ``train`` module whose N-th ``train`` call pauses after its first epoch."""

    calls = 0

    def __init__(self, module: Any, marker: Path, pause_on: int) -> None:
        self._module = module
        self._marker = marker
        self._pause_on = pause_on

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)

    def train(self, *args: Any, callbacks: Any = (), **kwargs: Any) -> Any:
        _PausingTrain.calls += 1
        hooks = list(callbacks)
        if _PausingTrain.calls == self._pause_on:
            hooks.insert(0, self._pause)
        return self._module.train(*args, callbacks=hooks, **kwargs)

    def _pause(self, record: dict[str, Any]) -> bool:
        if record["epoch"] == 1:
            self._marker.touch()
            deadline = time.monotonic() + MAX_PAUSE_SECONDS
            while time.monotonic() < deadline:
                time.sleep(0.05)  # SIGINT raises KeyboardInterrupt here; SIGKILL ends us here
        return False


def install(marker: Path, pause_on: int) -> None:
    """Patch the backend lookup of the record path so the ``pause_on``-th run pauses."""
    real = training.load_backend

    def patched(backend: str) -> Any:
        return _PausingTrain(real(backend), marker, pause_on)

    training.load_backend = patched  # type: ignore[assignment]


if __name__ == "__main__":
    install(Path(sys.argv[1]), int(sys.argv[2]))
    sys.exit(main(sys.argv[3:]))
