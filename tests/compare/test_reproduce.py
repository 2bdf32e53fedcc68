"""``dpcompare reproduce``: a committed report's runs retrained in a scratch store and every
recorded figure compared with its record. A tiny committed-style report (digits, 4 runs) is
built in a temp folder; reproduced on the same machine in the same process, every run is
identical; with one committed figure changed in its records, that run alone differs; a
record made by other training code, or written without provenance, is named as such; runs
computed on another kind of device are compared over seeds."""

from __future__ import annotations

import csv
import dataclasses
import gzip
import json
import math
from pathlib import Path

import pytest

from compare import api
from compare.records import RECORDS_FILE, RECORDS_FOLDER, read_records, records_bytes
from compare.reproduce import CSV_FILE, MARKDOWN_FILE, select_runs
from compare.reproduction import (
    CODE_CHANGED,
    CODE_SAME,
    CODE_UNKNOWN,
    NOT_COMPARABLE,
    compare_run,
    over_seeds,
    summary_line,
)
from dpcore.errors import ConfigError
from dpcore.results import RunResult
from tests.compare.test_runner import TINY

#: test_runner's tiny grid (digits 16x16, 4 steps, eps=2 and non-private, both backends).
GRID = {**TINY, "name": "tiny-committed"}


@pytest.fixture(scope="module")
def committed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A committed-style report folder with records of 4 runs (its store is then deleted)."""
    import shutil

    root = tmp_path_factory.mktemp("committed")
    store = api.compare(GRID, out=root / "store", report=root / "reports" / "tiny",
                        progress=False)
    assert len(store.outcome.ran) == 4 and not store.outcome.failed
    shutil.rmtree(root / "store")
    return root / "reports" / "tiny"


@pytest.fixture(scope="module")
def reproduced(committed: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The scratch store of one reproduction of every run of ``committed``."""
    out = tmp_path_factory.mktemp("scratch")
    result = api.reproduce(committed, out=out, progress=False)
    assert len(result.comparisons) == 4
    return out


def _rewrite(report: Path, change: dict[str, object]) -> Path:
    """A copy of ``report`` whose records hold ``change(record)`` for each record."""
    import shutil

    copy = report.parent.parent / f"changed-{len(list(report.parent.parent.iterdir()))}" / "tiny"
    shutil.copytree(report, copy)
    records = read_records(copy).results
    changed = [change.get(r.run_id, lambda x: x)(r) for r in records]  # type: ignore[operator]
    (copy / RECORDS_FOLDER / RECORDS_FILE).write_bytes(records_bytes(changed))
    return copy


def test_every_run_reproduces_identically_here(committed: Path, reproduced: Path) -> None:
    result = api.reproduce(committed, out=reproduced, progress=False)  # reuses the fresh runs
    assert [c.verdict for c in result.comparisons] == ["identical"] * 4
    assert all(c.code == CODE_SAME for c in result.comparisons)
    assert result.summary == "4 of 4 runs reproduce the committed records: identical"
    # every figure group of the record is compared, taken generically
    names = {f.name for f in result.comparisons[0].figures}
    for name in ("metrics.accuracy", "metrics.auc", "metrics.loss", "privacy.epsilon_rdp",
                 "privacy.epsilon_pld", "metrics.per_class[0].recall"):
        assert name in names, name
    text = (reproduced / MARKDOWN_FILE).read_text()
    assert "4 of 4 runs reproduce the committed records: identical" in text
    assert sum(line.startswith("| `") for line in text.splitlines()) == 4
    for aspect in ("- machine:", "- cpu:", "- versions:", "- threads:", "- device:", "- code:"):
        assert text.count(aspect) == 2, aspect  # both sides
    assert "**Committed records** (4 records)" in text and "**Fresh records** (4 records)" in text
    with (reproduced / CSV_FILE).open() as handle:
        rows = list(csv.DictReader(handle))
    assert {r["run_id"] for r in rows} == {c.run_id for c in result.comparisons}
    assert {r["status"] for r in rows} == {"identical"}
    accuracy = [r for r in rows if r["figure"] == "metrics.accuracy"]
    assert len(accuracy) == 4 and all(r["committed"] == r["fresh"] for r in accuracy)


def test_a_changed_committed_figure_makes_that_run_alone_differ(committed: Path,
                                                                reproduced: Path) -> None:
    target = sorted(r.run_id for r in read_records(committed).results)[1]

    def bump(record: RunResult) -> RunResult:
        metrics = {**record.metrics, "accuracy": record.metrics["accuracy"] + 0.01}
        return dataclasses.replace(record, metrics=metrics)

    changed = _rewrite(committed, {target: bump})
    result = api.reproduce(changed, out=reproduced, progress=False)
    verdicts = {c.run_id: c.verdict for c in result.comparisons}
    assert verdicts.pop(target) == "differs"
    assert set(verdicts.values()) == {"identical"}
    differing = next(c for c in result.comparisons if c.run_id == target)
    assert differing.largest is not None and differing.largest.name == "metrics.accuracy"
    assert differing.largest.difference == pytest.approx(0.01)
    assert [f.name for f in differing.figures if f.status == "differs"] == ["metrics.accuracy"]
    assert result.summary.startswith(
        f"3 of 4 runs reproduce the committed records (3 identical); 1 differ (largest "
        f"relative difference: metrics.accuracy of {target}, ")
    md = (reproduced / MARKDOWN_FILE).read_text()
    row = next(line for line in md.splitlines() if line.startswith(f"| `{target}`"))
    committed_accuracy = differing.largest.committed
    assert "| differs |" in row and (f"metrics.accuracy: {committed_accuracy:.4g} → "
                                     f"{committed_accuracy - 0.01:.4g}") in row


def test_a_rounding_sized_change_is_within_tolerance(committed: Path, reproduced: Path) -> None:
    target = sorted(r.run_id for r in read_records(committed).results)[0]

    def nudge(record: RunResult) -> RunResult:
        loss = record.metrics["loss"]
        return dataclasses.replace(record, metrics={**record.metrics, "loss": loss * (1 + 1e-8)})

    result = api.reproduce(_rewrite(committed, {target: nudge}), out=reproduced,
                           progress=False, run_ids=[target])
    (only,) = result.comparisons
    assert only.verdict == "within tolerance"
    assert result.summary == "1 of 1 runs reproduce the committed records: within tolerance"


def test_records_of_other_code_or_without_provenance_are_named(committed: Path,
                                                               reproduced: Path) -> None:
    ids = sorted(r.run_id for r in read_records(committed).results)

    def other_code(record: RunResult) -> RunResult:
        provenance = json.loads(json.dumps(record.provenance))
        provenance["sources"]["digest"] = "0" * 64
        provenance["sources"]["parts"]["torchpipe"] = "0" * 64
        return dataclasses.replace(record, provenance=provenance)

    def old(record: RunResult) -> RunResult:
        return dataclasses.replace(record, provenance=None)

    changed = _rewrite(committed, {ids[0]: other_code, ids[1]: old})
    raw = gzip.decompress((changed / RECORDS_FOLDER / RECORDS_FILE).read_bytes()).decode()
    assert sum('"provenance"' in line for line in raw.splitlines()) == 3  # old one: no key
    result = api.reproduce(changed, out=reproduced, progress=False)
    code = {c.run_id: (c.code, c.code_parts) for c in result.comparisons}
    assert code[ids[0]] == (CODE_CHANGED, ("torchpipe",))
    assert code[ids[1]] == (CODE_UNKNOWN, ())
    assert {code[i][0] for i in ids[2:]} == {CODE_SAME}
    assert [c.verdict for c in result.comparisons] == ["identical"] * 4  # figures unchanged
    assert ("4 of 4 runs reproduce the committed records: identical; 1 of the committed "
            "records were made by training code that has changed since; 1 committed record(s) "
            "do not say which code made them") in result.summary
    md = (reproduced / MARKDOWN_FILE).read_text()
    assert "code changed since (torchpipe)" in md and "code not recorded" in md


def test_selection_is_seeded_and_checked(committed: Path) -> None:
    records = read_records(committed).results
    sample = [r.run_id for r in select_runs(records, runs=2, seed=3)]
    assert sample == [r.run_id for r in select_runs(records, runs=2, seed=3)]
    assert len(sample) == 2 and sample == sorted(sample)
    torch = select_runs(records, backends="opacus")
    assert {r.backend for r in torch} == {"torch"} and len(torch) == 2
    one = records[0].run_id
    assert [r.run_id for r in select_runs(records, run_ids=[f"{one},{one}"])] == [one]
    with pytest.raises(ConfigError, match=r"--runs=5 is not valid; valid: 1\.\.4"):
        select_runs(records, runs=5)
    with pytest.raises(ConfigError, match=f"did you mean '{one}'"):
        select_runs(records, run_ids=[one[:-1] + ("x" if one[-1] != "x" else "y")])


def test_the_cli_dry_run_writes_nothing_and_a_run_reproduces(
        committed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from compare.cli.main import main

    out = tmp_path / "scratch"
    assert main(["reproduce", str(committed), "--runs", "1", "--out", str(out),
                 "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len([line for line in lines if line.startswith("would retrain")]) == 1
    assert lines[-1].startswith(f"dry run: reproduce {committed}: 1 of the report's 4 run(s)")
    assert not out.exists()
    assert main(["reproduce", str(committed), "--runs", "1", "--backends", "torch",
                 "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == (f"reproduce {committed}: 1 of 1 runs reproduce the committed "
                          "records: identical")
    assert (out / MARKDOWN_FILE).is_file() and (out / CSV_FILE).is_file()
    assert main(["reproduce", str(tmp_path), "--out", str(out)]) == 2
    assert "holds no run records" in capsys.readouterr().err


def _fake(run: str, seed: int, accuracy: float, device: str | None) -> RunResult:
    return RunResult(run_id=f"{run}{seed}-torch", config={"data": {}, "model": {},
                     "privacy": {}, "train": {}, "seed": seed}, config_hash="0" * 16,
                     backend="torch", seed=seed, status="finished",
                     metrics={"accuracy": accuracy, "per_class": [{"auc": 0.5}]},
                     perf={} if device is None else {"device": device},
                     labels={"privacy": "eps=1"})


def test_runs_on_another_kind_of_device_are_compared_over_seeds() -> None:
    committed = [_fake("a", s, acc, None) for s, acc in enumerate((0.80, 0.82, 0.81))]
    fresh = [_fake("a", s, acc, "cuda:0") for s, acc in enumerate((0.81, 0.79, 0.83))]
    comparisons = [compare_run(c, f) for c, f in zip(committed, fresh, strict=True)]
    assert {c.verdict for c in comparisons} == {NOT_COMPARABLE}
    assert "CUDA generator" in comparisons[0].why
    (row,) = over_seeds(comparisons)
    assert row["n"] == 3 and row["committed"] == pytest.approx(0.81)
    assert row["fresh"] == pytest.approx(0.81) and row["verdict"] == "consistent"
    assert row["low"] < 0 < row["high"]
    assert "3 not comparable run by run" in summary_line(comparisons)
    # the same device kind: compared run by run
    same = compare_run(committed[0], dataclasses.replace(committed[0], perf={"device": "cpu"}))
    assert same.verdict == "identical"
    far = [_fake("b", s, acc, "cuda:0") for s, acc in enumerate((0.50, 0.51, 0.52))]
    (shifted,) = over_seeds([compare_run(c, f) for c, f in zip(committed, far, strict=True)])
    assert shifted["verdict"] == "differs" and shifted["high"] < 0
    (single,) = over_seeds([compare_run(committed[0], fresh[0])])
    assert single["verdict"] == "cannot say" and "fewer than two seeds" in single["why"]
    assert math.isclose(single["difference"], 0.01)
