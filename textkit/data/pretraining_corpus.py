"""Raw text -> documents -> token ids -> packed sequences in a ``TokenStore``, for encoder
pretraining (masked LM, ELECTRA).

**Documents** (``stream_documents``) are read line by line, never a whole file at once:
``layout`` "lines" (every non-empty line is a document of one sentence), "paragraphs"
(documents separated by blank lines, one sentence per line: BERT's pretraining format) or
"wikitext" (a `` = Title = `` heading starts a document; every non-empty line is a sentence).

**Packing** (``PackingConfig``): each document's sentences are tokenized (a ``tokenizers``
tokenizer, no special tokens; the tokenizer's word ids mark every word's first token for
whole-word masking) and packed, in order, into sequences of at most ``max_length`` tokens
special tokens included (RoBERTa's "full sentences"): a sentence that does not fit the current
sequence starts the next one; one longer than a whole sequence is cut. Sequences never cross a
document boundary unless ``cross_documents`` (then a new document is a new piece of the
current sequence, closed by its own separator). Documents with fewer than two tokens are
skipped and counted. With ``pairs`` "nsp" or "sop" every sequence is a sentence pair built as
BERT's ``create_pretraining_data.py`` builds it: a chunk of sentences filling the sequence is
split at a random sentence boundary into A and B (a one-sentence chunk at a random token);
NSP replaces B, half of the time (always for a one-sentence chunk), by the text from a random
sentence on of a random recent document (one of the last ``RECENT_DOCUMENTS``; the corpus is
streamed) with label 1, the unused sentences going back to the document; SOP swaps A and B half
of the time (label 1, ALBERT's sentence order). A pair longer than the sequence loses tokens
from its longer side, at the front or the back at random.

**Storage**: ``build_pretraining_corpus`` streams the packed sequences into a ``TokenStore``
(one sample per sequence; fields ``ids``, ``word_starts`` (0 / 1), ``pieces`` (the lengths of
its pieces: one per document part, or A and B) and, with pairs, ``label``), built once and
keyed, plus ``corpus.json`` with the counts (``STATS``), so a corpus of any size streams from
disk. ``PretrainingBatchify`` turns stored sequences into fixed-shape numpy batches:
``[CLS] piece [SEP] piece [SEP] ... [PAD]...`` (token type 1 for B and its separator).
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from textkit._io import write_json_atomic
from textkit.batchify.shape import BatchShape
from textkit.data.token_store import TokenStore, build_token_store
from textkit.errors import ConfigError

__all__ = ["LAYOUTS", "PAIRS", "RECENT_DOCUMENTS", "STATS", "PackedCorpus", "PackingConfig",
           "PretrainingBatchify", "SpecialIds", "TextFiles", "build_pretraining_corpus",
           "pack_documents", "stream_documents"]

LAYOUTS = ("lines", "paragraphs", "wikitext")
PAIRS = ("none", "nsp", "sop")
RECENT_DOCUMENTS = 256
"""Documents NSP draws its random second segments from (the last ones streamed)."""
STATS = ("documents", "skipped_documents", "sentences", "tokens", "sequences",
         "full_sequences")
"""The counts of ``corpus.json``: documents kept and skipped (under two tokens), their
sentences and tokens, the sequences packed and those filled to ``max_length``."""
_HEADING = re.compile(r"^ = [^=].* = $")
_CHUNK_SENTENCES = 4096

Sentence = tuple[np.ndarray, np.ndarray]
"""One tokenized sentence: ids int32[n] and word starts uint8[n]."""


# --------------------------------------------------------------------------------- documents
def stream_documents(paths: Sequence[str | Path], layout: str) -> Iterator[list[str]]:
    """The documents of the text files ``paths``, in order, each a list of its non-empty
    lines (stripped), read line by line (module docstring for ``layout``)."""
    if layout not in LAYOUTS:
        raise ConfigError(f"document layout {layout!r}: expected one of {LAYOUTS}")
    for path in paths:
        yield from _file_documents(Path(path), layout)


def _file_documents(path: Path, layout: str) -> Iterator[list[str]]:
    document: list[str] = []
    try:
        with open(path, "rb") as file:
            for number, raw in enumerate(file, 1):
                try:
                    line = raw.decode("utf-8").rstrip("\r\n")
                except UnicodeDecodeError as err:
                    raise ConfigError(f"{path}:{number}: not UTF-8 text ({err.reason} at "
                                      f"byte {err.start} of the line)") from None
                text = line.strip()
                if layout == "lines":
                    if text:
                        yield [text]
                    continue
                boundary = not text if layout == "paragraphs" else bool(_HEADING.match(line))
                if boundary and document:
                    yield document
                    document = []
                if text:
                    document.append(text)
    except OSError as err:
        raise ConfigError(f"{path}: cannot read it ({err.strerror or err})") from None
    if document:
        yield document


@dataclasses.dataclass(frozen=True)
class TextFiles:
    """One split of a raw-text corpus: its ``name`` ("train", "valid"), files and layout."""

    name: str
    paths: tuple[str, ...]
    layout: str

    def documents(self) -> Iterator[list[str]]:
        """The documents of the files, streamed (``stream_documents``)."""
        return stream_documents(self.paths, self.layout)

    def lines(self) -> Iterator[str]:
        """Every sentence of every document, streamed (e.g. to train a tokenizer)."""
        for document in self.documents():
            yield from document


# ----------------------------------------------------------------------------------- packing
@dataclasses.dataclass(frozen=True)
class PackingConfig:
    """How documents become sequences (module docstring): ``max_length`` tokens per sequence
    special tokens included, ``pairs`` ("none", "nsp", "sop"), ``cross_documents`` (single
    segments only) and the ``seed`` of the pair choices."""

    max_length: int
    pairs: str = "none"
    cross_documents: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        if self.pairs not in PAIRS:
            raise ConfigError(f"--pairs {self.pairs!r}: expected one of {PAIRS}")
        if self.max_length < (5 if self.pairs != "none" else 3):
            raise ConfigError(f"--max-length {self.max_length} leaves no room for text beside "
                              f"the special tokens")
        if self.cross_documents and self.pairs != "none":
            raise ConfigError("--cross-documents packs single segments; sentence pairs "
                              "(--pairs nsp / sop) stay within their documents")


def _join(sentences: Sequence[Sentence]) -> Sentence:
    return (np.concatenate([ids for ids, _ in sentences]),
            np.concatenate([starts for _, starts in sentences]))


class _Packer:
    """Packs tokenized documents into sequences ``(ids, word_starts, pieces[, label])``."""

    def __init__(self, config: PackingConfig):
        self.config = config
        self.rng = np.random.default_rng(config.seed)
        self.recent: deque[list[Sentence]] = deque(maxlen=RECENT_DOCUMENTS)
        self._reset()

    def _reset(self) -> None:
        self.parts: list[Sentence] = []
        self.pieces: list[int] = []

    def _room(self) -> int:
        """Text tokens the current sequence still takes (CLS and a SEP per piece apart)."""
        return self.config.max_length - 1 - max(len(self.pieces), 1) - sum(self.pieces)

    def _emit(self) -> Iterator[tuple[np.ndarray, ...]]:
        if sum(self.pieces):
            ids, starts = _join(self.parts)
            yield ids, starts, np.array([n for n in self.pieces if n], np.int32)
        self._reset()

    def document(self, sentences: list[Sentence]) -> Iterator[tuple[np.ndarray, ...]]:
        """The sequences completed by adding one document's sentences."""
        if self.config.pairs != "none":
            yield from self._pairs(sentences)
            self.recent.append(sentences)
            return
        if self.pieces:                       # packing across documents: a new piece
            if self._room() > 1:
                self.pieces.append(0)
            else:
                yield from self._emit()
        for ids, starts in sentences:
            yield from self._add(ids, starts)
        if not self.config.cross_documents:
            yield from self._emit()

    def finish(self) -> Iterator[tuple[np.ndarray, ...]]:
        """The last, partly filled sequence."""
        yield from self._emit()

    def _add(self, ids: np.ndarray, starts: np.ndarray) -> Iterator[tuple[np.ndarray, ...]]:
        whole = self.config.max_length - 2
        while len(ids):
            if not self.pieces:
                self.pieces.append(0)
            room = self._room()
            if len(ids) > room and sum(self.pieces) and len(ids) <= whole:
                yield from self._emit()       # the sentence fits the next sequence whole
                continue
            take = min(room, len(ids))
            self.parts.append((ids[:take], starts[:take]))
            self.pieces[-1] += take
            ids, starts = ids[take:], starts[take:]
            if len(ids):
                yield from self._emit()

    def _pairs(self, sentences: list[Sentence]) -> Iterator[tuple[np.ndarray, ...]]:
        budget = self.config.max_length - 3
        chunk: list[Sentence] = []
        length, i = 0, 0
        while i < len(sentences):
            chunk.append(sentences[i])
            length += len(sentences[i][0])
            if i == len(sentences) - 1 or length >= budget:
                pair = self._pair(chunk, budget)
                if pair is not None:
                    first, second, label, unused = pair
                    i -= unused
                    yield self._truncated(first, second, label, budget)
                chunk, length = [], 0
            i += 1

    def _pair(self, chunk: list[Sentence],
              budget: int) -> tuple[Sentence, Sentence, int, int] | None:
        """``(A, B, label, sentences given back)`` of a chunk (None: too short to split)."""
        rng = self.rng
        cut = int(rng.integers(1, len(chunk))) if len(chunk) > 1 else 1
        first = _join(chunk[:cut])
        if self.config.pairs == "nsp" and self.recent and (len(chunk) == 1 or rng.random() < .5):
            other = self.recent[int(rng.integers(len(self.recent)))]
            start = int(rng.integers(len(other)))
            lengths = np.cumsum([len(ids) for ids, _ in other[start:]])
            stop = start + int(np.searchsorted(lengths, budget - len(first[0]))) + 1
            return first, _join(other[start:stop]), 1, len(chunk) - cut
        if len(chunk) == 1:
            ids, starts = first
            if len(ids) < 2:
                return None
            at = int(rng.integers(1, len(ids)))
            first, second = (ids[:at], starts[:at]), (ids[at:], starts[at:])
        else:
            second = _join(chunk[cut:])
        if self.config.pairs == "sop" and rng.random() < 0.5:
            return second, first, 1, 0
        return first, second, 0, 0

    def _truncated(self, first: Sentence, second: Sentence, label: int,
                   budget: int) -> tuple[np.ndarray, ...]:
        """The pair as a sample, its longer side cut (front or back at random) to fit."""
        kept = [len(first[0]), len(second[0])]
        while sum(kept) > budget:
            kept[0 if kept[0] > kept[1] else 1] -= 1
        sides = []
        for (ids, starts), n in zip((first, second), kept):
            front = int(self.rng.binomial(len(ids) - n, 0.5))
            sides.append((ids[front:front + n], starts[front:front + n]))
        ids, starts = _join(sides)
        return ids, starts, np.array(kept, np.int32), np.array([label], np.int32)


def _encode(tokenizer: Any, texts: list[str]) -> list[Sentence]:
    """Ids and word starts of each text (``tokenizers.Tokenizer.encode_batch``, no special
    tokens; a token starts a word when its word id differs from the previous token's)."""
    sentences = []
    for encoding in tokenizer.encode_batch(texts, add_special_tokens=False):
        ids = np.asarray(encoding.ids, np.int32)
        words = np.array([-1 if w is None else w for w in encoding.word_ids], np.int64)
        starts = np.ones(len(ids), np.uint8)
        starts[1:] = words[1:] != words[:-1]
        sentences.append((ids, starts))
    return sentences


def _batches(documents: Iterable[list[str]], size: int) -> Iterator[list[list[str]]]:
    """Documents grouped into batches of about ``size`` sentences."""
    batch: list[list[str]] = []
    count = 0
    for document in documents:
        batch.append(document)
        count += len(document)
        if count >= size:
            yield batch
            batch, count = [], 0
    if batch:
        yield batch


def pack_documents(documents: Iterable[list[str]], tokenizer: Any, config: PackingConfig,
                   stats: dict[str, int]) -> Iterator[tuple[np.ndarray, ...]]:
    """The packed sequences ``(ids, word_starts, pieces[, label])`` of ``documents``
    (tokenized in batches by ``tokenizer``, a ``tokenizers.Tokenizer``), counting into
    ``stats`` (the keys of ``STATS``) as they go."""
    packer = _Packer(config)

    def counted(samples: Iterable[tuple[np.ndarray, ...]]) -> Iterator[tuple[np.ndarray, ...]]:
        for sample in samples:
            stats["sequences"] += 1
            specials = 1 + len(sample[2])
            stats["full_sequences"] += int(len(sample[0]) + specials == config.max_length)
            yield sample

    for batch in _batches(documents, _CHUNK_SENTENCES):
        encoded = iter(_encode(tokenizer, [s for document in batch for s in document]))
        for document in batch:
            sentences = [s for s in (next(encoded) for _ in document) if len(s[0])]
            tokens = sum(len(ids) for ids, _ in sentences)
            if tokens < 2:
                stats["skipped_documents"] += 1
                continue
            stats["documents"] += 1
            stats["sentences"] += len(sentences)
            stats["tokens"] += tokens
            yield from counted(packer.document(sentences))
    yield from counted(packer.finish())


# ----------------------------------------------------------------------------------- storage
class _Encoded:
    """The "tokenizer" of a store field whose samples arrive encoded: passes them through;
    ``len`` bounds the values (it picks the store's dtype)."""

    def __init__(self, size: int):
        self.size = size

    def __len__(self) -> int:
        return self.size

    def encode(self, items: list[Any]) -> list[Any]:
        return items


@dataclasses.dataclass
class PackedCorpus:
    """Packed sequences on disk: the ``store`` (one sample per sequence) and its ``stats``."""

    store: TokenStore
    stats: dict[str, int]

    def __len__(self) -> int:
        return len(self.store)


def build_pretraining_corpus(directory: str | Path,
                             documents: Callable[[], Iterable[list[str]]], tokenizer: Any,
                             config: PackingConfig, *, vocab_size: int, key: str,
                             desc: str = "packing") -> PackedCorpus:
    """The packed sequences of ``documents()`` in ``directory`` (module docstring): opened
    when a store of the same ``key`` is there, else built (staged, then renamed into place)
    with ``corpus.json`` (the counts of ``STATS``)."""
    directory = Path(directory)
    counts = directory / "corpus.json"
    if (directory / "meta.json").is_file() and not counts.is_file():
        shutil.rmtree(directory)             # a build stopped before its counts were written
    stats = dict.fromkeys(STATS, 0)
    fields = ("ids", "word_starts", "pieces") + (("label",) if config.pairs != "none" else ())
    sizes = (vocab_size, 2, config.max_length, 2)[:len(fields)]
    store = build_token_store(
        directory, lambda: pack_documents(documents(), tokenizer, config, stats),
        [_Encoded(n) for n in sizes], key=key, fields=fields, desc=desc)
    if not counts.is_file():
        write_json_atomic(counts, stats)
    return PackedCorpus(store, json.loads(counts.read_text()))


# ----------------------------------------------------------------------------------- batches
@dataclasses.dataclass(frozen=True)
class SpecialIds:
    """The token ids pretraining batches need: ``cls``, ``sep``, ``pad``, ``mask``, the ids
    ``never_masked`` (every special token) and ``vocab_size``."""

    cls: int
    sep: int
    pad: int
    mask: int
    never_masked: tuple[int, ...]
    vocab_size: int


class PretrainingBatchify:
    """Stored sequences -> one numpy batch of ``max_length`` columns (rows: the bucket's
    shape, dummy rows all padding): ``input_ids`` int32[B, T] (``[CLS] piece [SEP] ...``),
    ``attention_mask`` int32[B, T], ``token_type_ids`` int32[B, T] (``with_token_types``),
    ``word_starts`` bool[B, T] (special tokens and padding are words of their own, and so is
    each piece's first token) and, with ``pairs``, ``pair_labels`` int32[B] and
    ``pair_weights`` float32[B] (0 at dummy rows)."""

    def __init__(self, special: SpecialIds, max_length: int, *, with_token_types: bool,
                 pairs: bool):
        self.special, self.max_length = special, max_length
        self.with_token_types, self.pairs = with_token_types, pairs

    def __call__(self, samples: Sequence[tuple[np.ndarray, ...]],
                 shape: BatchShape | None = None) -> dict[str, np.ndarray]:
        rows = shape.rows if shape is not None else len(samples)
        s = self.special
        ids = np.full((rows, self.max_length), s.pad, np.int32)
        types = np.zeros((rows, self.max_length), np.int32)
        starts = np.ones((rows, self.max_length), bool)
        lengths = np.zeros(rows, np.int64)
        for row, sample in enumerate(samples):
            tokens, words, pieces = sample[0], sample[1], sample[2]
            ids[row, 0], position, offset = s.cls, 1, 0
            for k, n in enumerate(pieces.tolist()):
                ids[row, position:position + n] = tokens[offset:offset + n]
                starts[row, position + 1:position + n] = words[offset + 1:offset + n] != 0
                types[row, position:position + n + 1] = int(self.pairs and k == 1)
                ids[row, position + n] = s.sep
                position, offset = position + n + 1, offset + n
            lengths[row] = position
        batch = {"input_ids": ids, "attention_mask": (
            np.arange(self.max_length) < lengths[:, None]).astype(np.int32)}
        if self.with_token_types:
            batch["token_type_ids"] = types
        batch["word_starts"] = starts
        if self.pairs:
            labels = np.zeros(rows, np.int32)
            labels[:len(samples)] = [int(sample[3][0]) for sample in samples]
            batch["pair_labels"] = labels
            batch["pair_weights"] = (np.arange(rows) < len(samples)).astype(np.float32)
        return batch
