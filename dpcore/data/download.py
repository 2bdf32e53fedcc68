"""``dpcompare datasets --download NAME``: fetch a data set's published files, verify their
checksums, and put them where the registry looks for them under the data root.

Guarantees:

* **Nothing partial in place.** Each file is fetched to ``<target>.part`` and renamed to its
  final name only after its MD5 matches the published one (an archive is unpacked into a
  temporary folder beside the target first, then moved). A checksum mismatch deletes the
  ``.part`` file; an interrupted transfer keeps it, so that the next run resumes it with an
  HTTP ``Range`` request (a server that ignores ``Range`` sends the whole file, which then
  replaces the partial one).
* **Published checksums, cited.** MedMNIST: the URLs and MD5 sums of ``medmnist/info.py``
  (MedMNIST v3.0.2, ``INFO[<flag>]["url"]`` and ``["MD5"]``; the 28x28 files, Zenodo record
  10519652). MNIST: torchvision's ``MNIST.resources`` (the ossci-datasets mirror of Yann
  LeCun's IDX files). IMDB: ``aclImdb_v1.tar.gz`` from ai.stanford.edu, the MD5 torchtext's
  ``IMDB`` dataset checks. Copied here rather than importing ``medmnist`` (its install pulls
  its own torch/torchvision requirements into the environment).
* **A mirror.** ``base_url`` (``--download-url``, else ``$DPCOMPARE_DOWNLOAD_URL``) replaces
  each file's published location by ``<base_url>/<file name>``; the checksum stays the
  published one.

A progress bar (tqdm) is shown when stderr is a terminal. Errors are one line naming the URL
or file (:class:`~dpcore.errors.DataError`).
"""

from __future__ import annotations

import hashlib
import http.client
import os
import shutil
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from dpcore.errors import DataError

#: Environment variable of the mirror base URL (see the module docstring).
DOWNLOAD_URL_ENV = "DPCOMPARE_DOWNLOAD_URL"

#: Bytes per read (and per progress-bar update).
BLOCK_SIZE = 1 << 16

#: Seconds a connection may stay silent before the transfer is abandoned (resumable).
TIMEOUT = 60.0


@dataclass(frozen=True)
class RemoteFile:
    """One published file.

    Attributes:
        url: its published location.
        md5: its published MD5 (hex).
        dest: where it goes, relative to the data root.
        unpack: ``tar.gz`` to extract it into ``dest``'s folder (the archive is then removed),
            or None to keep the file as it is.
        creates: for an archive, the top-level entry it unpacks to (present: not fetched).
    """

    url: str
    md5: str
    dest: str
    unpack: str | None = None
    creates: str | None = None

    @property
    def file_name(self) -> str:
        """The last component of the URL's path (the name a mirror serves it under)."""
        return Path(urlsplit(self.url).path).name


@dataclass(frozen=True)
class Download:
    """How to fetch one registered data set: its files and where their checksums come from."""

    name: str
    files: tuple[RemoteFile, ...]
    source: str


_MEDMNIST = ("MedMNIST v3.0.2, medmnist/info.py INFO[{flag!r}]: url and MD5 "
             "(https://github.com/MedMNIST/MedMNIST)")
_ZENODO = "https://zenodo.org/records/10519652/files/{flag}.npz?download=1"
_MNIST = "https://ossci-datasets.s3.amazonaws.com/mnist/"

DOWNLOADS: dict[str, Download] = {
    d.name: d for d in (
        Download("pneumoniamnist", (RemoteFile(
            _ZENODO.format(flag="pneumoniamnist"), "28209eda62fecd6e6a2d98b1501bb15f",
            "pneumoniamnist/pneumoniamnist.npz"),), _MEDMNIST.format(flag="pneumoniamnist")),
        Download("retinamnist", (RemoteFile(
            _ZENODO.format(flag="retinamnist"), "bd4c0672f1bba3e3a89f0e4e876791e4",
            "retinamnist/retinamnist.npz"),), _MEDMNIST.format(flag="retinamnist")),
        Download("mnist", tuple(RemoteFile(_MNIST + name, md5, f"mnist/{name}") for name, md5 in (
            ("train-images-idx3-ubyte.gz", "f68b3c2dcbeaaa9fbdd348bbdeb94873"),
            ("train-labels-idx1-ubyte.gz", "d53e105ee54ea40749a09fcbcd1e9432"),
            ("t10k-images-idx3-ubyte.gz", "9fb629c4189551a2d022fa330f9573f3"),
            ("t10k-labels-idx1-ubyte.gz", "ec29112dd5afa0611ce80d1b7f02629c"),
        )), "torchvision.datasets.MNIST.resources (mirror of yann.lecun.com/exdb/mnist)"),
        Download("imdb-full", (RemoteFile(
            "https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz",
            "7c2ac02c03563afcf9b574c7e56c153a", "imdb-full/aclImdb_v1.tar.gz", "tar.gz",
            "aclImdb"),),
            "Maas et al. 2011, ai.stanford.edu/~amaas/data/sentiment; MD5 of torchtext's IMDB"),
    )
}


def get_download(name: str, downloads: Mapping[str, Download] | None = None) -> Download:
    """The download entry of ``name``; DataError listing the downloadable names otherwise."""
    table = DOWNLOADS if downloads is None else downloads
    if name not in table:
        raise DataError(f"data set {name!r} has no download; valid: {', '.join(table)} (others: "
                        "see `dpcompare datasets` for how to get them)")
    return table[name]


def file_md5(path: Path) -> str:
    """MD5 (hex) of a file's bytes (the checksum the sources publish)."""
    digest = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download(name: str, root: Path, *, base_url: str | None = None, progress: bool = True,
             downloads: Mapping[str, Download] | None = None) -> list[Path]:
    """Fetch, verify and place every file of data set ``name`` under ``root``.

    Args:
        name: a name of :data:`DOWNLOADS`.
        root: the data root (created if missing).
        base_url: mirror replacing the published locations (default
            ``$DPCOMPARE_DOWNLOAD_URL``, else none).
        progress: show a progress bar (only when stderr is a terminal).
        downloads: the table to look ``name`` up in (tests); default :data:`DOWNLOADS`.

    Returns:
        The placed files (or unpacked folders), in order; files already in place with the
        published checksum are not fetched again.

    Raises:
        DataError: one line: unknown name, HTTP error, broken transfer (the ``.part`` file is
            kept for resuming), checksum mismatch (nothing kept), or an unsafe archive.
    """
    entry = get_download(name, downloads)
    base = base_url if base_url is not None else os.environ.get(DOWNLOAD_URL_ENV) or None
    root.mkdir(parents=True, exist_ok=True)
    placed = []
    for remote in entry.files:
        url = f"{base.rstrip('/')}/{remote.file_name}" if base else remote.url
        placed.append(_place(remote, url, root, progress))
    return placed


def _place(remote: RemoteFile, url: str, root: Path, progress: bool) -> Path:
    target = root / remote.dest
    if remote.creates is not None and (target.parent / remote.creates).exists():
        return target.parent / remote.creates
    if remote.unpack is None and target.is_file():
        if file_md5(target) == remote.md5:
            return target
        raise DataError(f"{target} exists but its MD5 is not the published {remote.md5}; "
                        "move it away to download it again")
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(target.name + ".part")
    fetch(url, part, progress)
    got = file_md5(part)
    if got != remote.md5:
        part.unlink()
        raise DataError(f"{url}: MD5 {got} is not the published {remote.md5} (a corrupt or "
                        "changed file); nothing was kept")
    if remote.unpack == "tar.gz":
        return _unpack(part, target.parent)
    os.replace(part, target)
    return target


def fetch(url: str, part: Path, progress: bool = True) -> None:
    """Append ``url``'s bytes to ``part`` from its current size on (HTTP ``Range``).

    Raises:
        DataError: an HTTP error (``part`` removed if it held nothing) or a broken transfer
            (``part`` kept: the next call resumes it).
    """
    have = part.stat().st_size if part.exists() else 0
    request = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
    try:
        response = urllib.request.urlopen(request, timeout=TIMEOUT)  # noqa: S310 - http(s) only
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and have:  # the partial file is already complete
            return
        raise DataError(f"{url}: HTTP {exc.code} {exc.reason}; nothing was downloaded") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise DataError(f"{url}: cannot connect ({_reason(exc)}); nothing was downloaded"
                        ) from exc
    with response:
        resumed = have and response.status == 206
        length = response.headers.get("Content-Length")
        total = (int(length) + (have if resumed else 0)) if length else None
        mode = "ab" if resumed else "wb"
        received = 0
        try:
            with part.open(mode) as fh, _bar(total, have if resumed else 0, part.name,
                                             progress) as bar:
                for block in iter(lambda: response.read(BLOCK_SIZE), b""):
                    fh.write(block)
                    received += len(block)
                    bar.update(len(block))
        except (http.client.IncompleteRead, OSError) as exc:
            raise DataError(f"{url}: transfer broke off after {part.stat().st_size} bytes "
                            f"({_reason(exc)}); run the download again to resume it") from exc
        # read(amt) returns b"" when the server closes early; only the length tells
        if length is not None and received < int(length):
            raise DataError(f"{url}: transfer broke off after {part.stat().st_size} bytes "
                            f"(the server announced {int(length) - received} more); run the "
                            "download again to resume it")


def _reason(exc: BaseException) -> str:
    return " ".join(str(getattr(exc, "reason", exc)).split()) or type(exc).__name__


def _bar(total: int | None, initial: int, name: str, progress: bool) -> Any:
    """A tqdm byte counter (disabled unless ``progress`` and stderr is a terminal)."""
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, unit="B", unit_scale=True, desc=name,
                disable=not (progress and sys.stderr.isatty()))


def _unpack(archive: Path, folder: Path) -> Path:
    """Extract a verified ``.tar.gz`` into ``folder`` through a temporary folder beside it
    (no member may leave it: tarfile's ``data`` filter); the archive is removed after.

    Returns:
        The first top-level entry extracted (``folder/aclImdb`` for IMDB).
    """
    staging = Path(tempfile.mkdtemp(prefix=".unpack-", dir=folder))
    try:
        try:
            with tarfile.open(archive, "r:gz") as tar:
                tar.extractall(staging, filter="data")
        except (tarfile.TarError, OSError) as exc:
            raise DataError(f"{archive}: cannot unpack ({_reason(exc)}); nothing was kept"
                            ) from exc
        entries = sorted(staging.iterdir())
        clash = [e.name for e in entries if (folder / e.name).exists()]
        if clash:
            raise DataError(f"{folder / clash[0]} exists already; move it away to unpack "
                            f"{archive.name} again")
        for entry in entries:
            os.replace(entry, folder / entry.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        archive.unlink(missing_ok=True)
    if not entries:
        raise DataError(f"{archive}: the archive is empty")
    return folder / entries[0].name
