"""`dpcompare audit`: audits a tiny stored run of each backend from its checkpoint and writes
the audit into the run's result.json; bad run folders are one-line errors (exit 2)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from compare.cli.main import main
from dpcore.evaluation.membership import AUDIT_KEYS
from dpcore.results import read_result

# A tiny run: 120 / 120 digits resized to 16x16 (cnn4's minimum), one epoch of DP-SGD.
TINY_RUN = ["--dataset", "digits", "--model", "cnn4", "--set", "data.image_size=16",
            "--set", "data.train_limit=120", "--set", "data.test_limit=120",
            "--batch-size", "60", "--lr", "0.1", "--epochs", "1", "--noise-multiplier", "1.0",
            "--quiet"]


@pytest.fixture(scope="module")
def stored_run(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, Path], Path]:
    """``stored_run(backend, dest)``: a fresh copy, under ``dest``, of the tiny run of
    ``backend``, trained once for the module by ``dpcompare train``. Each test audits or edits
    its own copy (the audit rewrites result.json), so no test sees another's changes."""
    trained: dict[str, Path] = {}

    def copy(backend: str, dest: Path) -> Path:
        if backend not in trained:
            out = tmp_path_factory.mktemp(f"audit-{backend}")
            assert main(["train", "--backend", backend, *TINY_RUN, "--out", str(out)]) == 0
            (trained[backend],) = (out / "runs").glob(f"*-{backend}")
        run_dir = dest / "runs" / trained[backend].name
        shutil.copytree(trained[backend], run_dir)
        return run_dir

    return copy


@pytest.mark.parametrize("backend", ["tf", "torch"])
def test_audit_a_stored_run(backend: str, tmp_path: Path,
                            capsys: pytest.CaptureFixture[str],
                            stored_run: Callable[[str, Path], Path]) -> None:
    run_dir = stored_run(backend, tmp_path)
    capsys.readouterr()
    before = json.loads((run_dir / "result.json").read_text())

    assert main(["audit", str(run_dir), "--n", "100", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert set(AUDIT_KEYS) <= set(printed)
    assert printed["n_members"] == printed["n_nonmembers"] == 100
    assert printed["backend"] == backend and printed["private"] is True
    claimed = min(before["privacy"]["epsilon_rdp"], before["privacy"]["epsilon_pld"])
    assert printed["epsilon"] == pytest.approx(claimed)
    assert printed["delta"] == before["privacy"]["delta"]
    assert 0.0 < printed["bound"] < 1.0
    assert printed["suspected_privacy_bug"] is False  # one noisy epoch cannot beat the bound

    stored = read_result(run_dir / "result.json")  # still a valid RunResult
    assert stored is not None and stored.audit == printed
    after = json.loads((run_dir / "result.json").read_text())
    assert {k: v for k, v in after.items() if k != "audit"} == {
        k: v for k, v in before.items() if k != "audit"}

    # human-readable form, default n (all 120)
    assert main(["audit", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "threshold_attack" in out and "logistic_regression" in out
    assert "bound" in out and "within the bound" in out and "120 / 120" in out


def test_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                            stored_run: Callable[[str, Path], Path]) -> None:
    assert main(["audit", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "result.json" in err and "Traceback" not in err

    run_dir = stored_run("torch", tmp_path)
    capsys.readouterr()
    original = (run_dir / "result.json").read_text()
    raw = json.loads(original)
    raw["dataset"]["fingerprint"] = "0" * 16  # as if the data had changed since training
    (run_dir / "result.json").write_text(json.dumps(raw))
    assert main(["audit", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "fingerprint" in err and "0" * 16 in err

    (run_dir / "result.json").write_text(original)
    assert main(["audit", str(run_dir), "--n", "5"]) == 2
    assert "n=5" in capsys.readouterr().err
