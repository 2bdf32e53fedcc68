"""With ``resume_from_records`` a grid resumes from the records committed in report folders: on
a machine without the old store, only the runs without a record train, and the report (and
its montage) still shows every run. Without it (the default) committed records never count:
every run not finished in the store trains, and a report folder's records (a report rebuilt
into a scratch folder) never make another grid skip its runs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from compare import api
from compare.montage_data import load_montage_data
from compare.records import has_records, read_records
from tests.compare.test_runner import TINY as RUNNER_TINY

#: test_runner's tiny grid (digits 16x16, 4 steps, eps=2 and non-private) with a montage.
TINY = {**RUNNER_TINY, "evaluation": {"faithfulness": False, "montage_images": 2}}


def test_only_runs_without_a_committed_record_train(tmp_path: Path) -> None:
    report = tmp_path / "reports" / "tiny"
    first = api.compare(TINY, out=tmp_path / "store", backends=["torch"], report=report,
                        progress=False)
    assert len(first.outcome.ran) == 2 and has_records(report)
    torch_ids = set(first.outcome.ran)
    shutil.rmtree(tmp_path / "store")  # a new machine: the store (and checkpoints) are gone

    second = api.compare(TINY, out=tmp_path / "new-store", report=report, progress=False,
                         resume_from_records=tmp_path / "reports")
    assert set(second.outcome.skipped) == torch_ids  # from the committed records
    assert set(second.outcome.records) == torch_ids
    assert len(second.outcome.ran) == 2 and not torch_ids & set(second.outcome.ran)
    runs = pd.read_csv(report / "runs.csv")
    assert len(runs) == 4 and set(runs["backend"]) == {"tf", "torch"}
    assert len(read_records(report).results) == 4
    # the montage keeps the torch columns, taken from the committed montage arrays
    montage = load_montage_data(report / "records" / "montages" / "digits-cnn4.npz")
    assert sorted(c["backend"] for c in montage.columns) == ["tf", "tf", "torch", "torch"]
    assert {c["run_id"] for c in montage.columns if c["backend"] == "torch"} == torch_ids
    assert montage.labels is not None and montage.labels.shape == (2,)


def test_a_montage_committed_without_true_labels_gets_them_from_the_data_set(
        tmp_path: Path) -> None:
    """Montage arrays committed without their true labels: a grid resumed from them with
    the data set at hand (here digits, shipped with scikit-learn) adds the test labels of
    the montage's images, and a rebuild from the records then shows them."""
    import dataclasses

    from compare.montage_data import save_montage_data

    report = tmp_path / "reports" / "tiny"
    api.compare(TINY, out=tmp_path / "store", backends=["torch"], report=report,
                progress=False)
    path = report / "records" / "montages" / "digits-cnn4.npz"
    labelled = load_montage_data(path)
    save_montage_data(path, dataclasses.replace(labelled, labels=None))  # an old commit
    shutil.rmtree(tmp_path / "store")
    api.compare(TINY, out=tmp_path / "new-store", backends=["torch"], report=report,
                progress=False, resume_from_records=tmp_path / "reports")
    again = load_montage_data(path)
    assert again.labels is not None
    assert again.labels.tolist() == labelled.labels.tolist()
    assert all(0 <= label < 10 for label in again.labels)


def test_a_record_in_another_report_folder_counts_too(tmp_path: Path) -> None:
    """One record per run id across reports: a grid sharing a run with another committed
    report takes that report's record instead of training its own."""
    api.compare(TINY, out=tmp_path / "store", backends=["torch"],
                report=tmp_path / "reports" / "tiny", progress=False)
    shared = {**TINY, "name": "tiny-shared", "evaluation": {"faithfulness": False,
                                                            "montage_images": 0}}
    again = api.compare(shared, out=tmp_path / "other-store", backends=["torch"],
                        report=tmp_path / "reports" / "tiny-shared", progress=False,
                        resume_from_records=tmp_path / "reports")
    assert not again.outcome.ran and len(again.outcome.records) == 2


def test_a_recorded_run_with_its_checkpoint_in_the_store_gets_its_montage_column(
        tmp_path: Path) -> None:
    """A run another grid trained into the same store, whose report drew no montage: a grid
    with a montage reports its record and explains it from the checkpoint in the store (it
    is never left out of the montage for want of committed montage arrays)."""
    no_montage = {**TINY, "name": "tiny-no-montage",
                  "evaluation": {"faithfulness": False, "montage_images": 0}}
    first = api.compare(no_montage, out=tmp_path / "store", backends=["torch"],
                        report=tmp_path / "reports" / "tiny-no-montage", progress=False)
    torch_ids = set(first.outcome.ran)
    assert len(torch_ids) == 2
    assert not (tmp_path / "reports" / "tiny-no-montage" / "records" / "montages").exists()

    report = tmp_path / "reports" / "tiny"
    again = api.compare(TINY, out=tmp_path / "store", backends=["torch"], report=report,
                        progress=False, resume_from_records=tmp_path / "reports")
    assert not again.outcome.ran and set(again.outcome.records) == torch_ids
    montage = load_montage_data(report / "records" / "montages" / "digits-cnn4.npz")
    assert {c["run_id"] for c in montage.columns} == torch_ids


def test_a_dry_run_counts_committed_records_as_finished(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """On a new machine (no store), ``--dry-run`` lists and counts only the runs a real call
    would train: the ones without a committed record."""
    report = tmp_path / "reports" / "tiny"
    first = api.compare(TINY, out=tmp_path / "store", backends=["torch"], report=report,
                        progress=False)
    torch_ids = set(first.outcome.ran)
    capsys.readouterr()
    api.compare(TINY, out=tmp_path / "new-store", report=report, dry_run=True,
                resume_from_records=tmp_path / "reports")
    lines = capsys.readouterr().out.splitlines()
    planned = [line for line in lines if line.startswith("would run")]
    assert len(planned) == 2 and all(line.startswith("would run tf") for line in planned)
    assert not any(rid in line for rid in torch_ids for line in planned)
    assert lines[-1].endswith("4 run(s), 2 to train into "
                              f"{tmp_path / 'new-store'}; all checked; nothing trained or written")
    assert not (tmp_path / "new-store").exists()


def test_by_default_committed_records_do_not_count_and_the_runs_are_compared(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A fresh clone (committed records, no store): the grid trains every run, and ends with
    the one-line comparison of its runs with their committed records; the dry run says where
    each run comes from and what ``--resume-from-records`` would take instead."""
    monkeypatch.chdir(tmp_path)
    committed = api.compare(TINY, out="store", backends=["torch"], report="reports/tiny",
                            progress=False)
    assert len(committed.outcome.ran) == 2
    capsys.readouterr()
    api.compare(TINY, out="fresh", report="reports/tiny", dry_run=True)
    lines = capsys.readouterr().out.splitlines()
    assert ("from where: 4 run(s): 4 trained here into fresh; 0 finished in the store fresh "
            "(2 of the runs to train are committed in reports/*/records: "
            "--resume-from-records would take them from there instead)") in lines
    assert sum(line.startswith("would run") for line in lines) == 4
    fresh = api.compare(TINY, out="fresh", backends=["torch"], report="scratch/tiny")
    assert sorted(fresh.outcome.ran) == sorted(committed.outcome.ran)
    assert not fresh.outcome.skipped and not fresh.outcome.records
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("tiny: 2 of 2 runs reproduce the committed records: "
                              "identical"), out[-1]


def test_a_scratch_report_beside_others_never_counts(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A report rebuilt into a scratch folder: a grid reporting beside it trains its runs,
    with or without ``--resume-from-records`` (which reads the repository's ``reports`` only)."""
    monkeypatch.chdir(tmp_path)
    api.compare(TINY, out="store", backends=["torch"], report="scratch/tiny", progress=False)
    api.rebuild_report("scratch/tiny", "scratch/tiny-rebuilt")
    (tmp_path / "reports").mkdir()
    for resume in (False, True):
        again = api.compare(TINY, out=f"store-{resume}", backends=["torch"],
                            report="scratch/other", progress=False, resume_from_records=resume)
        assert len(again.outcome.ran) == 2 and not again.outcome.records, resume


def test_the_cli_option_and_a_missing_records_folder(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from compare.cli.main import main

    monkeypatch.chdir(tmp_path)
    code = main(["compare", "--config", str(_grid_file(tmp_path)), "--out", "runs",
                 "--resume-from-records", "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2 and "--resume-from-records: reports is not a folder" in err
    api.compare(TINY, out="store", backends=["torch"], report="reports/tiny", progress=False)
    capsys.readouterr()
    assert main(["compare", "--config", str(_grid_file(tmp_path)), "--out", "runs",
                 "--backends", "torch", "--resume-from-records", "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert ("from where: 2 run(s): 0 trained here into runs; 0 finished in the store runs; "
            "2 from committed records (--resume-from-records)") in lines


def _grid_file(folder: Path) -> Path:
    import yaml

    path = folder / "tiny.yaml"
    path.write_text(yaml.safe_dump({**TINY, "name": "tiny"}))
    return path
