"""Shared helpers of the end-to-end tests: running the CLI in-process or as a subprocess,
snapshots of a results folder, and a tiny grid."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from compare.cli.main import main

REPO = Path(__file__).resolve().parents[2]

#: A tiny grid on the built-in digits set: cnn4 at 16x16, a few steps, torch only (fast).
TINY_GRID: dict[str, Any] = {
    "name": "tiny-reliability",
    "base": {
        "data": {"name": "digits", "image_size": 16},
        "model": {"name": "cnn4"},
        "train": {"steps": 5, "batch_size": 64, "lr": 0.5},
    },
    "axes": {
        "privacy": [
            {"label": "noise=1", "privacy": {"mechanism": "dpsgd-gaussian",
                                             "noise_multiplier": 1.0}},
            {"label": "noise=2", "privacy": {"mechanism": "dpsgd-gaussian",
                                             "noise_multiplier": 2.0}},
            {"label": "noise=4", "privacy": {"mechanism": "dpsgd-gaussian",
                                             "noise_multiplier": 4.0}},
            {"label": "non-private", "privacy": {"mechanism": "none"}},
        ]
    },
    "seeds": 1,
    "backends": ["torch"],
    "evaluation": {"faithfulness": False, "montage_images": 0},
}


def write_grid(path: Path, grid: dict[str, Any] | None = None) -> Path:
    """Write ``grid`` (default :data:`TINY_GRID`) as YAML; returns the path."""
    path.write_text(yaml.safe_dump(grid or TINY_GRID, sort_keys=False))
    return path


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``dpcompare ARGV`` in this process: (exit status, stdout, stderr).

    argparse errors (``SystemExit``) are turned into their exit status too.
    """
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse usage errors
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_one_line_error(code: int, err: str, *fragments: str) -> str:
    """Exit 2, no traceback, and stderr ending with one ``dpcompare CMD: error: ...`` line that
    holds every fragment. Returns that line."""
    assert code == 2, f"exit status {code}, stderr:\n{err}"
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines, "nothing on stderr"
    last = lines[-1]
    assert last.startswith("dpcompare ") and ": error: " in last, err
    for fragment in fragments:
        assert fragment in last, f"{fragment!r} not in {last!r}"
    return last


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Bytes and modification time (ns) of every file under ``folder``."""
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def cli_env(cache: Path) -> dict[str, str]:
    """Environment of a ``dpcompare`` subprocess: the repo on the path, an isolated cache."""
    env = {k: v for k, v in os.environ.items() if k != "DPCOMPARE_DATA_DIR"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["DPCOMPARE_CACHE_DIR"] = str(cache)
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    env["PYTHONUNBUFFERED"] = "1"
    return env
