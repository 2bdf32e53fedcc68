"""A deterministic word tokeniser, a train-only vocabulary and fixed-length id sequences.

Written by hand on purpose: Keras' ``TextVectorization`` would pull TensorFlow into the
framework-neutral core, and its vocabulary order is not specified for tied counts. Here:

* tokenise: lowercase, replace ``<br />`` (and ``<br>``/``<br/>``) by a space, then take the
  words matched by :data:`TOKEN_PATTERN` (letters/digits, with inner apostrophes: ``don't``).
* vocabulary: built on the TRAIN texts only; the ``vocab_size - 2`` most frequent words, ties
  broken alphabetically, get ids 2, 3, ...; id 0 is padding and id 1 every unknown word.
* sequences: the first ``max_length`` tokens are kept; shorter ones are padded with 0 at the end.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

from dpcore.errors import DataError

PAD_ID = 0
UNKNOWN_ID = 1
TOKEN_PATTERN = re.compile(r"[a-z0-9]+(?:'[a-z0-9]+)*")
_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)


def tokenize(text: str) -> list[str]:
    """Lowercased words of ``text`` with HTML line breaks removed."""
    return TOKEN_PATTERN.findall(_BREAK.sub(" ", text).lower())


def build_vocabulary(token_lists: Iterable[Sequence[str]], vocab_size: int) -> dict[str, int]:
    """Map the ``vocab_size - 2`` most frequent words to ids 2.. (ties: alphabetical order).

    Raises:
        DataError: if ``vocab_size`` < 3 (two ids are reserved).
    """
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 3:
        raise DataError(f"vocab_size={vocab_size!r} is out of range; valid: an integer >= 3")
    counts: Counter[str] = Counter()
    for tokens in token_lists:
        counts.update(tokens)
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[: vocab_size - 2]
    return {word: i + 2 for i, (word, _) in enumerate(ranked)}


def encode(
    token_lists: Sequence[Sequence[str]], vocabulary: dict[str, int], max_length: int
) -> np.ndarray:
    """``int32`` ids of shape [N, max_length]: first ``max_length`` tokens, 0-padded at the end.

    Raises:
        DataError: if ``max_length`` < 1.
    """
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1:
        raise DataError(f"max_length={max_length!r} is out of range; valid: an integer >= 1")
    out = np.full((len(token_lists), max_length), PAD_ID, dtype=np.int32)
    for row, tokens in enumerate(token_lists):
        ids = [vocabulary.get(tok, UNKNOWN_ID) for tok in tokens[:max_length]]
        out[row, : len(ids)] = ids
    return out
