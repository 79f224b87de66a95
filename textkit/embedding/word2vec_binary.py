"""word2vec C binary vectors: an ASCII ``N D\\n`` header, then per row ``word<space>`` followed by
D little-endian float32 values (and, as word2vec writes it, a ``\\n`` that the next row skips)."""

from __future__ import annotations

import mmap
import os
import warnings
from pathlib import Path

import numpy as np

from textkit.embedding.errors import EmbeddingFormatError

__all__ = ["read_word2vec_binary"]


def _header(data: mmap.mmap, path: Path) -> tuple[int, int, int]:
    """``(count, dim, end of the header line)``; a count or dim the file size cannot hold is an
    ``EmbeddingFormatError`` (checked before anything is allocated)."""
    header_end = data.find(b"\n", 0, 256)
    fields = data[:header_end].split() if header_end > 0 else []
    if len(fields) != 2 or not all(x.isdigit() for x in fields):
        raise EmbeddingFormatError(path, "line 1", f"expected an 'N D' header, got "
                                   f"{data[:min(len(data), 40)]!r}")
    count, dim = int(fields[0]), int(fields[1])
    if dim < 1:
        raise EmbeddingFormatError(path, "line 1", f"the header declares dimension {dim}")
    body = len(data) - header_end - 1
    if count * (2 + 4 * dim) > body:  # each row: a word of >= 1 byte, a space, dim floats
        raise EmbeddingFormatError(
            path, "line 1",
            f"the header declares {count:,} rows of dimension {dim}, which need at least "
            f"{count * (2 + 4 * dim):,} bytes, but the file has {body:,} after the header; the "
            "header is wrong or the file is truncated (or not word2vec binary)")
    return count, dim, header_end


def read_word2vec_binary(
    path: str | os.PathLike, *, encoding_errors: str = "strict", allow_nonfinite: bool = False,
) -> tuple[list[str], np.ndarray]:
    """Read a word2vec binary file (not gzip-compressed; decompress ``.bin.gz`` first).

    Returns ``(tokens, vectors)``: N tokens and float32 [N, D]. An empty file, a header whose
    count or dimension the file size cannot hold, a row cut short, or a non-finite value
    (unless ``allow_nonfinite``) is an ``EmbeddingFormatError`` naming the file and row; data
    after the declared rows is a warning.
    """
    path = Path(path)
    if os.path.getsize(path) == 0:
        raise EmbeddingFormatError(path, "byte 0", "the file is empty (expected a word2vec "
                                   "'N D' header and binary rows)")
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        count, dim, header_end = _header(data, path)
        row_bytes = 4 * dim
        vectors = np.empty((count, dim), dtype=np.float32)
        words: list[bytes] = []
        pos = header_end + 1
        for row in range(count):
            while pos < len(data) and data[pos] in b"\n\r":  # word2vec's newline after a row
                pos += 1
            space = data.find(b" ", pos)
            if space < 0 or space + 1 + row_bytes > len(data):
                raise EmbeddingFormatError(
                    path, f"row {row + 1} (byte {pos})",
                    f"expected a word, a space and {dim} float32 values; the file ends "
                    f"(header declares {count} rows)")
            words.append(data[pos:space])
            vectors[row] = np.frombuffer(data, dtype="<f4", count=dim, offset=space + 1)
            pos = space + 1 + row_bytes
        if data[pos:].strip():
            warnings.warn(f"{path}: {len(data) - pos:,} bytes follow the {count:,} rows the "
                          "header declares; they were ignored", stacklevel=2)
    if not allow_nonfinite and not (finite := np.isfinite(vectors).all(axis=1)).all():
        row = int(np.argmin(finite))
        raise EmbeddingFormatError(path, f"row {row + 1}", "has a non-finite value (nan or "
                                   "inf); pass allow_nonfinite=True to load it anyway")
    tokens = []
    for row, word in enumerate(words):
        try:
            tokens.append(word.decode("utf-8", encoding_errors))
        except UnicodeDecodeError as err:
            raise EmbeddingFormatError(
                path, f"row {row + 1}",
                f"word {word!r} is not valid UTF-8 ({err.reason}); pass "
                "encoding_errors='replace' to load it with U+FFFD") from None
    return tokens, vectors
