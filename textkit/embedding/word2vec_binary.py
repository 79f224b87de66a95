"""word2vec C binary vectors: an ASCII ``N D\\n`` header, then per row ``word<space>`` followed by
D little-endian float32 values (and, as word2vec writes it, a ``\\n`` that the next row skips)."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import numpy as np

from textkit.embedding.errors import EmbeddingFormatError

__all__ = ["read_word2vec_binary"]


def read_word2vec_binary(
    path: str | os.PathLike, *, encoding_errors: str = "strict"
) -> tuple[list[str], np.ndarray]:
    """Read a word2vec binary file (not gzip-compressed; decompress ``.bin.gz`` first).

    Returns ``(tokens, vectors)``: N tokens and float32 [N, D]. A header count larger than the
    rows present, or a row cut short, is an ``EmbeddingFormatError`` naming the row and byte.
    """
    path = Path(path)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        header_end = data.find(b"\n", 0, 256)
        fields = data[:header_end].split() if header_end > 0 else []
        if len(fields) != 2 or not all(x.isdigit() for x in fields):
            raise EmbeddingFormatError(path, "line 1", f"expected an 'N D' header, got "
                                       f"{data[:min(len(data), 40)]!r}")
        count, dim = int(fields[0]), int(fields[1])
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
