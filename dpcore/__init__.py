"""Framework-neutral core of the DP bench: data, sampling, accounting, metrics, results.

This package never imports TensorFlow or PyTorch: both backends and the orchestrator depend on
it, and `dpcompare epsilon` / `dpcompare datasets` must work without loading a framework.
"""

__version__ = "0.1.0"
