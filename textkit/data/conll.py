"""Token classification data (NER in CoNLL columns): reading, labels aligned to sub-words, and
entity-level precision / recall / F1 as conlleval and ``seqeval``'s default mode count them.
Jax-free.

A CoNLL file has one token per line, its columns separated by whitespace (the token first, the
tag in ``tag_column``, the last by default), and a blank line between sentences; ``-DOCSTART-``
lines are skipped. Tags are IOB1, IOB2 (BIO) or IOBES with a type after the first ``-``
(``B-creative-work`` is type ``creative-work``). Every token line has the same number of
columns: a line with more or fewer, a tag outside these schemes (``I-`` without a type, ``X-PER``)
or bytes that are not UTF-8 are refused naming the file and line.

Entities are read as conlleval reads them: a chunk ends before a ``B`` / ``S`` / ``O``, after an
``E`` / ``S``, or where the type changes; an ``I`` after ``O`` or after another type starts a
chunk. A predicted entity counts when its type, first and last token equal a gold entity's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from textkit.data.datasets import read_text
from textkit.errors import DataFileError

__all__ = [
    "IGNORE_LABEL", "ConllError", "TaggedSentence", "align_labels", "entities", "entity_scores",
    "read_conll", "word_labels",
]

PREFIXES = ("B", "I", "E", "S")
"""The tag prefixes of IOB1, IOB2 and IOBES; every tag but ``O`` is ``<prefix>-<type>``."""

IGNORE_LABEL = -100
"""The label of sub-words that are not a word's first and of special tokens (no loss)."""


class ConllError(DataFileError):
    """A CoNLL file that does not follow the format (named: file and line)."""


class TaggedSentence(NamedTuple):
    """One sentence: its ``tokens`` and their ``tags`` (strings, as in the file)."""

    tokens: list[str]
    tags: list[str]


def _check_tag(path: Path, number: int, tag: str) -> None:
    prefix, dash, kind = tag.partition("-")
    if tag != "O" and not (prefix in PREFIXES and dash and kind):
        raise ConllError(f"{path}:{number}: tag {tag!r} is not O or one of "
                         f"{'/'.join(p + '-' for p in PREFIXES)} followed by an entity type "
                         "(the IOB1, IOB2 and IOBES schemes)")


def read_conll(path: str | Path, tag_column: int = -1) -> list[TaggedSentence]:
    """The sentences of a CoNLL file (UTF-8). Raises ``ConllError`` naming the file and line of
    a line without the tag column, a line whose column count differs from the first token
    line's, a tag outside the schemes (module docstring) or bytes that are not UTF-8, and for
    a file without sentences."""
    path = Path(path)
    sentences: list[TaggedSentence] = []
    tokens: list[str] = []
    tags: list[str] = []
    width: tuple[int, int] | None = None          # (columns, line) of the first token line
    try:
        lines = read_text(path, error=ConllError).split("\n")
    except OSError as err:
        raise ConllError(f"{path}: cannot be read ({err})") from err
    for number, line in enumerate(lines + [""], start=1):
        columns = line.split()
        if not columns or columns[0] == "-DOCSTART-":
            if tokens:
                sentences.append(TaggedSentence(tokens, tags))
                tokens, tags = [], []
            continue
        if len(columns) < 2 or not -len(columns) <= tag_column < len(columns) or (
                tag_column in (0, -len(columns))):
            raise ConllError(f"{path}:{number}: expected a token and a tag (column "
                             f"{tag_column}), got {line!r}")
        width = width or (len(columns), number)
        if len(columns) != width[0]:
            raise ConllError(f"{path}:{number}: {len(columns)} columns, expected {width[0]} "
                             f"as on line {width[1]} (every token line has the same columns, "
                             f"whitespace separated), got {line!r}")
        _check_tag(path, number, columns[tag_column])
        tokens.append(columns[0])
        tags.append(columns[tag_column])
    if not sentences:
        raise ConllError(f"{path}: holds no sentence")
    return sentences


# --------------------------------------------------------------------------------- entities
def _split(tag: str) -> tuple[str, str]:
    if tag == "O" or tag == "":
        return "O", ""
    prefix, _, kind = tag.partition("-")
    return prefix, kind


def entities(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """``(type, first, last)`` token spans of the entities of one sentence's tags."""
    found: list[tuple[str, int, int]] = []
    start, previous, previous_type = None, "O", ""
    for i, tag in enumerate([*tags, "O"]):
        prefix, kind = _split(tag)
        ends = previous in ("E", "S") or (previous in ("B", "I") and prefix in ("B", "S", "O")) \
            or (previous != "O" and kind != previous_type)
        if start is not None and ends:
            found.append((previous_type, start, i - 1))
            start = None
        begins = prefix in ("B", "S") or (prefix in ("I", "E") and (
            previous in ("E", "S", "O") or kind != previous_type))
        if begins:
            start = i
        previous, previous_type = prefix, kind
    return found


def entity_scores(gold: Iterable[Sequence[str]],
                  predicted: Iterable[Sequence[str]]) -> dict[str, float]:
    """Micro-averaged entity ``precision`` / ``recall`` / ``f1`` (in [0, 1]) over sentences,
    with the counts ``gold_entities``, ``predicted_entities`` and ``correct_entities``."""
    n_gold = n_pred = n_correct = 0
    for row, (gold_tags, pred_tags) in enumerate(zip(gold, predicted, strict=True)):
        if len(gold_tags) != len(pred_tags):
            raise ValueError(f"sentence {row}: {len(gold_tags)} gold tags but "
                             f"{len(pred_tags)} predicted")
        gold_set, pred_set = set(entities(gold_tags)), set(entities(pred_tags))
        n_gold += len(gold_set)
        n_pred += len(pred_set)
        n_correct += len(gold_set & pred_set)
    precision = n_correct / n_pred if n_pred else 0.0
    recall = n_correct / n_gold if n_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1,
            "gold_entities": float(n_gold), "predicted_entities": float(n_pred),
            "correct_entities": float(n_correct)}


# ------------------------------------------------------------------------ sub-word labels
def align_labels(word_ids: Sequence[int | None], labels: Sequence[int]) -> np.ndarray:
    """int32 [T] token labels: each word's label at its first sub-word, ``IGNORE_LABEL`` at its
    other sub-words and at special tokens (``word_ids[t]`` None). ``word_ids`` are a tokenizer
    encoding's (``tokenizers.Encoding.word_ids`` of pre-tokenized words)."""
    out = np.full(len(word_ids), IGNORE_LABEL, np.int32)
    previous = None
    for t, word in enumerate(word_ids):
        if word is not None and word != previous:
            out[t] = labels[word]
        previous = word
    return out


def word_labels(word_ids: Sequence[int | None], token_values: np.ndarray,
                num_words: int, fill: int = 0) -> np.ndarray:
    """[num_words, ...] the values at each word's first sub-word (``token_values`` [T, ...]);
    words cut off by truncation get ``fill``."""
    token_values = np.asarray(token_values)
    out = np.full((num_words, *token_values.shape[1:]), fill, token_values.dtype)
    seen: set[int] = set()
    for t, word in enumerate(word_ids):
        if word is not None and word not in seen:
            out[word] = token_values[t]
            seen.add(word)
    return out
