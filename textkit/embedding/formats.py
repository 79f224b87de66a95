"""Vector file formats: detection and dispatch to the readers.

Formats: ``"glove"`` (text, no header), ``"word2vec_text"`` (text with an ``N D`` header: word2vec
and fastText ``.vec``), ``"word2vec_bin"`` (word2vec C binary) and ``"fasttext_bin"`` (fastText
model, old or current layout). Text formats may be gzip-compressed.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np

from textkit.embedding.errors import EmbeddingFormatError
from textkit.embedding.fasttext_bin import FASTTEXT_MAGIC, FastTextSubwords, read_fasttext_bin
from textkit.embedding.text_format import has_text_header, open_maybe_gzip, read_text_vectors
from textkit.embedding.word2vec_binary import read_word2vec_binary

__all__ = ["FORMATS", "detect_format", "read_vectors"]

FORMATS = ("glove", "word2vec_text", "word2vec_bin", "fasttext_bin")
_ALIASES = {"vec": "word2vec_text", "fasttext_text": "word2vec_text", "word2vec": "word2vec_text",
            "text": None}


def detect_format(path: str | os.PathLike) -> str:
    """The format of ``path`` from its first bytes (and a ``.bin`` suffix for old fastText)."""
    path = Path(path)
    with open(path, "rb") as raw:
        head = raw.read(8)
    if not head:
        raise EmbeddingFormatError(path, "byte 0", "the file is empty")
    if len(head) >= 4 and struct.unpack("<i", head[:4])[0] == FASTTEXT_MAGIC:
        return "fasttext_bin"
    stream, raw = open_maybe_gzip(path)
    with stream, raw:
        first_line = stream.readline(1 << 16)
        rest = stream.read(1 << 12)
    header = has_text_header(first_line)
    binary = b"\0" in rest or (rest and _mostly_binary(rest))
    if header and binary:
        return "word2vec_bin"
    if path.suffix == ".bin" and not header:
        return "fasttext_bin"  # the old layout starts with int32 dim, no magic
    return "word2vec_text" if header else "glove"


def _mostly_binary(sample: bytes) -> bool:
    """Float32 data has many bytes outside printable text; UTF-8 text has none below 0x09."""
    controls = np.frombuffer(sample, dtype=np.uint8)
    return bool(np.count_nonzero(controls < 0x09) > 0)


def read_vectors(
    path: str | os.PathLike, format: str | None = None, *, encoding_errors: str = "strict",
    progress: bool | None = None, allow_nonfinite: bool = False,
) -> tuple[list[str], np.ndarray, FastTextSubwords | None]:
    """``(tokens, vectors float32 [N, D], subwords or None)`` from a vector file.

    ``nan``/``inf`` values are an ``EmbeddingFormatError`` naming the line or row unless
    ``allow_nonfinite``.
    """
    format = _ALIASES.get(format, format) if format is not None else None
    if os.path.getsize(path) == 0:
        raise EmbeddingFormatError(path, "byte 0", "the file is empty")
    if format is None:
        format = detect_format(path)
    if format not in FORMATS:
        raise ValueError(f"unknown embedding format {format!r}; expected one of {FORMATS}")
    if format == "fasttext_bin":
        tokens, vectors, subwords, _args = read_fasttext_bin(path,
                                                             encoding_errors=encoding_errors)
        if not allow_nonfinite and not (finite := np.isfinite(vectors).all(axis=1)).all():
            raise EmbeddingFormatError(path, f"word row {int(np.argmin(finite)) + 1}",
                                       "has a non-finite value (nan or inf); pass "
                                       "allow_nonfinite=True to load it anyway")
        return tokens, vectors, subwords
    if format == "word2vec_bin":
        tokens, vectors = read_word2vec_binary(path, encoding_errors=encoding_errors,
                                               allow_nonfinite=allow_nonfinite)
        return tokens, vectors, None
    tokens, vectors = read_text_vectors(path, header=format == "word2vec_text",
                                        encoding_errors=encoding_errors, progress=progress,
                                        allow_nonfinite=allow_nonfinite)
    return tokens, vectors, None
