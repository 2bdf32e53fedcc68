"""Where the TF backend computes: TensorFlow places ops on the first visible GPU by itself when
its build has CUDA and a GPU is visible (a Ray task started with ``--gpus-per-run`` sees only
its own), else on the CPU. This module only records which, for the result's ``perf``.

Not testable on this project's CI (no GPU); on a machine without one it records the CPU.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf


def device_record() -> dict[str, Any]:
    """``{"device": "/device:GPU:0"}`` when TF sees a GPU, else ``{"device": "/device:CPU:0"}``."""
    gpus = tf.config.list_logical_devices("GPU")
    return {"device": gpus[0].name if gpus else "/device:CPU:0"}
