"""Write word vectors as word2vec text (``N D`` header, one ``word v1 .. vD`` line per word) or
word2vec C binary (``N D\\n`` header, then per word ``word<space>`` + D little-endian float32 +
``\\n``), the layouts ``TokenEmbedding.from_file`` and gensim's
``KeyedVectors.load_word2vec_format`` read. Files are written atomically (``textkit._io``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from textkit._io import atomic_path

__all__ = ["write_word2vec_binary", "write_word2vec_text"]


def _check(tokens: Sequence[str], vectors: np.ndarray) -> None:
    if vectors.ndim != 2 or vectors.shape[0] != len(tokens):
        raise ValueError(f"vectors have shape {vectors.shape}, expected ({len(tokens)}, D)")
    bad = next((t for t in tokens if not t or any(c.isspace() for c in t)), None)
    if bad is not None:
        raise ValueError(f"token {bad!r} is empty or holds whitespace; word2vec files cannot "
                         "hold it")


def write_word2vec_text(path: str | os.PathLike, tokens: Sequence[str],
                        vectors: np.ndarray) -> Path:
    """Write ``tokens`` (N) with ``vectors`` (float32 [N, D]) as word2vec text; returns the path.

    Values are written with ``repr``-exact float32 precision (9 significant digits).
    """
    vectors = np.asarray(vectors, dtype=np.float32)
    _check(tokens, vectors)
    path = Path(path)
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(f"{vectors.shape[0]} {vectors.shape[1]}\n")
        for start in range(0, len(tokens), 4096):
            block = vectors[start : start + 4096]
            text = np.char.mod("%.9g", block)
            f.writelines(f"{token} {' '.join(row)}\n"
                         for token, row in zip(tokens[start : start + 4096], text.tolist()))
    return path


def write_word2vec_binary(path: str | os.PathLike, tokens: Sequence[str],
                          vectors: np.ndarray) -> Path:
    """Write ``tokens`` (N) with ``vectors`` (float32 [N, D]) as word2vec C binary."""
    vectors = np.asarray(vectors, dtype="<f4")
    _check(tokens, vectors)
    path = Path(path)
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.write(f"{vectors.shape[0]} {vectors.shape[1]}\n".encode("ascii"))
        for token, row in zip(tokens, vectors):
            f.write(token.encode("utf-8") + b" " + row.tobytes() + b"\n")
    return path
