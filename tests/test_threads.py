"""The CLI asks for passive OpenMP workers unless the user set a policy (dpcore.threads)."""

from __future__ import annotations

import os
import subprocess
import sys

PROBE = ("import os, sys; from compare.cli.main import main; "
         "main(['epsilon', '--noise-multiplier', '1', '--batch-size', '10', '--n', '100', "
         "'--epochs', '1', '--no-library']); "
         "print('POLICY=' + os.environ.get('OMP_WAIT_POLICY', ''), file=sys.stderr)")


def _policy(env_policy: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if env_policy is not None:
        env["OMP_WAIT_POLICY"] = env_policy
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True,
                          text=True, check=True, timeout=300)
    return [line for line in done.stderr.splitlines() if line.startswith("POLICY=")][-1]


def test_cli_defaults_to_passive_workers() -> None:
    assert _policy(None) == "POLICY=PASSIVE"


def test_cli_keeps_the_users_policy() -> None:
    assert _policy("ACTIVE") == "POLICY=ACTIVE"
