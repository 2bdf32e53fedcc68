"""``imdb``: IMDB reviews as word ids, from JSONL(.gz) files or the ``aclImdb`` folders.

Sources, in the located folder:

* ``*train*.jsonl.gz`` and ``*test*.jsonl.gz`` (plain ``.jsonl`` also read): one JSON object
  per line with ``text`` (str) and ``label`` (0 = negative, 1 = positive);
* ``aclImdb/{train,test}/{neg,pos}/*.txt`` (or the folder itself being ``aclImdb``); files are
  read in sorted order, negatives first. ``unsup/`` is ignored.

Text -> ids with :mod:`dpcore.data.text`: vocabulary from the TRAIN split only (``vocab_size``
ids including 0 = padding and 1 = unknown; default 10,000), sequences cut/padded to
``max_length`` (default 256). ``Dataset.x_*`` are ``int32`` [N, max_length].
"""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

import numpy as np

from dpcore.data.images import one_line
from dpcore.data.loaders.base import Decoded, DecodeRequest
from dpcore.data.text import build_vocabulary, encode, tokenize
from dpcore.datasets import DatasetInfo
from dpcore.errors import DataError

_SPLITS = ("train", "test")
_CLASS_DIRS = ("neg", "pos")


def _jsonl_files(folder: Path) -> dict[str, Path] | None:
    found: dict[str, Path] = {}
    for split in _SPLITS:
        matches = sorted({*folder.glob(f"*{split}*.jsonl.gz"), *folder.glob(f"*{split}*.jsonl")})
        if len(matches) > 1:
            raise DataError(
                f"{folder}: several {split} files ({', '.join(p.name for p in matches)}); "
                "keep one per split"
            )
        if matches:
            found[split] = matches[0]
    if not found:
        return None
    if len(found) < 2:
        missing = next(s for s in _SPLITS if s not in found)
        raise DataError(f"{folder}: has no *{missing}*.jsonl.gz file; need one train and one test")
    return found


def _acl_root(folder: Path) -> Path | None:
    for candidate in (folder / "aclImdb", folder):
        if (candidate / "train" / "pos").is_dir() or (candidate / "train" / "neg").is_dir():
            return candidate
    return None


def _locate(path: Path) -> dict[str, Path] | Path:
    if not path.is_dir():
        raise DataError(f"{path}: expected a folder with the IMDB JSONL files or aclImdb/")
    jsonl = _jsonl_files(path)
    if jsonl is not None:
        return jsonl
    acl = _acl_root(path)
    if acl is None:
        raise DataError(
            f"{path}: found neither *train*.jsonl.gz + *test*.jsonl.gz nor "
            "aclImdb/{train,test}/{pos,neg}/*.txt"
        )
    return acl


def _acl_files(acl: Path, split: str) -> list[tuple[Path, int]]:
    out = []
    for label, name in enumerate(_CLASS_DIRS):
        folder = acl / split / name
        if not folder.is_dir():
            raise DataError(f"{folder}: folder missing; aclImdb needs {split}/neg and {split}/pos")
        out += [(p, label) for p in sorted(folder.glob("*.txt"))]
    return out


def _read_jsonl(path: Path) -> tuple[list[str], list[int]]:
    texts, labels = [], []
    try:
        with path.open("rb") as raw:
            gzipped = raw.read(2) == b"\x1f\x8b"
        with (gzip.open if gzipped else open)(path, "rt", encoding="utf-8") as fh:
            for number, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DataError(f"{path} line {number}: not valid JSON ({exc.msg})") from exc
                if not isinstance(row, dict) or not isinstance(row.get("text"), str) or \
                        row.get("label") not in (0, 1) or isinstance(row.get("label"), bool):
                    raise DataError(
                        f"{path} line {number}: need an object with 'text' (string) and "
                        "'label' (0 or 1)"
                    )
                texts.append(row["text"])
                labels.append(int(row["label"]))
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: corrupt or truncated file ({one_line(exc)})") from exc
    return texts, labels


def _read_texts(located: dict[str, Path] | Path) -> dict[str, tuple[list[str], list[int]]]:
    out = {}
    for split in _SPLITS:
        if isinstance(located, dict):
            texts, labels = _read_jsonl(located[split])
            where = located[split]
        else:
            files = _acl_files(located, split)
            try:
                texts = [p.read_text(encoding="utf-8") for p, _ in files]
            except (OSError, UnicodeDecodeError) as exc:
                raise DataError(f"{located / split}: unreadable review ({one_line(exc)})") from exc
            labels = [label for _, label in files]
            where = located / split
        if not texts:
            raise DataError(f"{where}: the {split} split is empty; need at least one review")
        out[split] = (texts, labels)
    return out


def source_files(path: Path | None, info: DatasetInfo) -> list[Path]:
    assert path is not None
    located = _locate(path)
    if isinstance(located, dict):
        return [located[s] for s in _SPLITS]
    return [p for s in _SPLITS for p, _ in _acl_files(located, s)]


def decode(path: Path | None, request: DecodeRequest) -> Decoded:
    assert path is not None
    vocab_size = request.options["vocab_size"]
    max_length = request.options["max_length"]
    texts = _read_texts(_locate(path))
    tokens = {split: [tokenize(t) for t in texts[split][0]] for split in _SPLITS}
    vocabulary = build_vocabulary(tokens["train"], vocab_size)
    x = {split: encode(tokens[split], vocabulary, max_length) for split in _SPLITS}
    y = {split: np.array(texts[split][1], dtype=np.int64) for split in _SPLITS}
    return Decoded(
        x_train=x["train"], y_train=y["train"], x_test=x["test"], y_test=y["test"],
        vocabulary_size=len(vocabulary) + 2,
        extra={
            "tokeniser": "lowercase, <br /> removed, words [a-z0-9]+ with inner apostrophes",
            "vocabulary": f"{len(vocabulary)} most frequent train words (ties alphabetical) "
                          "-> ids 2..; 0 = padding, 1 = unknown",
            "max_length": f"{max_length} (first tokens kept, padded with 0 at the end)",
        },
    )


def split_sizes(path: Path, info: DatasetInfo) -> dict[str, int]:
    located = _locate(path)
    if isinstance(located, dict):
        return {s: len(_read_jsonl(located[s])[1]) for s in _SPLITS}
    return {s: len(_acl_files(located, s)) for s in _SPLITS}
