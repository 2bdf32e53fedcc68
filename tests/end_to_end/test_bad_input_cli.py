"""Bad input through the CLI: one line on stderr naming the file or value and what is valid,
exit status 2, no traceback (unless --debug), and a results folder holding a finished run is
left byte-identical (same bytes, same modification times) by every failing command.

The data files are small, real files in their native formats with one defect each (written
by ``tests/dpcore/data_writers.py``: IDX via struct, npz via numpy, PNG via Pillow). Every
failing command writes to the same finished results folder (``--out``), except the cases whose
defect is the output folder itself.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.dpcore.data_writers import (
    flat_image,
    tiny_mnist,
    write_csv,
    write_image,
    write_medmnist,
    write_mnist_idx,
)
from tests.end_to_end.helpers import (
    TINY_GRID,
    assert_one_line_error,
    run_cli,
    snapshot,
    write_grid,
)

#: ``dpcompare train`` options shared by every data case: the error comes before any training.
TRAIN = ["train", "--backend", "torch", "--model", "cnn4", "--steps", "1", "--batch-size", "2",
         "--quiet"]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A results folder holding one finished run (a real 2-step torch train on digits)."""
    out = tmp_path_factory.mktemp("store")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DPCOMPARE_CACHE_DIR", str(out.parent / "store-cache"))
        mp.delenv("DPCOMPARE_DATA_DIR", raising=False)
        from compare.cli.main import main

        code = main(["train", "--backend", "torch", "--dataset", "digits", "--model", "cnn4",
                     "--steps", "2", "--batch-size", "64", "--noise-multiplier", "1.0",
                     "--set", "data.image_size=16", "--out", str(out), "--quiet"])
    assert code == 0
    assert len(list((out / "runs").glob("*/result.json"))) == 1
    return out


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of defective data files (see the ``make_*`` builders below)."""
    root = tmp_path_factory.mktemp("bad-data")
    good = root / "good.npz"
    write_medmnist(good)
    raw = good.read_bytes()
    (root / "truncated.npz").write_bytes(raw[: len(raw) // 2])
    (root / "garbage.npz").write_bytes(b"this is not an npz archive")

    def variant(name: str, **changes: np.ndarray) -> None:
        arrays = dict(np.load(good))
        arrays.update(changes)
        np.savez(root / name, **arrays)

    base = dict(np.load(good))
    floats = base["train_images"].astype(np.float32) / 255.0
    with_nan, with_inf = floats.copy(), floats.copy()
    with_nan[0, 3, 3], with_inf[1, 5, 5] = np.nan, np.inf
    variant("labels_2d.npz", train_labels=np.zeros((12, 2), np.uint8))
    variant("labels_negative.npz", train_labels=-np.ones((12, 1), np.int64))
    variant("labels_count.npz", train_labels=np.zeros((11, 1), np.uint8))
    variant("mixed_channels.npz", test_images=np.zeros((6, 28, 28, 3), np.uint8))
    variant("mixed_sizes.npz", test_images=np.zeros((6, 20, 20), np.uint8))
    variant("nan.npz", train_images=with_nan)
    variant("inf.npz", train_images=with_inf)
    variant("empty_test.npz", test_images=base["test_images"][:0],
            test_labels=base["test_labels"][:0])
    variant("empty_all.npz", train_images=base["train_images"][:0],
            train_labels=base["train_labels"][:0], test_images=base["test_images"][:0],
            test_labels=base["test_labels"][:0], val_images=base["val_images"][:0],
            val_labels=base["val_labels"][:0])
    # a registered MedMNIST set (2 classes) whose labels leave 0..1
    pneu = root / "pneu" / "pneumoniamnist"
    pneu.mkdir(parents=True)
    out_of_range = base["train_labels"].copy()
    out_of_range[0] = 5
    np.savez(pneu / "pneumoniamnist.npz", **{**base, "train_labels": out_of_range})

    mnist = tiny_mnist()
    for name, gz in (("idx_truncated", False), ("idx_magic", False), ("gz_truncated", True),
                     ("gz_corrupt", True), ("idx_labels", True)):
        folder = root / name / "mnist"
        arrays = dict(mnist)
        if name == "idx_labels":
            arrays["y_train"] = (np.arange(20) % 12).astype(np.uint8)  # 10, 11: not digits
        write_mnist_idx(folder, arrays, gz=gz)
    images = root / "idx_truncated" / "mnist" / "train-images-idx3-ubyte"
    images.write_bytes(images.read_bytes()[:-10])
    labels = root / "idx_magic" / "mnist" / "t10k-labels-idx1-ubyte"
    labels.write_bytes(b"\x00\x00\x08\x03" + labels.read_bytes()[4:])  # an images magic
    gz_file = root / "gz_truncated" / "mnist" / "train-labels-idx1-ubyte.gz"
    gz_file.write_bytes(gz_file.read_bytes()[:-6])
    gz_file = root / "gz_corrupt" / "mnist" / "train-images-idx3-ubyte.gz"
    damaged = bytearray(gz_file.read_bytes())
    damaged[20:40] = b"\xff" * 20
    gz_file.write_bytes(bytes(damaged))
    with pytest.raises((OSError, EOFError, Exception)):  # the writer really broke it
        gzip.decompress(bytes(damaged))

    def aptos(name: str, sizes: Callable[[int], tuple[int, int]], n_files: int = 10) -> Path:
        folder = root / name / "aptos"
        write_csv(folder / "train.csv", ["id_code", "diagnosis"],
                  [[f"img{i}", i % 5] for i in range(10)])
        for i in range(n_files):
            write_image(folder / "train_images" / f"img{i}.png",
                        flat_image(90 + i, sizes(i), rgb=True))
        return folder

    broken = aptos("aptos_truncated", lambda i: (20, 20)) / "train_images" / "img3.png"
    broken.write_bytes(broken.read_bytes()[:40])
    not_png = aptos("aptos_not_image", lambda i: (20, 20)) / "train_images" / "img4.png"
    not_png.write_text("a text file named like an image")
    aptos("aptos_missing", lambda i: (20, 20), n_files=9)  # the CSV names img9.png
    aptos("aptos_mixed", lambda i: (20 + i % 2, 20))
    aptos_bad_grade = aptos("aptos_grade", lambda i: (20, 20))
    write_csv(aptos_bad_grade / "train.csv", ["id_code", "diagnosis"],
              [[f"img{i}", 7 if i == 2 else i % 5] for i in range(10)])
    return root


@pytest.fixture
def guard(store: Path) -> Path:
    """The finished store; after the test it must be exactly as before (bytes and mtimes)."""
    before = snapshot(store)
    yield store
    assert snapshot(store) == before, "a failing command changed the stored results"


def medmnist(data: Path, name: str) -> list[str]:
    return ["--dataset", f"medmnist:{data / name}"]


# (case id, extra train options given the data folder, fragments the error line must hold)
DATA_CASES: list[tuple[str, Callable[[Path], list[str]], tuple[str, ...]]] = [
    ("npz-truncated", lambda d: medmnist(d, "truncated.npz"),
     ("truncated.npz", "not a readable npz", "valid:")),
    ("npz-not-an-archive", lambda d: medmnist(d, "garbage.npz"),
     ("garbage.npz", "valid: a file written by numpy.savez")),
    ("labels-wrong-shape", lambda d: medmnist(d, "labels_2d.npz"),
     ("labels_2d.npz [train_labels]", "(12, 2)", "valid: (N,) or (N, 1)")),
    ("labels-negative", lambda d: medmnist(d, "labels_negative.npz"),
     ("labels_negative.npz [train_labels]", "-1", "valid: integers >= 0")),
    ("labels-count-mismatch", lambda d: medmnist(d, "labels_count.npz"),
     ("labels_count.npz", "12 inputs but 11 labels")),
    ("labels-out-of-range", lambda d: ["--dataset", "pneumoniamnist", "--data-dir",
                                       str(d / "pneu")],
     ("pneumoniamnist.npz [train_labels]", "0..5", "valid: 0..1")),
    ("idx-labels-out-of-range", lambda d: ["--dataset", "mnist", "--data-dir",
                                           str(d / "idx_labels")],
     ("train-labels-idx1-ubyte.gz", "0..11", "valid: 0..9")),
    ("images-mixed-channels", lambda d: medmnist(d, "mixed_channels.npz"),
     ("mixed_channels.npz", "(28, 28, 1)", "(28, 28, 3)", "both splits need one shape")),
    ("images-mixed-sizes-npz", lambda d: medmnist(d, "mixed_sizes.npz"),
     ("mixed_sizes.npz", "(20, 20, 1)", "both splits need one shape")),
    ("images-mixed-sizes-files", lambda d: ["--dataset", "aptos", "--data-dir",
                                            str(d / "aptos_mixed")],
     ("mixed image sizes", "img1.png", "21x20", "set data.image_size")),
    ("pixels-nan", lambda d: medmnist(d, "nan.npz"), ("nan.npz [train_images]", "NaN or inf")),
    ("pixels-inf", lambda d: medmnist(d, "inf.npz"), ("inf.npz [train_images]", "NaN or inf")),
    ("split-empty", lambda d: medmnist(d, "empty_test.npz"),
     ("empty_test.npz", "test split is empty", "need at least one example")),
    ("dataset-empty", lambda d: medmnist(d, "empty_all.npz"),
     ("empty_all.npz", "is empty", "need at least one example")),
    ("idx-truncated", lambda d: ["--dataset", "mnist", "--data-dir", str(d / "idx_truncated")],
     ("train-images-idx3-ubyte", "truncated", "needs 15696")),
    ("idx-wrong-magic", lambda d: ["--dataset", "mnist", "--data-dir", str(d / "idx_magic")],
     ("t10k-labels-idx1-ubyte", "magic number 2051", "2049")),
    ("gzip-truncated", lambda d: ["--dataset", "mnist", "--data-dir", str(d / "gz_truncated")],
     ("train-labels-idx1-ubyte.gz", "corrupt or truncated gzip", "valid: an intact IDX")),
    ("gzip-corrupt", lambda d: ["--dataset", "mnist", "--data-dir", str(d / "gz_corrupt")],
     ("train-images-idx3-ubyte.gz", "corrupt or truncated gzip", "valid: an intact IDX")),
    ("image-truncated", lambda d: ["--dataset", "aptos", "--data-dir", str(d / "aptos_truncated"),
                                   "--set", "data.image_size=16"],
     ("img3.png", "not a readable image", "valid: an intact PNG or JPEG")),
    ("image-not-an-image", lambda d: ["--dataset", "aptos", "--data-dir",
                                      str(d / "aptos_not_image"), "--set", "data.image_size=16"],
     ("img4.png", "not a readable image", "valid: an intact PNG or JPEG")),
    ("csv-names-missing-image", lambda d: ["--dataset", "aptos", "--data-dir",
                                           str(d / "aptos_missing"),
                                           "--set", "data.image_size=16"],
     ("train.csv line 11", "img9.png", "does not exist")),
    ("csv-label-out-of-range", lambda d: ["--dataset", "aptos", "--data-dir",
                                          str(d / "aptos_grade"), "--set", "data.image_size=16"],
     ("train.csv line 4", "diagnosis='7'", "valid: 0..4")),
    ("data-dir-missing", lambda d: ["--dataset", "digits", "--data-dir", str(d / "nowhere")],
     ("nowhere", "does not exist", "valid: an existing folder")),
    ("medmnist-file-missing", lambda d: medmnist(d, "absent.npz"),
     ("absent.npz", "not found", "valid: the path of a MedMNIST npz")),
]


@pytest.mark.parametrize(("extra", "fragments"), [c[1:] for c in DATA_CASES],
                         ids=[c[0] for c in DATA_CASES])
def test_bad_data_through_train(
    extra: Callable[[Path], list[str]], fragments: tuple[str, ...], data: Path, guard: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = run_cli(capsys, *TRAIN, *extra(data), "--out", guard)
    assert_one_line_error(code, err, "dpcompare train: error:", *fragments)


# Bad values: the data set is the built-in digits (8x8, resized to 16 for cnn4).
VALUE_CASES: list[tuple[str, list[str], tuple[str, ...]]] = [
    ("unknown-dataset", ["--dataset", "no_such_set"],
     ("'no_such_set'", "valid: mnist5k, digits", "medmnist:PATH")),
    ("unknown-model", ["--dataset", "digits", "--model", "resnet99"],
     ("model.name='resnet99'", "valid: cnn4, resnet18")),
    ("unknown-mechanism", ["--dataset", "digits", "--set", "privacy.mechanism=magic"],
     ("privacy.mechanism='magic'", "valid: none, dpsgd-gaussian, dpsgd-laplace, ldp")),
    ("unknown-mechanism-option", ["--dataset", "digits", "--mechanism", "magic"],
     ("--mechanism", "'magic'", "'gaussian'")),
    ("delta-above-1", ["--dataset", "digits", "--noise-multiplier", "1", "--delta", "2"],
     ("privacy.delta=2.0", "valid: a number in (0, 1)")),
    ("delta-zero", ["--dataset", "digits", "--noise-multiplier", "1", "--delta", "0"],
     ("privacy.delta=0.0", "(0, 1)")),
    ("epsilon-negative", ["--dataset", "digits", "--epsilon", "-1"],
     ("privacy.target_epsilon=-1.0", "valid: a number > 0")),
    ("epsilon-zero", ["--dataset", "digits", "--epsilon", "0"],
     ("privacy.target_epsilon=0.0", "> 0")),
    ("epsilon-inf", ["--dataset", "digits", "--epsilon", "inf"],
     ("target_epsilon=inf", "mechanism='none'")),
    ("noise-negative", ["--dataset", "digits", "--noise-multiplier", "-1"],
     ("privacy.noise_multiplier=-1.0", "valid: a finite number >= 0")),
    ("noise-inf", ["--dataset", "digits", "--noise-multiplier", "inf"],
     ("privacy.noise_multiplier=inf", "not finite", "valid: a finite number >= 0")),
    ("noise-nan", ["--dataset", "digits", "--noise-multiplier", "nan"],
     ("privacy.noise_multiplier=nan", "not a number")),
    ("clip-norm-inf", ["--dataset", "digits", "--noise-multiplier", "1",
                       "--max-grad-norm", "inf"],
     ("privacy.max_grad_norm=inf", "valid: a finite number > 0")),
    ("clip-norm-zero", ["--dataset", "digits", "--noise-multiplier", "1",
                        "--max-grad-norm", "0"],
     ("privacy.max_grad_norm=0.0", "> 0")),
    ("noise-without-dpsgd", ["--dataset", "digits", "--mechanism", "none",
                             "--set", "privacy.noise_multiplier=1"],
     ("adds no gradient noise",)),
    ("batch-larger-than-data", ["--dataset", "digits", "--noise-multiplier", "1",
                                "--batch-size", "5000", "--set", "data.image_size=16"],
     ("train.batch_size=5000", "1437 examples", "valid: 1..1437")),
    ("lr-inf", ["--dataset", "digits", "--lr", "inf"], ("train.lr=inf", "finite")),
    ("epochs-inf", ["--dataset", "digits", "--set", "train.steps=null",
                    "--set", "train.epochs=inf"], ("train.epochs=inf", "finite")),
    ("sampling-unknown", ["--dataset", "digits", "--set", "privacy.sampling=sequential"],
     ("privacy.sampling='sequential'", "valid: poisson, shuffle")),
    ("input-too-small", ["--dataset", "digits", "--set", "data.image_size=8",
                         "--noise-multiplier", "1"], ("data.image_size",)),
]


@pytest.mark.parametrize(("extra", "fragments"), [c[1:] for c in VALUE_CASES],
                         ids=[c[0] for c in VALUE_CASES])
def test_bad_values_through_train(
    extra: list[str], fragments: tuple[str, ...], guard: Path, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # TRAIN's batch of 2 is replaced where a case sets its own (argparse: last one wins).
    code, _, err = run_cli(capsys, *TRAIN, *extra, "--out", guard)
    assert_one_line_error(code, err, *fragments)


def test_debug_shows_the_traceback(data: Path, guard: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "--debug", *TRAIN, *medmnist(data, "nan.npz"),
                           "--out", guard)
    assert code == 2 and "Traceback" in err and "DataError" in err
    assert err.strip().splitlines()[-1].startswith("dpcompare train: error:")


def test_output_folder_under_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Tests run as root (chmod does not stop root), so the unwritable folder is one whose
    parent is a regular file: creating it fails with ENOTDIR."""
    blocker = tmp_path / "somefile"
    blocker.write_text("not a folder")
    grid = write_grid(tmp_path / "tiny.yaml")
    code, _, err = run_cli(capsys, *TRAIN, "--dataset", "digits", "--out", blocker / "sub")
    assert_one_line_error(code, err, f"output folder {blocker / 'sub'}", "not writable",
                          "--out")
    code, _, err = run_cli(capsys, "compare", "--config", grid, "--out", blocker / "sub",
                           "--no-report", "--quiet")
    assert_one_line_error(code, err, "dpcompare compare: error:", str(blocker / "sub"))
    code, _, err = run_cli(capsys, "compare", "--config", grid, "--out", tmp_path / "ok",
                           "--report", blocker / "rep", "--quiet")
    assert_one_line_error(code, err, "--report", str(blocker / "rep"), "is a file")
    assert not (tmp_path / "ok").exists(), "nothing may be trained or written before the check"
    code, _, err = run_cli(capsys, "ldp", "--dataset", "digits", "--mechanism", "laplace",
                           "--out", blocker / "ldp")
    assert_one_line_error(code, err, "dpcompare ldp: error:", "--out", "is a file")
    (tmp_path / "runs" / "runs").mkdir(parents=True)
    code, _, err = run_cli(capsys, "report", tmp_path / "runs", "--out", blocker / "rep")
    assert_one_line_error(code, err, "dpcompare report: error:", "--out", "is a file")
    assert blocker.read_text() == "not a folder"


def test_compare_bad_grid_files(tmp_path: Path, guard: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("base: {data: {name: digits}\n  oops: [\n")
    code, _, err = run_cli(capsys, "compare", "--config", broken, "--out", guard, "--quiet")
    assert_one_line_error(code, err, "config file", "broken.yaml", "not valid YAML/JSON")

    unknown_key = write_grid(tmp_path / "k.yaml", {**TINY_GRID, "grid_size": 3})
    code, _, err = run_cli(capsys, "compare", "--config", unknown_key, "--out", guard)
    assert_one_line_error(code, err, "unknown grid key(s) grid_size", "valid:")

    bad_value = write_grid(tmp_path / "v.yaml", {
        **TINY_GRID, "base": {**TINY_GRID["base"], "train": {"steps": 5, "batch_size": -3}}})
    code, _, err = run_cli(capsys, "compare", "--config", bad_value, "--out", guard)
    assert_one_line_error(code, err, "train.batch_size=-3", "valid: an integer >= 1")

    code, _, err = run_cli(capsys, "compare", "--config", tmp_path / "absent.yaml",
                           "--out", guard)
    assert_one_line_error(code, err, "absent.yaml", "does not exist")

    code, _, err = run_cli(capsys, "compare", "--preset", "no-such-preset", "--out", guard)
    line = assert_one_line_error(code, err, "preset 'no-such-preset'", "valid: ")
    assert {"demo", "mnist-library-benchmark"} <= set(line.split("valid: ", 1)[1].split(", "))

    grid = write_grid(tmp_path / "tiny.yaml")
    code, _, err = run_cli(capsys, "compare", "--config", grid, "--backends", "jax",
                           "--out", guard)
    assert_one_line_error(code, err, "backend 'jax'", "valid: tf, torch")

    code, _, err = run_cli(capsys, "compare", "--config", grid, "--out", guard,
                           "--set", "privacy.delta=7", "--quiet")
    assert_one_line_error(code, err, "privacy.delta=7", "(0, 1)")

    code, _, err = run_cli(capsys, "compare", "--config", grid, "--out", guard, "--no-report",
                           "--data-dir", tmp_path / "nowhere", "--quiet")
    assert_one_line_error(code, err, "data directory", "nowhere", "does not exist")


def test_datasets_with_a_missing_data_dir(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "datasets", "--data-dir", tmp_path / "nowhere")
    assert_one_line_error(code, err, "dpcompare datasets: error:", "nowhere", "does not exist")


def test_datasets_lists_a_corrupt_file_as_unreadable(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``datasets`` is an inventory: a corrupt file is a row ``unreadable`` naming the file and
    the defect (exit 0, the other sets still listed), not an abort."""
    root = tmp_path / "root"
    (root / "retinamnist").mkdir(parents=True)
    (root / "retinamnist" / "retinamnist.npz").write_bytes(
        (data / "truncated.npz").read_bytes())
    code, out, err = run_cli(capsys, "datasets", "--data-dir", root)
    assert code == 0 and "Traceback" not in err
    row = next(line for line in out.splitlines() if line.startswith("retinamnist "))
    assert "unreadable" in row and "retinamnist.npz" in row and "not a readable npz" in row
    assert any(line.startswith("digits ") and "built in" in line for line in out.splitlines())


def test_compare_reports_failed_runs_on_stderr_even_when_quiet(
    tmp_path: Path, guard: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run that fails inside a grid (here its backend raises during training, which no check
    before the grid can foresee) is recorded and the grid goes on (exit 1, not 2): the one
    summary line names the run and the reason, so ``--quiet`` never hides a failure."""
    from compare import training

    class Broken:
        def __getattr__(self, name: str) -> object:
            if name == "train":
                def train(*_args: object, **_kwargs: object) -> None:
                    raise RuntimeError("the backend broke mid-run")
                return train
            raise AttributeError(name)

    monkeypatch.setattr(training, "load_backend", lambda _name: Broken())
    grid = write_grid(tmp_path / "g.yaml", {
        **TINY_GRID, "axes": {"privacy": TINY_GRID["axes"]["privacy"][:1]}})
    out = tmp_path / "out"
    code, stdout, err = run_cli(capsys, "compare", "--config", grid, "--out", out, "--no-report",
                                "--quiet")
    assert code == 1 and stdout == "" and "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("dpcompare compare: error: 1 run(s) failed")
    assert "the backend broke mid-run" in last and str(out) in last
    assert len(list((out / "runs").glob("*/result.json"))) == 1


def test_compare_refuses_a_missing_data_set_before_any_run(
    tmp_path: Path, guard: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A data set that is not there is found by the grid's check before its first run: one
    line naming it, exit 2, nothing written (it was a failed run per cell before)."""
    grid = write_grid(tmp_path / "g.yaml", {
        **TINY_GRID, "base": {**TINY_GRID["base"], "data": {"name": "chest_xray"}},
        "axes": {"privacy": TINY_GRID["axes"]["privacy"][:1]}})
    (tmp_path / "empty-root").mkdir()
    out = tmp_path / "out"
    code, stdout, err = run_cli(capsys, "compare", "--config", grid, "--out", out, "--no-report",
                                "--quiet", "--data-dir", tmp_path / "empty-root")
    assert code == 2 and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and "chest_xray" in err
    assert not list(out.glob("runs/*/result.json"))
