"""``dpcompare datasets --download``: against an HTTP server on the loopback address serving
files the test makes (a good file, a corrupt one, a truncated one, a 404, one that ignores
``Range``, archives): checksums verified, transfers resumed, no partial file ever left under
a final name."""

from __future__ import annotations

import hashlib
import http.server
import io
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compare.cli.main import main
from dpcore.config import DataSpec
from dpcore.data import DATASETS, load_dataset
from dpcore.data import download as dl
from dpcore.data.download import DOWNLOADS, Download, RemoteFile, download
from dpcore.errors import DataError
from tests.dpcore.data_writers import isolate, write_medmnist

PAYLOAD = bytes(range(256)) * 300  # 76,800 bytes: several read blocks


class _Handler(http.server.BaseHTTPRequestHandler):
    """Serves ``server.files[name] = (bytes, mode)``: mode ``ok`` (honours Range), ``no-range``
    (always the whole file), ``truncated`` (announces the whole length, sends half, closes)."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        server: Any = self.server
        name = self.path.lstrip("/")
        server.requests.append((name, self.headers.get("Range")))
        if name not in server.files:
            self.send_error(404, "Not Found")
            return
        data, mode = server.files[name]
        start = 0
        range_header = self.headers.get("Range")
        if range_header and mode == "ok":
            start = int(range_header.removeprefix("bytes=").split("-")[0])
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        body = data[start:]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[: len(body) // 2] if mode == "truncated" else body)

    def log_message(self, *args: object) -> None:
        """Quiet."""


@pytest.fixture()
def server() -> Iterator[Any]:
    srv: Any = http.server.HTTPServer(("127.0.0.1", 0), _Handler)
    srv.files, srv.requests = {}, []
    srv.base = f"http://127.0.0.1:{srv.server_address[1]}"
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join()


def _md5(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def _table(name: str = "data.bin", data: bytes = PAYLOAD, **kw: Any) -> dict[str, Download]:
    remote = RemoteFile(f"https://example.org/files/{name}", _md5(data), f"toy/{name}", **kw)
    return {"toy": Download("toy", (remote,), "the test")}


def _files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def test_good_file_is_verified_and_placed(server: Any, tmp_path: Path) -> None:
    server.files["data.bin"] = (PAYLOAD, "ok")
    (placed,) = download("toy", tmp_path, base_url=server.base, downloads=_table())
    assert placed == tmp_path / "toy" / "data.bin" and placed.read_bytes() == PAYLOAD
    assert _files(tmp_path) == ["toy/data.bin"]
    download("toy", tmp_path, base_url=server.base, downloads=_table())  # already there
    assert len(server.requests) == 1


def test_corrupt_file_leaves_nothing(server: Any, tmp_path: Path) -> None:
    server.files["data.bin"] = (PAYLOAD[:-1] + b"X", "ok")
    with pytest.raises(DataError, match=r"data\.bin: MD5 \w+ is not the published \w+ .*"
                                        r"nothing was kept") as info:
        download("toy", tmp_path, base_url=server.base, downloads=_table())
    assert "\n" not in str(info.value)
    assert _files(tmp_path) == []


def test_404_leaves_nothing(server: Any, tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"/data\.bin: HTTP 404 Not Found; nothing was "):
        download("toy", tmp_path, base_url=server.base, downloads=_table())
    assert _files(tmp_path) == []


def test_truncated_transfer_is_kept_aside_and_resumed(server: Any, tmp_path: Path) -> None:
    server.files["data.bin"] = (PAYLOAD, "truncated")
    with pytest.raises(DataError, match=r"transfer broke off after 38400 bytes .*resume"):
        download("toy", tmp_path, base_url=server.base, downloads=_table())
    assert _files(tmp_path) == ["toy/data.bin.part"]  # nothing under the final name
    server.files["data.bin"] = (PAYLOAD, "ok")
    download("toy", tmp_path, base_url=server.base, downloads=_table())
    assert server.requests[-1] == ("data.bin", "bytes=38400-")
    assert (tmp_path / "toy" / "data.bin").read_bytes() == PAYLOAD
    assert _files(tmp_path) == ["toy/data.bin"]


def test_a_server_ignoring_range_replaces_the_partial_file(server: Any, tmp_path: Path) -> None:
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy" / "data.bin.part").write_bytes(b"stale bytes")
    server.files["data.bin"] = (PAYLOAD, "no-range")
    download("toy", tmp_path, base_url=server.base, downloads=_table())
    assert (tmp_path / "toy" / "data.bin").read_bytes() == PAYLOAD
    assert _files(tmp_path) == ["toy/data.bin"]


def _tar_gz(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_archive_is_unpacked_then_removed(server: Any, tmp_path: Path) -> None:
    archive = _tar_gz({"aclImdb/train/pos/0_9.txt": b"great", "aclImdb/test/neg/1_2.txt": b"bad"})
    server.files["a.tar.gz"] = (archive, "ok")
    table = _table("a.tar.gz", archive, unpack="tar.gz", creates="aclImdb")
    (placed,) = download("toy", tmp_path, base_url=server.base, downloads=table)
    assert placed == tmp_path / "toy" / "aclImdb"
    assert _files(tmp_path) == ["toy/aclImdb/test/neg/1_2.txt", "toy/aclImdb/train/pos/0_9.txt"]
    download("toy", tmp_path, base_url=server.base, downloads=table)  # present: not fetched
    assert len(server.requests) == 1


def test_archive_escaping_its_folder_is_refused(server: Any, tmp_path: Path) -> None:
    archive = _tar_gz({"../evil.txt": b"x"})
    server.files["a.tar.gz"] = (archive, "ok")
    root = tmp_path / "root"
    with pytest.raises(DataError, match=r"a\.tar\.gz\.part: cannot unpack"):
        download("toy", root, base_url=server.base,
                 downloads=_table("a.tar.gz", archive, unpack="tar.gz"))
    assert _files(tmp_path) == []


def test_registered_downloads_land_where_the_registry_looks() -> None:
    for name, entry in DOWNLOADS.items():
        candidates = DATASETS[name].candidates
        for remote in entry.files:
            assert len(remote.md5) == 32 and int(remote.md5, 16) >= 0
            assert remote.url.startswith("https://")
            where = Path(remote.dest).parent / (remote.creates or Path(remote.dest).name)
            assert any(where.as_posix() == c or where.parent.as_posix() == c
                       for c in candidates), (name, where)


def test_cli_downloads_through_a_mirror_and_the_data_set_loads(
        server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    isolate(monkeypatch, tmp_path)
    write_medmnist(tmp_path / "src" / "pneumoniamnist.npz")
    data = (tmp_path / "src" / "pneumoniamnist.npz").read_bytes()
    server.files["pneumoniamnist.npz"] = (data, "ok")
    root = tmp_path / "root"
    root.mkdir()
    # the published checksum does not match the test's file: refused, one line, exit 2
    code = main(["datasets", "--download", "pneumoniamnist", "--data-dir", str(root),
                 "--download-url", server.base])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "not the published 28209eda62fecd6e6a2d98b1501bb15f" in err
    assert _files(root) == []
    # with the test file's checksum registered, the mirror (env var) serves it
    real = DOWNLOADS["pneumoniamnist"].files[0]
    monkeypatch.setitem(dl.DOWNLOADS, "pneumoniamnist", Download(
        "pneumoniamnist", (RemoteFile(real.url, _md5(data), real.dest),), "the test"))
    monkeypatch.setenv(dl.DOWNLOAD_URL_ENV, server.base)
    assert main(["datasets", "--download", "pneumoniamnist", "--data-dir", str(root)]) == 0
    assert "pneumoniamnist/pneumoniamnist.npz" in capsys.readouterr().out
    ds = load_dataset(DataSpec(name="pneumoniamnist"), root)
    assert len(ds.y_train) == 12 and len(ds.y_test) == 6
    assert main(["datasets", "--download", "nope"]) == 2
    assert "'nope' has no download; valid: pneumoniamnist" in capsys.readouterr().err
