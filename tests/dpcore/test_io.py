"""dpcore.io: atomic writes survive a kill, one permission rule, round trips of each format, and
the one JSON sanitiser.

The kill tests run a real subprocess that stops inside a write (after part of the new bytes
are on disk) and waits for the test to kill it, so the kill always lands mid-write.
"""

from __future__ import annotations

import json
import math
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from collections import namedtuple
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from dpcore.io import (
    LEGACY_META_KEY,
    META_KEY,
    atomic_path,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    default_file_mode,
    json_safe,
    read_npz,
    write_npz,
)

REPO = Path(__file__).resolve().parents[2]


# ----------------------------------------------------------------------- atomicity under a kill
#: The child starts an atomic write, writes part of the new content, tells the test (a file
#: appears), then sleeps until it is killed.
_WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import numpy as np
    import dpcore.io as io

    kind, dest, ready = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])

    def stall():
        ready.touch()
        time.sleep(300)  # the test kills us here

    if kind == "bytes":
        with io.atomic_path(dest) as tmp, open(tmp, "wb") as handle:
            handle.write(b"N" * 100_000)
            handle.flush()
            stall()
    else:  # npz: stall after the first array member is written
        real = np.lib.format.write_array
        calls = []

        def slow_write(*args, **kwargs):
            real(*args, **kwargs)
            calls.append(1)
            if len(calls) == 1:
                args[0].flush()
                stall()

        np.lib.format.write_array = slow_write
        io.write_npz(dest, {"a": np.ones(50_000), "b": np.zeros(3)}, {"new": True})
""")


def _kill_mid_write(tmp_path: Path, kind: str, dest: Path) -> None:
    ready = tmp_path / "ready"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, kind, str(dest), str(ready)],
                            env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            if proc.poll() is not None:
                pytest.fail(f"writer ended before the kill: {proc.communicate()[1]}")
            if time.monotonic() > deadline:
                pytest.fail("the writer never reached the middle of its write")
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL


def test_a_kill_mid_write_leaves_the_previous_file_whole(tmp_path: Path) -> None:
    dest = tmp_path / "out" / "result.json"
    atomic_write_json(dest, {"old": 1})
    _kill_mid_write(tmp_path, "bytes", dest)
    assert json.loads(dest.read_text()) == {"old": 1}
    # The partial new content exists only as a hidden temporary file beside it.
    leftovers = [p for p in dest.parent.iterdir() if p != dest]
    assert leftovers and all(p.name.startswith(".result.json.") for p in leftovers)
    assert any(p.stat().st_size > 0 for p in leftovers)  # the kill did land mid-write


def test_a_kill_mid_write_of_a_new_file_leaves_no_file(tmp_path: Path) -> None:
    dest = tmp_path / "new.bin"
    _kill_mid_write(tmp_path, "bytes", dest)
    assert not dest.exists()


def test_a_kill_mid_npz_write_leaves_the_previous_npz_readable(tmp_path: Path) -> None:
    dest = tmp_path / "data.npz"
    write_npz(dest, {"a": np.arange(3)}, {"old": True})
    _kill_mid_write(tmp_path, "npz", dest)
    arrays, meta = read_npz(dest)  # type: ignore[misc]
    assert meta == {"old": True}
    np.testing.assert_array_equal(arrays["a"], np.arange(3))


def test_an_error_inside_the_block_removes_the_temporary_file(tmp_path: Path) -> None:
    dest = tmp_path / "x.txt"
    atomic_write_text(dest, "before")
    with pytest.raises(KeyboardInterrupt), atomic_path(dest) as tmp:
        tmp.write_text("half")
        raise KeyboardInterrupt
    assert dest.read_text() == "before"
    assert [p.name for p in tmp_path.iterdir()] == ["x.txt"]


# ----------------------------------------------------------------------------- permissions
@pytest.fixture(params=[0o022, 0o077, 0o002])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_every_writer_gives_the_mode_of_a_plain_open(tmp_path: Path, umask: int) -> None:
    plain = tmp_path / "plain"
    plain.write_text("x")
    expected = _mode(plain)
    assert expected == 0o666 & ~umask == default_file_mode()
    atomic_write_bytes(tmp_path / "b", b"x")
    atomic_write_text(tmp_path / "t", "x")
    atomic_write_json(tmp_path / "j.json", {"x": 1})
    write_npz(tmp_path / "n.npz", {"a": np.zeros(2)}, {})
    for name in ("b", "t", "j.json", "n.npz"):
        assert _mode(tmp_path / name) == expected, name


def test_rewriting_a_file_applies_the_rule_again(tmp_path: Path, umask: int) -> None:
    dest = tmp_path / "r.json"
    atomic_write_json(dest, {"v": 1})
    os.chmod(dest, 0o600)
    atomic_write_json(dest, {"v": 2})
    assert _mode(dest) == default_file_mode()


def test_the_data_and_ldp_caches_and_results_use_the_same_rule(tmp_path: Path) -> None:
    from dpcore.data.cache import write_cached
    from dpcore.data.dataset import Dataset
    from dpcore.results import atomic_write_json as results_writer

    old = os.umask(0o027)
    try:
        ds = Dataset(name="t", task="image", class_names=("a", "b"),
                     x_train=np.zeros((2, 2, 2, 1), np.uint8), y_train=np.array([0, 1]),
                     x_test=np.zeros((2, 2, 2, 1), np.uint8), y_test=np.array([1, 0]))
        assert write_cached(tmp_path / "d.npz", ds, "k")
        results_writer(tmp_path / "r.json", {"a": 1})
        assert _mode(tmp_path / "d.npz") == _mode(tmp_path / "r.json") == 0o640
    finally:
        os.umask(old)


# ------------------------------------------------------------------------------ round trips
def test_bytes_text_and_json_round_trip(tmp_path: Path) -> None:
    atomic_write_bytes(tmp_path / "b", b"\x00\xffabc")
    assert (tmp_path / "b").read_bytes() == b"\x00\xffabc"
    atomic_write_text(tmp_path / "t", "Ünïcode\nline")
    assert (tmp_path / "t").read_text(encoding="utf-8") == "Ünïcode\nline"
    value = {"eps": math.inf, "nan": math.nan, "arr": np.array([1.5, np.nan]),
             "n": np.int64(3), "t": (1, 2), 4: "int key"}
    atomic_write_json(tmp_path / "j.json", value)
    assert json.loads((tmp_path / "j.json").read_text()) == {
        "eps": None, "nan": None, "arr": [1.5, None], "n": 3, "t": [1, 2], "4": "int key"}


def test_npz_round_trip_is_exact_and_byte_reproducible(tmp_path: Path) -> None:
    arrays = {"x": np.arange(24, dtype=np.uint8).reshape(2, 3, 4),
              "y": np.array([0.5, -1.0], np.float32), "names": np.array(["a", "bc"])}
    meta = {"name": "t", "n": 2, "eps": math.nan, "nested": {"k": [1, 2]}}
    write_npz(tmp_path / "a.npz", arrays, meta)
    write_npz(tmp_path / "b.npz", dict(reversed(list(arrays.items()))), meta)
    assert (tmp_path / "a.npz").read_bytes() == (tmp_path / "b.npz").read_bytes()
    read = read_npz(tmp_path / "a.npz")
    assert read is not None
    got, got_meta = read
    assert got_meta == {"name": "t", "n": 2, "eps": None, "nested": {"k": [1, 2]}}
    assert set(got) == set(arrays)
    for key, value in arrays.items():
        assert got[key].dtype == value.dtype
        np.testing.assert_array_equal(got[key], value)
    with np.load(tmp_path / "a.npz", allow_pickle=False) as plain:  # no pickle needed
        assert json.loads(str(plain[META_KEY])) == got_meta


def test_npz_of_the_older_meta_layout_still_reads(tmp_path: Path) -> None:
    path = tmp_path / "old.npz"
    np.savez(path, **{LEGACY_META_KEY: np.array(json.dumps({"format": 1, "key": "k"})),
                      "x_train": np.ones((2, 2))})
    read = read_npz(path)
    assert read is not None
    arrays, meta = read
    assert meta == {"format": 1, "key": "k"} and list(arrays) == ["x_train"]


@pytest.mark.parametrize("content", [b"", b"not a zip", None])
def test_damaged_or_metadata_less_npz_reads_as_absent(tmp_path: Path, content: bytes | None
                                                      ) -> None:
    path = tmp_path / "bad.npz"
    if content is None:
        np.savez(path, x=np.ones(2))  # no metadata member
    else:
        path.write_bytes(content)
    assert read_npz(path) is None
    assert read_npz(tmp_path / "missing.npz") is None


def test_truncated_npz_reads_as_absent(tmp_path: Path) -> None:
    path = tmp_path / "t.npz"
    write_npz(path, {"a": np.arange(1000)}, {"k": 1})
    path.write_bytes(path.read_bytes()[:300])
    assert read_npz(path) is None


def test_the_metadata_name_is_reserved(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="reserved"):
        write_npz(tmp_path / "x.npz", {META_KEY: np.zeros(1)}, {})
    assert not (tmp_path / "x.npz").exists()


# ------------------------------------------------------------------------------ sanitiser
def test_json_safe_handles_named_tuples_numpy_and_non_finite_values() -> None:
    Event = namedtuple("Event", ["module_name", "class_name", "noise", "inner"])
    value = Event("dp_event", "GaussianDpEvent", np.float64(1.5), [Event("a", "b", -math.inf, ())])
    assert json_safe(value) == {
        "module_name": "dp_event", "class_name": "GaussianDpEvent", "noise": 1.5,
        "inner": [{"module_name": "a", "class_name": "b", "noise": None, "inner": []}]}
    assert json_safe(np.float32(np.nan)) is None
    assert json_safe("text") == "text" and json_safe(b"x") == b"x"
    json.dumps(json_safe({"a": [np.inf, np.array([[1, 2]])]}), allow_nan=False)


def test_every_former_sanitiser_is_the_one_in_io() -> None:
    import compare.cli.common as common
    import dpcore.accounting as accounting
    import dpcore.results as results

    assert results.json_safe is json_safe
    for module in (common, accounting):  # a former name, if kept, is the one sanitiser
        for name in ("_finite", "_jsonable", "_json_safe"):
            assert vars(module).get(name, json_safe) is json_safe, f"{module.__name__}.{name}"
