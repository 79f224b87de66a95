"""``TokenEmbedding``: pretrained vectors with lookup, unknown-word policy and nearest neighbours.

The matrix is a plain float32 numpy array (a read-only memory map after ``load``), so it can be
handed to any framework; ``for_vocab`` builds the [len(vocab), D] matrix that initialises an
embedding layer.
"""

from __future__ import annotations

import functools
import logging
import os
import warnings
import zlib
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import NamedTuple, Protocol

import numpy as np

from textkit.embedding.cache import load_cache, save_cache
from textkit.embedding.fasttext_bin import FastTextSubwords
from textkit.embedding.formats import read_vectors

__all__ = ["TokenEmbedding", "VocabMatrix"]

_log = logging.getLogger(__name__)

Unknown = str | Callable[[str], np.ndarray]


class _VocabLike(Protocol):
    idx_to_token: list[str]

    def __len__(self) -> int: ...


class VocabMatrix(NamedTuple):
    """Result of ``TokenEmbedding.for_vocab``."""

    matrix: np.ndarray  # float32 [len(vocab), D]
    found: int  # vocab tokens that have a pretrained vector
    missing: list[str]  # vocab tokens that got the unknown vector


class TokenEmbedding:
    """Pretrained token vectors.

    Args:
      idx_to_token: N distinct tokens, row order of ``idx_to_vec``.
      idx_to_vec: float32 [N, D].
      unknown: vector for tokens not in the embedding: ``"zeros"``; ``"normal"``, a normal draw
        with the matrix's standard deviation, seeded by ``(seed, crc32(token))`` so a token always
        gets the same vector; or a callable ``token -> float32 [D]``. Embeddings from a fastText
        ``.bin`` compose unknown words from character n-grams instead (as fastText does; zeros
        for a word without n-grams), unless ``unknown`` is given explicitly.
      seed: seed of the ``"normal"`` policy.
      subwords: the n-gram rows of a fastText model, or None.
    """

    def __init__(self, idx_to_token: Sequence[str], idx_to_vec: np.ndarray, *,
                 unknown: Unknown | None = None, seed: int = 0,
                 subwords: FastTextSubwords | None = None):
        idx_to_vec = np.asanyarray(idx_to_vec)  # keeps a np.memmap a memmap
        if idx_to_vec.ndim != 2 or idx_to_vec.shape[0] != len(idx_to_token):
            raise ValueError(f"idx_to_vec has shape {idx_to_vec.shape}, expected "
                             f"({len(idx_to_token)}, D)")
        if idx_to_vec.dtype != np.float32:
            idx_to_vec = idx_to_vec.astype(np.float32)
        _check_policy(unknown)
        self._idx_to_token = list(idx_to_token)
        self._idx_to_vec = idx_to_vec
        self._unknown = unknown
        self._seed = seed
        self._subwords = subwords

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_file(cls, path: str | os.PathLike, format: str | None = None, *,
                  encoding_errors: str = "strict", unknown: Unknown | None = None,
                  seed: int = 0, progress: bool | None = None,
                  allow_nonfinite: bool = False) -> TokenEmbedding:
        """Load a vector file: ``format`` is ``"glove"``, ``"word2vec_text"`` (also fastText
        ``.vec``), ``"word2vec_bin"``, ``"fasttext_bin"`` or None to detect it.

        Duplicate tokens keep their first vector (a warning gives the count). Malformed rows
        and ``nan``/``inf`` values (unless ``allow_nonfinite``) raise ``EmbeddingFormatError``
        naming the file and line or row.
        """
        tokens, vectors, subwords = read_vectors(path, format, encoding_errors=encoding_errors,
                                                 progress=progress,
                                                 allow_nonfinite=allow_nonfinite)
        tokens, vectors = _drop_duplicates(tokens, vectors, path)
        return cls(tokens, vectors, unknown=unknown, seed=seed, subwords=subwords)

    def save(self, path: str | os.PathLike) -> Path:
        """Write the binary cache folder ``path`` (``vectors.npy`` + ``tokens.txt``), atomically."""
        return save_cache(path, self._idx_to_token, self._idx_to_vec, self._subwords)

    @classmethod
    def load(cls, path: str | os.PathLike, mmap: bool = True, *, unknown: Unknown | None = None,
             seed: int = 0) -> TokenEmbedding:
        """Load a cache folder written by ``save``; ``mmap`` maps the matrix (read-only).

        A damaged or incomplete cache raises ``EmbeddingFormatError`` naming the file and the
        problem (delete the folder and create it again).
        """
        tokens, vectors, subwords = load_cache(path, mmap=mmap)
        return cls(tokens, vectors, unknown=unknown, seed=seed, subwords=subwords)

    # ------------------------------------------------------------------ basic access
    @property
    def idx_to_token(self) -> list[str]:
        return self._idx_to_token

    @functools.cached_property
    def token_to_idx(self) -> dict[str, int]:
        return dict(zip(self._idx_to_token, range(len(self._idx_to_token))))

    @property
    def idx_to_vec(self) -> np.ndarray:
        """float32 [N, D]."""
        return self._idx_to_vec

    @property
    def dim(self) -> int:
        return self._idx_to_vec.shape[1]

    @property
    def subwords(self) -> FastTextSubwords | None:
        return self._subwords

    def __len__(self) -> int:
        return len(self._idx_to_token)

    def __contains__(self, token: object) -> bool:
        return token in self.token_to_idx

    def __repr__(self) -> str:
        kind = ", fastText subwords" if self._subwords is not None else ""
        return f"TokenEmbedding({len(self):,} x {self.dim}{kind})"

    # ------------------------------------------------------------------ lookup
    def __getitem__(self, tokens: str | Iterable[str]) -> np.ndarray:
        """float32 [D] for one token, [n, D] for a list; unknown tokens get the unknown vector."""
        if isinstance(tokens, str):
            return self.lookup([tokens])[0]
        return self.lookup(list(tokens))

    def lookup(self, tokens: Sequence[str]) -> np.ndarray:
        """float32 [len(tokens), D]."""
        return self._lookup(tokens, self._unknown)

    def _lookup(self, tokens: Sequence[str], policy: Unknown | None) -> np.ndarray:
        index = np.fromiter(map(self.token_to_idx.get, tokens, [-1] * len(tokens)),
                            dtype=np.int64, count=len(tokens))
        if len(self) == 0:  # no rows: every token is unknown
            out = np.zeros((len(tokens), self.dim), dtype=np.float32)
        else:
            out = self._idx_to_vec[np.maximum(index, 0)]
        if (missing := np.flatnonzero(index < 0)).size:
            out[missing] = self._unknown_vectors([tokens[i] for i in missing.tolist()], policy)
        return out

    def unknown_vectors(self, tokens: Sequence[str]) -> np.ndarray:
        """float32 [len(tokens), D] vectors the unknown policy gives these tokens."""
        return self._unknown_vectors(tokens, self._unknown)

    def _unknown_vectors(self, tokens: Sequence[str], policy: Unknown | None) -> np.ndarray:
        if policy is None:
            if self._subwords is not None:
                return self._subwords.vectors(list(tokens))
            policy = "zeros"
        if policy == "zeros":
            return np.zeros((len(tokens), self.dim), dtype=np.float32)
        if policy == "normal":
            std = self._std
            return np.stack([
                np.random.default_rng([self._seed, zlib.crc32(t.encode("utf-8"))])
                .normal(0.0, std, self.dim).astype(np.float32) for t in tokens
            ]) if tokens else np.zeros((0, self.dim), dtype=np.float32)
        vectors = [np.asarray(policy(t), dtype=np.float32) for t in tokens]
        for token, vector in zip(tokens, vectors):
            if vector.shape != (self.dim,):
                raise ValueError(f"unknown-vector callable returned shape {vector.shape} for "
                                 f"{token!r}, expected ({self.dim},)")
        return np.stack(vectors) if vectors else np.zeros((0, self.dim), dtype=np.float32)

    @functools.cached_property
    def _std(self) -> float:
        sample = self._idx_to_vec[:: max(1, len(self) // 100_000)]
        return float(sample.std()) if sample.size else 1.0

    # ------------------------------------------------------------------ similarity
    @functools.cached_property
    def _unit_vectors(self) -> np.ndarray:
        norms = np.linalg.norm(self._idx_to_vec, axis=1, keepdims=True)
        return self._idx_to_vec / np.maximum(norms, np.finfo(np.float32).tiny)

    def most_similar(self, query: str | np.ndarray, k: int = 10,
                     exclude: Iterable[str] = ()) -> list[tuple[str, float]]:
        """The ``k`` tokens with the highest cosine similarity to ``query``.

        ``query`` is a token (itself excluded from the result) or a float32 [D] vector;
        ``exclude`` lists further tokens to leave out. Returns ``(token, cosine)`` pairs, best
        first.
        """
        excluded = set(exclude)
        if isinstance(query, str):
            excluded.add(query)
            query = self[query]
        query = np.asarray(query, dtype=np.float32)
        if query.shape != (self.dim,):
            raise ValueError(f"query vector has shape {query.shape}, expected ({self.dim},)")
        scores = self._unit_vectors @ (query / max(np.linalg.norm(query), 1e-30))  # [N]
        drop = [self.token_to_idx[t] for t in excluded if t in self.token_to_idx]
        scores[drop] = -np.inf
        k = min(k, len(self) - len(drop))
        if k <= 0:
            return []
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.lexsort((top, -scores[top]))]  # best first, ties by row
        return [(self._idx_to_token[i], float(scores[i])) for i in top.tolist()]

    # ------------------------------------------------------------------ vocab matrix
    def for_vocab(self, vocab: _VocabLike, unknown: Unknown | None = None) -> VocabMatrix:
        """The float32 [len(vocab), D] matrix for ``vocab.idx_to_token`` (an embedding layer's
        initial weights), how many tokens were found, and the missing ones.

        ``unknown`` overrides this embedding's unknown policy for the missing tokens.
        """
        _check_policy(unknown)
        tokens = list(vocab.idx_to_token)
        if len(tokens) != len(vocab):
            raise ValueError(f"vocab has {len(vocab)} entries but {len(tokens)} idx_to_token")
        matrix = self._lookup(tokens, self._unknown if unknown is None else unknown)
        missing = [t for t in tokens if t not in self.token_to_idx]
        found = len(tokens) - len(missing)
        _log.info("for_vocab: %d of %d tokens found (%.1f%%)", found, len(tokens),
                  100.0 * found / max(len(tokens), 1))
        return VocabMatrix(matrix, found, missing)


def _check_policy(unknown: Unknown | None) -> None:
    if unknown is not None and not callable(unknown) and unknown not in ("zeros", "normal"):
        raise ValueError(f"unknown must be 'zeros', 'normal' or a callable, got {unknown!r}")


def _drop_duplicates(tokens: list[str], vectors: np.ndarray, path) -> tuple[list[str], np.ndarray]:
    """Keep each token's first row; warn with the number of dropped rows."""
    first = dict(zip(reversed(tokens), range(len(tokens) - 1, -1, -1)))
    if len(first) == len(tokens):
        return tokens, vectors
    keep = np.sort(np.fromiter(first.values(), dtype=np.int64, count=len(first)))
    warnings.warn(f"{path}: {len(tokens) - len(first):,} duplicate token rows dropped "
                  "(the first occurrence of each token wins)", stacklevel=3)
    return [tokens[i] for i in keep.tolist()], vectors[keep]
