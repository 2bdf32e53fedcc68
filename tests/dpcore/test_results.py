"""RunResult schema, atomic writes, and the results store."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from dpcore.config import RunConfig
from dpcore.errors import DpCompareError
from dpcore.results import (
    ResultsStore,
    RunResult,
    atomic_write_json,
    library_versions,
    run_id,
    validate_result_dict,
)


def make_result(config: RunConfig, backend: str = "tf", status: str = "finished") -> RunResult:
    return RunResult(
        run_id=run_id(config.config_hash, backend),
        config=config.to_dict(),
        config_hash=config.config_hash,
        backend=backend,
        seed=config.seed,
        status=status,
        versions=library_versions(),
        dataset={"name": "digits", "fingerprint": "abc", "n_train": 100, "n_test": 20},
        privacy={"mechanism": "none", "noise_multiplier": 0.0, "delta": 1e-3, "steps": 4,
                 "sampling_rate": 0.1, "epsilon_rdp": math.inf, "epsilon_pld": math.inf,
                 "dp_event": {"class_name": "NonPrivateDpEvent"}},
        metrics={"accuracy": 0.5, "loss": math.nan},
        history=[{"epoch": 1, "step": 4, "loss": 1.0}],
        timing={"epoch_seconds": [0.1], "total_seconds": 0.1},
    )


def test_save_load_round_trip_and_non_finite_as_null(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    config = RunConfig(seed=2)
    path = store.save(make_result(config))
    raw = json.loads(path.read_text())
    assert raw["privacy"]["epsilon_rdp"] is None and raw["metrics"]["loss"] is None
    assert raw["schema_version"] == 1
    loaded = store.load(config.config_hash, "tf")
    assert loaded is not None and loaded.metrics["accuracy"] == 0.5
    assert store.is_finished(config.config_hash, "tf")
    assert not store.is_finished(config.config_hash, "torch")


def test_running_status_is_not_finished(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    config = RunConfig(seed=3)
    store.save(make_result(config, status="running"))
    assert not store.is_finished(config.config_hash, "tf")


def test_unreadable_records_are_skipped_with_a_warning(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    good = RunConfig(seed=1)
    store.save(make_result(good))
    broken = store.runs_dir / "0123456789abcdef-tf"
    broken.mkdir(parents=True)
    (broken / "result.json").write_text('{"schema_version": 1, "run_id": ')  # half-written
    invalid = store.runs_dir / "fedcba9876543210-torch"
    invalid.mkdir(parents=True)
    (invalid / "result.json").write_text('{"schema_version": 1}')
    with pytest.warns(UserWarning, match="skipping unreadable run record"):
        runs = store.list_runs()
    assert [r.config_hash for r in runs] == [good.config_hash]


def test_schema_rejects_bad_records() -> None:
    raw = make_result(RunConfig()).to_dict()
    raw["backend"] = "jax"
    with pytest.raises(DpCompareError, match="backend"):
        validate_result_dict(raw)
    with pytest.raises(DpCompareError, match="backend"):
        run_id("0" * 16, "jax")
    missing = make_result(RunConfig()).to_dict()
    del missing["metrics"]
    with pytest.raises(DpCompareError,
                       match=r"field \(top level\): 'metrics' is a required property"):
        validate_result_dict(missing)
    with pytest.raises(DpCompareError, match="must be a JSON object"):
        validate_result_dict([raw])


def test_many_records_validate_without_rechecking_the_schema(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The schema is checked against its meta-schema once, not per record (the committed
    records are read at every compare)."""
    import jsonschema

    from dpcore.results import _validator

    _validator.cache_clear()
    checks: list[object] = []
    original = jsonschema.Draft202012Validator.check_schema.__func__  # type: ignore[attr-defined]
    monkeypatch.setattr(jsonschema.Draft202012Validator, "check_schema",
                        classmethod(lambda cls, schema: (checks.append(schema),
                                                         original(cls, schema))[1]))
    raw = make_result(RunConfig()).to_dict()
    for _ in range(5):
        validate_result_dict(raw)
    assert len(checks) <= 1
    _validator.cache_clear()


def test_atomic_write_leaves_old_file_on_failure(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    atomic_write_json(path, {"a": 1})

    class Unserialisable:
        pass

    with pytest.raises(TypeError):
        atomic_write_json(path, {"a": Unserialisable()})
    assert json.loads(path.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]  # no temp file left behind


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere: permission test void")
def test_unwritable_output_dir_is_named(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    with pytest.raises(DpCompareError, match="not writable"):
        ResultsStore(locked / "out").ensure_writable()


def test_output_path_that_is_a_file_is_named(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(DpCompareError, match="not writable"):
        ResultsStore(blocker).ensure_writable()


def test_atomic_write_uses_ordinary_file_permissions(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        path = tmp_path / "r.json"
        atomic_write_json(path, {"a": 1})
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644


# --- provenance: what produced a run ---------------------------------------------------------

def test_a_record_carries_its_provenance_and_one_without_it_still_loads(tmp_path: Path) -> None:
    """A RunResult with the provenance of :func:`dpcore.provenance.provenance_record`
    validates and round-trips; one written without it loads with
    ``provenance`` None and is written back without the key (byte for byte as before)."""
    from dpcore.provenance import provenance_record

    config = RunConfig()
    provenance = provenance_record({"threads_in_effect": 2, "threads": None, "device": "cpu"})
    result = make_result(config)
    result.provenance = provenance
    store = ResultsStore(tmp_path)
    store.save(result)
    loaded = store.load(config.config_hash, "tf")
    assert loaded is not None and loaded.provenance == json.loads(json.dumps(provenance))
    sources = loaded.provenance["sources"]
    assert len(sources["digest"]) == 64 and int(sources["digest"], 16) >= 0
    assert set(sources["parts"]) == {"dpcore", "tfpipe", "torchpipe", "compare"}
    assert loaded.provenance["threads"]["in_effect"] == 2
    assert loaded.provenance["device"] == "cpu"
    assert "numpy" in loaded.provenance["packages"]
    old = make_result(config).to_dict()
    assert "provenance" not in old
    assert RunResult.from_dict(old).provenance is None
    assert RunResult.from_dict(old).to_dict() == old
    with pytest.raises(DpCompareError, match="provenance/sources/digest"):
        validate_result_dict({**old, "provenance": {"sources": {"digest": "xyz"}}})


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_sources_digest_follows_the_training_sources_only(tmp_path: Path) -> None:
    from dpcore.provenance import source_digest

    root = _tree(tmp_path, {"dpcore/a.py": "A = 1\n", "dpcore/sub/b.py": "B = 2\n",
                            "tfpipe/t.py": "T = 3\n", "compare/training.py": "X = 4\n",
                            "compare/report.py": "R = 5\n", "dpcore/notes.txt": "n\n"})
    before = source_digest(root)
    assert before["files"] == 4  # .py files of the set only: not compare/report.py
    (root / "compare/report.py").write_text("R = 6\n")  # not on the training path
    (root / "dpcore/notes.txt").write_text("m\n")
    assert source_digest(root) == before
    (root / "tfpipe/t.py").write_text("T = 30\n")
    after = source_digest(root)
    assert after["digest"] != before["digest"]
    assert after["parts"]["tfpipe"] != before["parts"]["tfpipe"]
    assert after["parts"]["dpcore"] == before["parts"]["dpcore"]
    assert after["parts"]["compare"] == before["parts"]["compare"]


def test_the_cpu_record_reads_the_instruction_set_flags() -> None:
    from dpcore.provenance import cpu_record

    text = ("processor\t: 0\nmodel name\t: Some CPU @ 2GHz\n"
            "flags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512_vnni foo\n\n"
            "processor\t: 1\nmodel name\t: Some CPU @ 2GHz\nflags\t\t: fpu\n")
    cpu = cpu_record(text)
    assert cpu["model"] == "Some CPU @ 2GHz"
    assert cpu["isa"] == ["sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_vnni"]
    assert cpu["logical_cpus"] == os.cpu_count()
    arm = cpu_record("processor\t: 0\nFeatures\t: fp asimd sve\nCPU part\t: 0xd0c\n")
    assert arm["isa"] == ["asimd", "sve"]
    assert cpu_record("")["isa"] is None


def test_the_git_record_names_the_commit_only_where_the_sources_are_clean(
        tmp_path: Path) -> None:
    import shutil
    import subprocess

    from dpcore.provenance import git_record

    assert git_record(tmp_path)["commit"] is None
    assert "not a git checkout" in git_record(tmp_path)["note"]
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    root = _tree(tmp_path / "repo", {"dpcore/a.py": "A = 1\n", "README.md": "r\n"})

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c",
                               "user.email=t@t", *args], check=True, capture_output=True,
                              text=True).stdout.strip()

    git("init", "-q")
    git("add", ".")
    git("commit", "-q", "-m", "one")
    head = git("rev-parse", "HEAD")
    assert git_record(root) == {"commit": head, "clean": True}
    (root / "README.md").write_text("changed\n")  # not a training source
    assert git_record(root) == {"commit": head, "clean": True}
    (root / "dpcore/a.py").write_text("A = 2\n")
    (root / "dpcore/new.py").write_text("N = 1\n")
    assert git_record(root) == {"commit": None, "head": head, "clean": False,
                                "modified": ["dpcore/a.py", "dpcore/new.py"]}
