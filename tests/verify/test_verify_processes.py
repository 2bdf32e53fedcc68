"""``verify --processes``: the engines checked at the same time, each beyond the first in a
spawned process of its own, give the report a serial check gives (every statistic, fact and
verdict; only the seconds differ); ``auto`` does so only where the backend measured a gain;
bad values are refused before anything is checked."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from compare import api
from compare.cli.main import main
from dpcore.backend import load_backend
from dpcore.errors import ConfigError
from dpcore.verify.run import auto_processes

pytest.importorskip("tensorflow")
pytest.importorskip("torch")

CONFIG = {"data": {"name": "digits"}, "model": {"name": "cnn4"},
          "privacy": {"mechanism": "dpsgd-gaussian", "noise_multiplier": 1.0}}


def _without_seconds(report: Any) -> dict[str, Any]:
    out = report.to_dict()
    for step in out["steps"]:
        step.pop("seconds")
    return out


@pytest.fixture
def op_determinism_on() -> Iterator[None]:
    """TensorFlow's op determinism switched on in this process, as an earlier training leaves
    it (a fresh process starts with it off), restored afterwards."""
    import tensorflow as tf
    from tensorflow.python.framework import config as tf_config

    was_on = tf_config.is_op_determinism_enabled()
    tf.config.experimental.enable_op_determinism()
    yield
    if not was_on:
        tf_config.disable_op_determinism()


@pytest.mark.parametrize("backend", ["tf", "torch"])
def test_engines_in_two_processes_give_the_serial_report(backend: str,
                                                         op_determinism_on: None) -> None:
    """Also when this process's framework state is not a fresh one's (the test suite's
    earlier trainings leave op determinism on: the reports differed in float rounding until
    every process of a check set the state as training does)."""
    lines: list[str] = []
    serial = api.verify(CONFIG, backend, processes=1)
    parallel = api.verify(CONFIG, backend, processes=2, log=lines.append)
    assert [s.engine for s in parallel.steps] == ["fast", "reference"]
    assert _without_seconds(parallel) == _without_seconds(serial)
    assert parallel.passed
    assert lines == [f"verify {backend}: checking the fast step (and reference in 1 other "
                     "process(es))"]


def _data(shape: tuple[int, ...], classes: int) -> Any:
    return SimpleNamespace(input_shape=shape, n_classes=classes, vocabulary_size=None)


def _config(model: str) -> Any:
    return api.resolve_config({**CONFIG, "model": {"name": model}}, "tf")[0]


@pytest.mark.parametrize(("backend", "model", "shape", "expected"), [
    ("tf", "resnet18", (28, 28, 3), 2),   # 11.2M weights: traced steps dominate
    ("tf", "cnn4", (28, 28, 1), 1),       # a second TF import costs more than it saves
    ("torch", "resnet18", (28, 28, 3), 2),
    ("torch", "cnn4", (28, 28, 1), 1),
])
def test_auto_checks_at_once_only_where_the_backend_gains(
        backend: str, model: str, shape: tuple[int, ...], expected: int,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    code = load_backend(backend)
    assert auto_processes(code, _config(model), _data(shape, 5), engines=2) == expected
    assert auto_processes(code, _config(model), _data(shape, 5), engines=1) == 1


def test_auto_never_asks_for_more_processes_than_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 1)
    code = load_backend("tf")
    assert auto_processes(code, _config("resnet18"), _data((28, 28, 3), 5), engines=2) == 1


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "two"])
def test_a_bad_process_count_is_refused_naming_it(bad: Any) -> None:
    with pytest.raises(ConfigError, match=r"processes=.* is not a whole number >= 1 or 'auto'"):
        api.verify(CONFIG, "torch", processes=bad)


def test_the_cli_refuses_a_bad_process_count_with_exit_2(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["verify", "--backend", "tf", "--dataset", "digits", "--noise-multiplier", "1",
              "--processes", "0"])
    assert exit_info.value.code == 2
    assert "'0' is not a whole number >= 1 or 'auto'" in capsys.readouterr().err
