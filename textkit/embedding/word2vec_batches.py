"""The numpy side of word-vector training: subsampling, windows, noise table, n-gram rows and
the fixed-shape batches the jitted update takes.

Semantics follow word2vec and gensim: a token of a word with count c is kept with probability
``min(1, (sqrt(c / t) + 1) * t / c)``, ``t = sample * (total count)``; each kept position
draws its own window ``w = window - b``, ``b`` uniform in ``0 .. window-1``, and its context is
the kept tokens of the same sentence at distance ``1 .. w``. Skip-gram predicts each context
word from the center word's input rows; CBOW predicts the center word from the mean of its
context's input rows. With fastText subwords a word's input rows are its own row and the rows
``V + fnv1a(ngram) % bucket`` of the character n-grams of ``<word>`` (``fasttext_bin``'s
hashing); its input vector is their mean.

A center becomes one segment of a batch: its input rows (``in_rows``, weight ``1 / count``
in the mean) and its positive output words (``out_words``). Batches are cut greedily so that
none holds more than ``centers`` segments, ``rows`` input rows or ``pairs`` positives, and
padded to those sizes with weight 0: every batch has the same shapes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from textkit.embedding.fasttext_bin import char_ngrams, fnv1a_int8
from textkit.embedding.word2vec_corpus import Corpus

__all__ = ["Batches", "EpochData", "Shapes", "build_batches", "center_data",
           "keep_probability", "noise_table", "noise_words", "subword_rows", "window_contexts"]


def keep_probability(counts: np.ndarray, sample: float) -> np.ndarray:
    """float64 [V]: the chance a token of each word survives subsampling (1 with sample 0)."""
    counts = np.asarray(counts, dtype=np.float64)
    if sample <= 0:
        return np.ones_like(counts)
    threshold = sample * counts.sum()
    return np.minimum(1.0, (np.sqrt(counts / threshold) + 1.0) * threshold / counts)


def noise_table(counts: np.ndarray, exponent: float, size: int = 1 << 22) -> np.ndarray:
    """int32 [size]: word ids, word ``w`` filling a share ``counts[w] ** exponent / Z`` of the
    entries (rounded on the cumulative sum), so a uniform entry is a draw of a noise word."""
    weights = np.asarray(counts, dtype=np.float64) ** exponent
    bounds = np.round(np.cumsum(weights) / weights.sum() * size).astype(np.int64)
    repeats = np.diff(bounds, prepend=0)
    return np.repeat(np.arange(len(weights), dtype=np.int32), repeats)


def noise_words(table: np.ndarray, rng: np.random.Generator, shape: tuple[int, ...]
                ) -> np.ndarray:
    """int32 ``shape``: noise words, each a uniform entry of ``table`` (``noise_table``)."""
    return table[rng.integers(0, table.shape[0], size=shape)]


def subword_rows(words: list[str], min_n: int, max_n: int, bucket: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """``(offsets, rows)`` of each word's input rows: int64 [V + 1] and int32 [R]; word ``i``
    owns ``rows[offsets[i]:offsets[i + 1]]``, its own row ``i`` first, then ``V + hash % bucket``
    for each character n-gram of ``<word>`` (fastText's order)."""
    vocab = len(words)
    grams = [char_ngrams(w, min_n, max_n) for w in words]
    counts = np.fromiter(map(len, grams), dtype=np.int64, count=vocab) + 1
    offsets = np.concatenate(([0], np.cumsum(counts)))
    rows = np.empty(offsets[-1], dtype=np.int64)
    rows[offsets[:-1]] = np.arange(vocab)
    flat = [g for word_grams in grams for g in word_grams]
    if flat:
        ngram_slots = np.ones(offsets[-1], dtype=bool)
        ngram_slots[offsets[:-1]] = False
        rows[ngram_slots] = vocab + (fnv1a_int8(flat) % np.uint32(bucket)).astype(np.int64)
    return offsets, rows.astype(np.int32)


def window_contexts(sentences: np.ndarray, reduced: np.ndarray, window: int
                    ) -> tuple[np.ndarray, np.ndarray]:
    """``(centers, contexts)``: int64 [P] positions of each (center, context) pair, row-major
    (center order, then offsets ``-window .. -1, 1 .. window``).

    ``sentences`` int32 [n] gives each kept token's sentence; ``reduced`` int64 [n] each
    position's window ``1 .. window``.
    """
    n = sentences.shape[0]
    offsets = np.concatenate((np.arange(-window, 0), np.arange(1, window + 1)))
    valid = np.zeros((n, 2 * window), dtype=bool)
    for slot, offset in enumerate(offsets.tolist()):
        distance = abs(offset)
        if distance >= n:
            continue
        same = sentences[distance:] == sentences[: n - distance]  # [n - distance]
        if offset < 0:   # context at i - distance, for centers i >= distance
            valid[distance:, slot] = same & (reduced[distance:] >= distance)
        else:            # context at i + distance, for centers i < n - distance
            valid[: n - distance, slot] = same & (reduced[: n - distance] >= distance)
    flat = np.flatnonzero(valid)               # row-major, as np.nonzero, in one index array
    centers = flat // (2 * window)
    return centers, centers + offsets[flat - centers * (2 * window)]


@dataclass(frozen=True)
class EpochData:
    """One epoch's training segments, one per center that has a context, in text order.

    Attributes:
      in_counts, out_counts: int64 [C], each center's input rows and positive output words.
      in_rows: int32 [sum(in_counts)], out_words: int32 [sum(out_counts)], flat.
      positions: int64 [C], each center's position in the whole text (learning-rate schedule).
    """

    in_counts: np.ndarray
    in_rows: np.ndarray
    out_counts: np.ndarray
    out_words: np.ndarray
    positions: np.ndarray


def _expand(ids: np.ndarray, offsets: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray,
                                                                                np.ndarray]:
    """``(counts, flat rows)`` of the input rows of each id in ``ids`` (CSR lookup)."""
    if np.all(np.diff(offsets) == 1):                                 # one row per word
        return np.ones(ids.shape[0], dtype=np.int64), rows[offsets[ids]]
    counts = offsets[ids + 1] - offsets[ids]
    starts = np.repeat(offsets[ids] - np.cumsum(counts) + counts, counts)
    return counts, rows[starts + np.arange(int(counts.sum()))]


def center_data(corpus: Corpus, rng: np.random.Generator, *, objective: str, window: int,
                keep: np.ndarray, offsets: np.ndarray, rows: np.ndarray) -> EpochData:
    """Subsample the corpus, draw each position's window and lay out one epoch's segments.

    ``keep`` float64 [V] (``keep_probability``); ``offsets``, ``rows``: each word's input rows
    (``subword_rows``, or ``offsets = arange(V + 1)``, ``rows = arange(V)`` without subwords).
    """
    kept = rng.random(corpus.ids.shape[0]) < keep[corpus.ids]
    ids, sentences = corpus.ids[kept], corpus.sentences[kept]
    reduced = window - rng.integers(0, window, size=ids.shape[0])
    centers, contexts = window_contexts(sentences, reduced, window)
    pair_counts = np.bincount(centers, minlength=ids.shape[0])
    has_context = pair_counts > 0
    positions = corpus.positions[kept][has_context]
    if objective == "skipgram":
        in_counts, in_rows = _expand(ids[has_context], offsets, rows)
        return EpochData(in_counts, in_rows, pair_counts[has_context], ids[contexts],
                         positions)
    row_counts, in_rows = _expand(ids[contexts], offsets, rows)
    in_counts = np.bincount(centers, weights=row_counts, minlength=ids.shape[0])
    return EpochData(in_counts[has_context].astype(np.int64), in_rows,
                     np.ones(int(has_context.sum()), dtype=np.int64), ids[has_context],
                     positions)


@dataclass(frozen=True)
class Shapes:
    """The fixed sizes of one batch: center segments, input rows, positive pairs."""

    centers: int
    rows: int
    pairs: int


@dataclass(frozen=True)
class Batches:
    """An epoch's batches, padded to ``Shapes``; arrays have a leading [num_batches] axis.

    ``in_rows`` int32 [n, rows], ``in_seg`` int32 [n, rows] (segment of each row),
    ``in_weight`` float32 [n, rows] (1 / the segment's row count, 0 for padding),
    ``out_words`` int32 [n, pairs], ``out_seg`` int32 [n, pairs], ``out_weight`` float32
    [n, pairs] (1 or 0), ``first_position`` int64 [n] (text position of the first center).
    """

    in_rows: np.ndarray
    in_seg: np.ndarray
    in_weight: np.ndarray
    out_words: np.ndarray
    out_seg: np.ndarray
    out_weight: np.ndarray
    first_position: np.ndarray

    def __len__(self) -> int:
        return self.in_rows.shape[0]


def _cuts(in_ends: np.ndarray, out_ends: np.ndarray, shapes: Shapes) -> np.ndarray:
    """Greedy batch boundaries (int64 [n + 1] center indices) within the ``shapes`` limits."""
    total, cuts, start = in_ends.shape[0], [0], 0
    while start < total:
        in_base = in_ends[start - 1] if start else 0
        out_base = out_ends[start - 1] if start else 0
        stop = min(start + shapes.centers,
                   int(np.searchsorted(in_ends, in_base + shapes.rows, side="right")),
                   int(np.searchsorted(out_ends, out_base + shapes.pairs, side="right")))
        if stop <= start:
            raise ValueError(f"one center needs {in_ends[start] - in_base} input rows and "
                             f"{out_ends[start] - out_base} pairs, more than a batch holds "
                             f"({shapes})")
        cuts.append(stop)
        start = stop
    return np.asarray(cuts, dtype=np.int64)


def _pack(counts: np.ndarray, values: np.ndarray, cuts: np.ndarray, width: int,
          weights: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(values, segment, weight)`` [num_batches, width] of a flat per-center array."""
    n = cuts.shape[0] - 1
    center_batch = np.repeat(np.arange(n), np.diff(cuts))
    owner = np.repeat(np.arange(counts.shape[0]), counts)          # center of each element
    batch = center_batch[owner]
    flat_start = np.concatenate(([0], np.cumsum(counts)))[cuts[:-1]]  # first element per batch
    slot = np.arange(owner.shape[0]) - flat_start[batch]
    out_values = np.zeros((n, width), dtype=np.int32)
    out_seg = np.zeros((n, width), dtype=np.int32)
    out_weight = np.zeros((n, width), dtype=np.float32)
    flat = batch * width + slot
    out_values.reshape(-1)[flat] = values
    out_seg.reshape(-1)[flat] = owner - cuts[batch]
    out_weight.reshape(-1)[flat] = weights[owner]
    return out_values, out_seg, out_weight


def build_batches(data: EpochData, shapes: Shapes) -> Batches:
    """Cut ``data`` into batches of ``shapes`` and pad them (module docstring)."""
    cuts = _cuts(np.cumsum(data.in_counts), np.cumsum(data.out_counts), shapes)
    in_weight = 1.0 / np.maximum(data.in_counts, 1).astype(np.float32)
    in_rows, in_seg, in_w = _pack(data.in_counts, data.in_rows, cuts, shapes.rows, in_weight)
    ones = np.ones(data.out_counts.shape[0], dtype=np.float32)
    out_words, out_seg, out_w = _pack(data.out_counts, data.out_words, cuts, shapes.pairs, ones)
    return Batches(in_rows, in_seg, in_w, out_words, out_seg, out_w,
                   data.positions[cuts[:-1]] if len(cuts) > 1 else np.zeros(0, np.int64))
