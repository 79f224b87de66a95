"""The training text of word vectors: one sentence per line, words as vocabulary ids.

A line is lowercased (unless told otherwise) and split on whitespace, as gensim's
``LineSentence`` splits it after the same lowercasing. The vocabulary keeps the words seen at
least ``min_count`` times, most frequent first (ties in order of first appearance); other words
are dropped from the id stream before windows are drawn, as gensim drops them.
"""

from __future__ import annotations

import collections
import itertools
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from textkit.errors import DataFileError

__all__ = ["Corpus", "build_corpus", "read_sentences"]


@dataclass(frozen=True)
class Corpus:
    """A tokenised training text.

    Attributes:
      words: the V vocabulary words, most frequent first.
      counts: int64 [V], each word's count in the text.
      ids: int32 [N], the vocabulary ids of the in-vocabulary tokens, in text order.
      sentences: int32 [N], the sentence (line) index of each of ``ids``.
      positions: int64 [N], each token's position among all the text's tokens (dropped ones
        included), for the learning-rate schedule.
      total_tokens: all tokens of the text, in the vocabulary or not.
    """

    words: list[str]
    counts: np.ndarray
    ids: np.ndarray
    sentences: np.ndarray
    positions: np.ndarray
    total_tokens: int


def read_sentences(path: str | os.PathLike, lowercase: bool = True) -> list[list[str]]:
    """The lines of a UTF-8 text file, each lowercased (``lowercase``) and split on
    whitespace; a line that cannot be decoded is a ``DataFileError`` naming it."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"--train-file {path}: no such file")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise DataFileError(f"{path}: line {line}: not valid UTF-8 ({err.reason}); expected "
                            "UTF-8 text, one sentence per line") from None
    if lowercase:
        text = text.lower()
    return [line.split() for line in text.splitlines()]


def build_corpus(sentences: list[list[str]], min_count: int, source: str = "the corpus"
                 ) -> Corpus:
    """The vocabulary (words seen ``min_count`` times or more) and the id stream.

    ``source`` names the text in errors: a text without words, or one where no word reaches
    ``min_count``, is a ``DataFileError``.
    """
    counter = collections.Counter(itertools.chain.from_iterable(sentences))
    total = sum(counter.values())
    if total == 0:
        raise DataFileError(f"{source}: holds no words (empty or only whitespace); expected "
                            "text, one sentence per line")
    kept = sorted((item for item in counter.items() if item[1] >= min_count),
                  key=lambda item: -item[1])
    if not kept:
        word, count = counter.most_common(1)[0]
        raise DataFileError(f"{source}: no word occurs min_count={min_count} times (the most "
                            f"frequent, {word!r}, occurs {count}); lower --min-count or use "
                            "more text")
    words = [word for word, _ in kept]
    index = {word: i for i, word in enumerate(words)}
    flat = itertools.chain.from_iterable(sentences)
    all_ids = np.fromiter(map(index.get, flat, itertools.repeat(-1)), dtype=np.int64,
                          count=total)
    lengths = np.fromiter(map(len, sentences), dtype=np.int64, count=len(sentences))
    all_sentences = np.repeat(np.arange(len(sentences), dtype=np.int32), lengths)
    found = np.flatnonzero(all_ids >= 0)
    return Corpus(words=words, counts=np.array([c for _, c in kept], dtype=np.int64),
                  ids=all_ids[found].astype(np.int32), sentences=all_sentences[found],
                  positions=found, total_tokens=total)
