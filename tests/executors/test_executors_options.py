"""Executor options that need no Ray: the local executor never imports Ray, Ray options are
refused with the local executor, and ``--executor ray`` without Ray installed is a one-line
error (exit 2) that writes nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from compare.cli.main import main
from compare.executors import LocalExecutor, make_executor
from dpcore.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().err


def test_local_is_the_default_and_never_imports_ray() -> None:
    code = ("import sys; from compare.cli.main import build_parser; "
            "import compare.executors, compare.runner; "
            "a = build_parser().parse_args(['compare', '--preset', 'smoke']); "
            "e = compare.executors.make_executor(a.executor); e.prepare(); e.close(); "
            "print(type(e).__name__, 'ray' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=True)
    assert done.stdout.split() == ["LocalExecutor", "False"]


def test_ray_options_are_refused_with_the_local_executor() -> None:
    assert isinstance(make_executor("local"), LocalExecutor)
    with pytest.raises(ConfigError, match="--gpus-per-run only apply to --executor ray"):
        make_executor("local", gpus_per_run=1)
    with pytest.raises(ConfigError, match="'spark' is not known; valid: local, ray"):
        make_executor("spark")


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--cpus-per-run", "0", "--cpus-per-run=0.0 must be > 0"),
    ("--gpus-per-run", "-1", "--gpus-per-run=-1.0 must be >= 0"),
    ("--max-concurrent", "0", "--max-concurrent=0 must be >= 1"),
    ("--ray-address", "nohostport", "'nohostport' is not HOST:PORT"),
])
def test_bad_ray_option_values_are_one_line_errors(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, flag: str, value: str, message: str,
) -> None:
    out = tmp_path / "out"
    code, err = run_cli(capsys, "compare", "--preset", "smoke", "--executor", "ray",
                        flag, value, "--out", str(out), "--report", str(tmp_path / "rep"))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert message in err
    assert not out.exists() and not (tmp_path / "rep").exists()


def test_executor_ray_without_ray_installed_says_how_to_install(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    out = tmp_path / "out"
    code, err = run_cli(capsys, "compare", "--preset", "smoke", "--executor", "ray",
                        "--out", str(out), "--no-report")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "needs Ray, which is not installed" in err and '".[ray]"' in err
    assert not out.exists()


def test_ctrl_c_on_the_ray_driver_is_a_flag_the_poll_loop_reads() -> None:
    """While the ray executor polls, SIGINT only sets an event (a handler that raises nothing
    cannot be swallowed inside Ray's C code); the previous handler comes back afterwards."""
    import os
    import signal

    from compare.executors.ray_executor import _ctrl_c_as_flag

    before = signal.getsignal(signal.SIGINT)
    with _ctrl_c_as_flag() as interrupted:
        assert not interrupted.is_set()
        os.kill(os.getpid(), signal.SIGINT)  # no KeyboardInterrupt here
        deadline = 0
        while not interrupted.is_set() and deadline < 1000:  # the handler runs on the
            deadline += 1                                     # next bytecode boundary
        assert interrupted.is_set()
    assert signal.getsignal(signal.SIGINT) is before
