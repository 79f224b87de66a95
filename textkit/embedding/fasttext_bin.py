"""fastText binary models (``.bin``): the input matrix, the word list and character n-grams.

Layout (fastText ``FastText::saveModel``): [int32 magic 793712314, int32 version] (absent in the
old format), the 13 training args (int32 dim, ws, epoch, minCount, neg, wordNgrams, loss, model,
bucket, minn, maxn, lrUpdateRate; float64 t), the dictionary (int32 size, nwords, nlabels; int64
ntokens; int64 pruneidx_size in the new format; per entry a NUL-terminated word, int64 count and
int8 type; then pruneidx_size (int32, int32) pairs), a quantisation flag byte (new format), and
the input matrix (int64 rows, int64 cols, float32 rows*cols) with ``nwords + bucket`` rows.

A word's vector is fastText's ``getWordVector``: the mean of its own row (when in the vocabulary)
and the rows of its character n-grams of ``<word>`` with ``minn <= n <= maxn`` characters, each
n-gram's row being ``nwords + fnv1a32(bytes) % bucket`` where every byte is sign-extended from
int8 before the xor, as fastText's C++ does.
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from textkit.embedding.errors import EmbeddingFormatError

__all__ = ["FASTTEXT_MAGIC", "FastTextSubwords", "char_ngrams", "fnv1a_int8", "read_fasttext_bin"]

FASTTEXT_MAGIC = 793712314
_ARG_NAMES = ("dim", "ws", "epoch", "min_count", "neg", "word_ngrams", "loss", "model",
              "bucket", "minn", "maxn", "lr_update_rate")
_EOS = "</s>"
_FNV_OFFSET = np.uint32(2166136261)
_FNV_PRIME = np.uint32(16777619)


def fnv1a_int8(ngrams: list[bytes]) -> np.ndarray:
    """fastText's 32-bit FNV-1a hash of each byte string (bytes sign-extended from int8).

    Returns uint32 [len(ngrams)]; vectorised over strings of equal length.
    """
    hashes = np.empty(len(ngrams), dtype=np.uint32)
    lengths = np.fromiter(map(len, ngrams), dtype=np.int64, count=len(ngrams))
    for length in np.unique(lengths).tolist():
        which = np.flatnonzero(lengths == length)
        group = np.frombuffer(b"".join([ngrams[i] for i in which.tolist()]), dtype=np.int8)
        columns = group.reshape(-1, length).astype(np.int32).view(np.uint32)  # sign-extended
        h = np.full(which.shape[0], _FNV_OFFSET, dtype=np.uint32)
        for j in range(length):
            h ^= columns[:, j]
            h *= _FNV_PRIME
        hashes[which] = h
    return hashes


def char_ngrams(word: str, minn: int, maxn: int) -> list[bytes]:
    """UTF-8 byte strings of the n-grams of ``<word>`` fastText uses (``computeSubwords``)."""
    if maxn <= 0:
        return []
    chars = [c.encode("utf-8") for c in "<" + word + ">"]
    size = len(chars)
    ngrams = []
    for i in range(size):
        for n in range(minn, min(maxn, size - i) + 1):
            if n == 1 and (i == 0 or i + n == size):
                continue  # fastText skips "<" and ">" alone
            ngrams.append(b"".join(chars[i : i + n]))
    return ngrams


@dataclass(frozen=True)
class FastTextSubwords:
    """Character n-gram rows of a fastText model and the hashing that indexes them.

    Attributes:
      ngram_vectors: float32 [R, D], the input-matrix rows after the words (R = bucket unless
        the model was pruned).
      minn, maxn: n-gram lengths in characters (``maxn == 0``: no subwords).
      bucket: the number of hash buckets.
      prune_map: int64 [K, 2] (hash bucket, row) pairs of a pruned model, or None.
      eos_ngrams: whether ``</s>`` gets n-grams too (old-layout models; since the current
        layout fastText gives it none).
    """

    ngram_vectors: np.ndarray
    minn: int
    maxn: int
    bucket: int
    prune_map: np.ndarray | None = None
    eos_ngrams: bool = False

    def ngram_rows(self, words: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, counts)``: int64 n-gram rows of all words concatenated, int64 [len(words)]."""
        per_word = [char_ngrams(w, self.minn, self.maxn) if w != _EOS or self.eos_ngrams else []
                    for w in words]
        counts = np.fromiter(map(len, per_word), dtype=np.int64, count=len(words))
        flat = [g for grams in per_word for g in grams]
        if not flat:
            return np.empty(0, dtype=np.int64), counts
        buckets = (fnv1a_int8(flat) % np.uint32(self.bucket)).astype(np.int64)
        if self.prune_map is None:
            return buckets, counts
        order = np.argsort(self.prune_map[:, 0])
        keys, values = self.prune_map[order, 0], self.prune_map[order, 1]
        pos = np.minimum(np.searchsorted(keys, buckets), keys.shape[0] - 1)
        found = keys[pos] == buckets
        owner = np.repeat(np.arange(len(words)), counts)
        counts = np.bincount(owner[found], minlength=len(words)).astype(np.int64)
        return values[pos[found]], counts

    def vectors(self, words: list[str], word_vectors: np.ndarray | None = None) -> np.ndarray:
        """float32 [len(words), D]: mean of the n-gram rows (and ``word_vectors`` rows if given).

        ``word_vectors`` (float32 [len(words), D]) are the words' own input rows, for in-vocabulary
        words; a word with no rows at all gets zeros, as in fastText.
        """
        dim = self.ngram_vectors.shape[1]
        rows, counts = self.ngram_rows(words)
        sums = np.zeros((len(words), dim), dtype=np.float32)
        if rows.shape[0]:
            nonempty = np.flatnonzero(counts)
            offsets = np.concatenate(([0], np.cumsum(counts)[:-1]))[nonempty]
            sums[nonempty] = np.add.reduceat(self.ngram_vectors[rows], offsets, axis=0)
        if word_vectors is not None:
            sums += word_vectors
            counts = counts + 1
        return sums / np.maximum(counts, 1)[:, None].astype(np.float32)


class _Reader:
    def __init__(self, data: mmap.mmap, path: Path):
        self.data, self.pos, self.path = data, 0, path

    def unpack(self, fmt: str, what: str) -> tuple:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise EmbeddingFormatError(self.path, f"byte {self.pos}",
                                       f"file ends inside the {what}")
        values = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return values


def read_fasttext_bin(
    path: str | os.PathLike, *, encoding_errors: str = "strict", words_per_batch: int = 8192
) -> tuple[list[str], np.ndarray, FastTextSubwords, dict]:
    """Read a fastText ``.bin`` model (old layout or the current one with the magic number).

    Returns:
      ``(words, vectors, subwords, args)``: the vocabulary words (labels of supervised models
      left out), their float32 [nwords, D] vectors computed as fastText's ``getWordVector``
      (so equal to the model's ``.vec``), the n-gram rows for unknown words, and the training
      args as a dict (plus ``version``).
    """
    path = Path(path)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        reader = _Reader(data, path)
        magic, version = reader.unpack("<2i", "header")
        new_format = magic == FASTTEXT_MAGIC
        if new_format:
            values = reader.unpack("<12i", "training args")
        else:  # old layout: no magic/version, the first two ints are dim and ws
            values = (magic, version) + reader.unpack("<10i", "training args")
            version = 0
        args = dict(zip(_ARG_NAMES, values))
        args["t"], args["version"] = reader.unpack("<d", "training args")[0], version
        dim = args["dim"]
        if not 0 < dim < 1 << 20 or args["bucket"] < 0:
            raise EmbeddingFormatError(
                path, "header", f"not a fastText model (dim {dim}, bucket {args['bucket']})")
        size, nwords, nlabels = reader.unpack("<3i", "dictionary header")
        reader.unpack("<q", "dictionary header")  # ntokens
        prune_size = reader.unpack("<q", "dictionary header")[0] if new_format else -1
        words: list[bytes] = []
        for index in range(size):
            nul = data.find(b"\0", reader.pos)
            if nul < 0:
                raise EmbeddingFormatError(path, f"dictionary entry {index}",
                                           "file ends inside a word")
            word = data[reader.pos : nul]
            reader.pos = nul + 1
            _count, entry_type = reader.unpack("<qb", f"dictionary entry {index}")
            if entry_type == 0:
                words.append(word)
        if len(words) != nwords:
            raise EmbeddingFormatError(path, "dictionary",
                                       f"header says {nwords} words, found {len(words)}")
        prune_map = None
        if prune_size > 0:
            pairs = np.frombuffer(data, dtype="<i4", count=2 * prune_size, offset=reader.pos)
            prune_map = pairs.reshape(-1, 2).astype(np.int64)
            reader.pos += 8 * prune_size
        if new_format and reader.unpack("<?", "quantisation flag")[0]:
            raise EmbeddingFormatError(path, "input matrix",
                                       "quantised models (.ftz) are not supported")
        rows, cols = reader.unpack("<2q", "input matrix shape")
        n_ngram_rows = args["bucket"] if prune_map is None else rows - nwords
        if cols != dim or rows != nwords + n_ngram_rows:
            raise EmbeddingFormatError(
                path, "input matrix",
                f"shape {rows} x {cols}, expected {nwords + n_ngram_rows} x {dim}")
        if reader.pos + 4 * rows * cols > len(data):
            raise EmbeddingFormatError(path, "input matrix", "file ends inside the matrix")
        matrix = np.frombuffer(data, dtype="<f4", count=rows * cols, offset=reader.pos)
        matrix = matrix.reshape(rows, cols).astype(np.float32)  # own copy, native byte order
    subwords = FastTextSubwords(matrix[nwords:], args["minn"], args["maxn"], args["bucket"],
                                prune_map, eos_ngrams=not new_format)
    tokens = [_decode(w, path, i, encoding_errors) for i, w in enumerate(words)]
    vectors = np.empty((nwords, dim), dtype=np.float32)
    for start in range(0, nwords, words_per_batch):
        stop = min(start + words_per_batch, nwords)
        vectors[start:stop] = subwords.vectors(tokens[start:stop], matrix[start:stop])
    args.update(nwords=nwords, nlabels=nlabels)
    return tokens, vectors, subwords, args


def _decode(word: bytes, path: Path, index: int, errors: str) -> str:
    try:
        return word.decode("utf-8", errors)
    except UnicodeDecodeError as err:
        raise EmbeddingFormatError(
            path, f"dictionary entry {index}",
            f"word {word!r} is not valid UTF-8 ({err.reason}); pass encoding_errors='replace' "
            "to load it with U+FFFD") from None
