"""IMDB text loader, tokeniser and train-only vocabulary."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dpcore.config import DataSpec
from dpcore.data import load_dataset
from dpcore.data.text import build_vocabulary, encode, tokenize
from dpcore.errors import ConfigError, DataError
from tests.dpcore.data_writers import SHARED_DATA, isolate, needs_shared_data, write_jsonl_gz


@pytest.fixture(autouse=True)
def _cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate(monkeypatch, tmp_path)


TRAIN = [("Great film!<br /><br />Great CAST, don't miss.", 1), ("bad bad plot", 0),
         ("A great, great bore", 0)]
TEST = [("zebra great", 1), ("bad", 0)]


def test_tokenize_lowercases_and_strips_breaks() -> None:
    assert tokenize("Great film!<br /><br />Great CAST, don't miss.") == [
        "great", "film", "great", "cast", "don't", "miss"]
    assert tokenize("a<br/>b<BR>c 'quoted' 42") == ["a", "b", "c", "quoted", "42"]


def test_vocabulary_by_count_then_alphabet() -> None:
    vocab = build_vocabulary([["b", "a", "c", "a"], ["c", "d"]], vocab_size=5)
    assert vocab == {"a": 2, "c": 3, "b": 4}  # a=2, c=2 (alphabetical), then b/d tie -> b
    ids = encode([["a", "d", "b"], []], vocab, max_length=2)
    np.testing.assert_array_equal(ids, [[2, 1], [0, 0]])
    assert ids.dtype == np.int32
    with pytest.raises(DataError, match="vocab_size=2 is out of range"):
        build_vocabulary([], vocab_size=2)


def _expected_ids(vocab_size: int, max_length: int) -> tuple[np.ndarray, np.ndarray]:
    vocab = build_vocabulary([tokenize(t) for t, _ in TRAIN], vocab_size)
    return (encode([tokenize(t) for t, _ in TRAIN], vocab, max_length),
            encode([tokenize(t) for t, _ in TEST], vocab, max_length))


def test_jsonl_gz(tmp_path: Path) -> None:
    folder = tmp_path / "imdb"
    write_jsonl_gz(folder / "imdb_train_3.jsonl.gz",
                   [{"id": f"train/x/{i}_1", "rating": 1, "label": y, "text": t}
                    for i, (t, y) in enumerate(TRAIN)])
    write_jsonl_gz(folder / "imdb_test_2.jsonl.gz",
                   [{"id": f"test/x/{i}_1", "rating": 1, "label": y, "text": t}
                    for i, (t, y) in enumerate(TEST)])
    ds = load_dataset(DataSpec(name="imdb"), tmp_path, vocab_size=6, max_length=5)
    x_train, x_test = _expected_ids(6, 5)
    assert ds.task == "text" and ds.vocabulary_size == 6
    np.testing.assert_array_equal(ds.x_train, x_train)
    np.testing.assert_array_equal(ds.x_test, x_test)
    np.testing.assert_array_equal(ds.y_train, [1, 0, 0])
    # "great" is the most frequent train word -> id 2; "zebra" only in test -> unknown (1)
    np.testing.assert_array_equal(ds.x_test[0], [1, 2, 0, 0, 0])


def test_acl_imdb_folders_give_the_same_arrays(tmp_path: Path) -> None:
    acl = tmp_path / "imdb" / "aclImdb"
    for split, rows in (("train", TRAIN), ("test", TEST)):
        for d in ("neg", "pos"):
            (acl / split / d).mkdir(parents=True)
        for i, (text, y) in enumerate(rows):
            (acl / split / ("pos" if y else "neg") / f"{i}_7.txt").write_text(text)
    ds = load_dataset(DataSpec(name="imdb"), tmp_path, vocab_size=6, max_length=5)
    # folders are read negatives first, sorted by name: train order = rows 1, 2, 0
    x_train, x_test = _expected_ids(6, 5)
    np.testing.assert_array_equal(ds.x_train, x_train[[1, 2, 0]])
    np.testing.assert_array_equal(ds.y_train, [0, 0, 1])
    np.testing.assert_array_equal(ds.x_test, x_test[[1, 0]])


def test_bad_jsonl_line_named(tmp_path: Path) -> None:
    folder = tmp_path / "imdb"
    write_jsonl_gz(folder / "train.jsonl.gz", [{"text": "a", "label": 1}, {"text": "b"}])
    write_jsonl_gz(folder / "test.jsonl.gz", [{"text": "a", "label": 1}])
    with pytest.raises(DataError, match=r"train\.jsonl\.gz line 2: need an object with 'text'"):
        load_dataset(DataSpec(name="imdb"), tmp_path)


def test_image_options_rejected_for_text(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="do not apply to the text data set 'imdb'"):
        load_dataset(DataSpec(name="imdb", image_size=28), tmp_path)


@needs_shared_data
def test_shared_imdb_subset() -> None:
    assert SHARED_DATA is not None
    ds = load_dataset(DataSpec(name="imdb"), SHARED_DATA)
    assert ds.x_train.shape == (6000, 256) and ds.x_test.shape == (2000, 256)
    np.testing.assert_array_equal(np.bincount(ds.y_train), [3000, 3000])
    assert ds.vocabulary_size == 10000 and int(ds.x_train.max()) == 9999
