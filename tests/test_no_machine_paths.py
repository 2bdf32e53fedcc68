"""No committed file names a folder of one machine (reports, records and docs write
data locations relative to the data root, e.g. ``$DPCOMPARE_DATA_DIR/mnist``)."""

from __future__ import annotations

import gzip
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: An absolute folder under a root that holds one machine's users or work: ``/work/...``,
#: ``/home/...``, ``/root/...``, ``/Users/...``, ``/tmp/...``, ``/mnt/...``, ``/opt/...``, or a
#: Windows drive. A relative ``../shared`` or ``$DPCOMPARE_DATA_DIR/...`` does not match.
MACHINE_FOLDER = re.compile(
    r"(?:^|[^.\w~$/])/(?:work|home|root|Users|tmp|mnt|opt)/[\w.]|\b[A-Z]:\\\\?\w"
)

#: Lines that name such a folder on purpose: a test input of the function that shortens one,
#: and this file's own examples of the pattern (the empty snippet: every line of the file).
ALLOWED = {("tests/compare/test_records.py", '"/home/me/elsewhere/imdb-full"'),
           ("tests/test_no_machine_paths.py", "")}


def _committed_files() -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the committed files cannot be listed")
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True,
                            capture_output=True).stdout
    return [name for name in listed.decode().split("\0") if name]


def _text(path: Path) -> str | None:
    raw = path.read_bytes()
    if path.suffix == ".gz":
        raw = gzip.decompress(raw)
    if b"\0" in raw[:8192]:
        return None  # binary (PNG, npz)
    return raw.decode("utf-8", errors="replace")


def _offending_lines(name: str, text: str) -> list[str]:
    return [f"{name}:{number}: {line.strip()[:120]}"
            for number, line in enumerate(text.splitlines(), start=1)
            if MACHINE_FOLDER.search(line)
            and not any(name == allowed_file and snippet in line
                        for allowed_file, snippet in ALLOWED)]


def test_the_pattern_finds_machine_folders_and_spares_relative_ones() -> None:
    for named in ("see /work/main/reports", "data in /home/ana/data", "C:\\Users\\ana",
                  "--out /tmp/run", '"/root/.cache"'):
        assert MACHINE_FOLDER.search(named), named
    for relative in ("../shared/data/mnist", "$DPCOMPARE_DATA_DIR/mnist", "~/.dpcompare/data",
                     "https://example.org/home/page", "runs/tmp/x", "a/b /c"):
        assert not MACHINE_FOLDER.search(relative), relative


def test_no_committed_file_names_a_folder_of_one_machine() -> None:
    offending: list[str] = []
    for name in _committed_files():
        path = ROOT / name
        if not path.is_file():
            continue
        text = _text(path)
        if text is not None:
            offending += _offending_lines(name, text)
    assert not offending, "machine folders in committed files:\n" + "\n".join(offending)
