"""The CLI's thin edges: ``dpcompare ldp``, ``audit``, ``datasets`` and ``bench`` call
:mod:`compare.api` (the same figures from both), ``compare.api`` reaches the libraries'
accountants only through :func:`dpcore.backend.load_backend`, and an output folder's check
names the folder and the option separately."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from compare import api
from compare.cli.main import main
from compare.folders import check_output_folder
from dpcore.errors import ConfigError, DataError, DpCompareError

#: A tiny local-DP copy of digits (seconds).
LDP = {"train_limit": 40, "test_limit": 10, "montage_rows": 0, "quality_images": 10}


def cli_json(capsys: pytest.CaptureFixture[str], *args: Any) -> Any:
    assert main([str(a) for a in args]) == 0
    return json.loads(capsys.readouterr().out)


def test_privatise_equals_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cli = cli_json(capsys, "ldp", "--dataset", "digits", "--mechanism", "laplace", "--scale",
                   "0.5", "--train-limit", "40", "--test-limit", "10", "--montage-rows", "0",
                   "--quality-images", "10", "--out", tmp_path / "cli", "--json")
    ours = api.privatise("digits", "laplace", {"scale": 0.5}, out=tmp_path / "api", **LDP)
    assert json.loads(json.dumps(ours))["files"]["npz"].startswith(str(tmp_path / "api"))
    for key in ("dataset", "n_images", "params", "epsilon", "quality", "seed", "splits",
                "privatised_fingerprint", "source_fingerprint"):
        assert json.loads(json.dumps(ours[key])) == cli[key], key
    assert (tmp_path / "api" / "summary.json").is_file()


def test_privatise_dry_run_writes_nothing_and_errors_use_the_callers_names(
        tmp_path: Path) -> None:
    line = api.privatise("digits", "gaussian", {"sigma": 1.0}, out=tmp_path / "o",
                         dry_run=True, **LDP)
    assert line.startswith("dry run: would privatise digits") and not (tmp_path / "o").exists()
    with pytest.raises(ConfigError, match=r"^seed=-1 is not valid; valid: an integer >= 0$"):
        api.privatise("digits", "laplace", seed=-1, out=tmp_path / "o", **LDP)
    with pytest.raises(ConfigError, match=r"^--seed=-1 is not valid"):
        api.privatise("digits", "laplace", seed=-1, out=tmp_path / "o",
                      names={"seed": "--seed"}, **LDP)
    with pytest.raises(ConfigError, match=r"splits='val' is not valid; valid: train, test"):
        api.privatise("digits", "laplace", splits=("val",), out=tmp_path / "o", **LDP)
    assert not (tmp_path / "o").exists()


def test_an_output_folder_is_named_by_its_label_and_advised_by_its_option(
        tmp_path: Path) -> None:
    blocker = tmp_path / "somefile"
    blocker.write_text("not a folder")
    with pytest.raises(DpCompareError) as caught:
        check_output_folder(blocker / "sub", "--out", "output folder")
    assert str(caught.value) == (f"output folder {blocker / 'sub'} is not writable: {blocker} "
                                 "is a file, not a folder; choose a folder you can write to "
                                 "with --out")
    with pytest.raises(DpCompareError, match=r"^--report .* with --report$"):
        check_output_folder(blocker / "sub", "--report")
    with pytest.raises(ConfigError) as caught:
        api.train({"data": {"name": "digits"}}, "torch", out=blocker / "sub")
    assert str(caught.value).startswith(f"output folder {blocker / 'sub'} is not writable: "
                                        f"{blocker} is a file")
    assert str(caught.value).endswith("choose a folder you can write to with --out")


def test_audit_of_a_folder_without_a_run_is_one_error(tmp_path: Path) -> None:
    for dry_run in (True, False):
        with pytest.raises(DpCompareError, match="is missing or not a readable RunResult"):
            api.audit(tmp_path, dry_run=dry_run)
    assert list(tmp_path.iterdir()) == []


def test_datasets_and_download_equal_the_cli(capsys: pytest.CaptureFixture[str],
                                             tmp_path: Path) -> None:
    cli = cli_json(capsys, "datasets", "--data-dir", tmp_path, "--json")
    assert json.loads(json.dumps(api.dataset_rows(tmp_path))) == cli["datasets"]
    assert list(api.datasets(tmp_path)["name"]) == [row["name"] for row in cli["datasets"]]
    assert api.download("mnist", tmp_path, dry_run=True) == [Path(cli["data_root"])]
    with pytest.raises(DataError, match=r"'nope' is not downloadable; valid: .*mnist"):
        api.download("nope", tmp_path, dry_run=True)
    assert list(tmp_path.iterdir()) == []


def test_bench_refuses_an_unknown_case_before_running(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"benchmark case nope is not known; valid: "):
        api.bench(tmp_path / "b", cases=["nope"])
    assert not (tmp_path / "b").exists()


class FakeBackend:
    """A backend whose library accountants give fixed figures (records what it was asked)."""

    def __init__(self, name: str, figures: dict[str, float | None]) -> None:
        self.name, self.figures, self.calls = name, figures, []

    def accountant_epsilons(self, noise_multiplier: float, sampling_rate: float, steps: int,
                            delta: float, *, n: int, batch_size: int, epochs: float
                            ) -> dict[str, float | None]:
        self.calls.append((noise_multiplier, sampling_rate, steps, delta, n, batch_size,
                           epochs))
        return dict(self.figures)


def test_library_epsilons_come_from_the_backends_by_name(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fakes = {"tf": FakeBackend("tf", {"tf_privacy": 1.5, "tf_privacy_user": 1.6}),
             "torch": FakeBackend("torch", {"opacus_rdp": 2.5, "opacus_prv": 2.4})}
    monkeypatch.setattr(api, "load_backend", lambda name: fakes[name])
    out = api.epsilon(n=1000, batch_size=100, noise_multiplier=1.0, epochs=2)
    assert {k: out["epsilon"][k] for k in ("tf_privacy", "tf_privacy_user", "opacus_rdp",
                                           "opacus_prv")} == {
        "tf_privacy": 1.5, "tf_privacy_user": 1.6, "opacus_rdp": 2.5, "opacus_prv": 2.4}
    assert fakes["tf"].calls == fakes["torch"].calls == [(1.0, 0.1, 20, 1e-5, 1000, 100, 2)]
