"""The binary cache of an embedding: a folder with ``vectors.npy`` and ``tokens.txt``.

``tokens.txt`` holds one UTF-8 token per line, in row order. A fastText embedding also stores its
n-gram rows (``ngrams.npy``) and hashing parameters (``subwords.json``, ``prune_map.npy``), so
unknown words still get their n-gram vectors after a reload. The folder is written under a
temporary name and renamed into place, so a reader never sees a half-written cache.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from textkit._io import atomic_dir
from textkit.embedding.errors import EmbeddingFormatError
from textkit.embedding.fasttext_bin import FastTextSubwords

__all__ = ["load_cache", "save_cache"]

_FORMAT_VERSION = 1


def save_cache(path: str | os.PathLike, tokens: list[str], vectors: np.ndarray,
               subwords: FastTextSubwords | None = None) -> Path:
    """Write the cache folder ``path`` atomically (replacing an existing one)."""
    path = Path(path)
    if any("\n" in t or "\r" in t for t in tokens):
        raise ValueError("tokens containing line breaks cannot be cached")
    with atomic_dir(path) as staging:
        np.save(staging / "vectors.npy", np.ascontiguousarray(vectors, dtype=np.float32))
        (staging / "tokens.txt").write_bytes("\n".join(tokens).encode("utf-8"))
        meta = {"format_version": _FORMAT_VERSION, "count": len(tokens),
                "dim": int(vectors.shape[1])}
        if subwords is not None:
            np.save(staging / "ngrams.npy", subwords.ngram_vectors)
            if subwords.prune_map is not None:
                np.save(staging / "prune_map.npy", subwords.prune_map)
            meta["subwords"] = {"minn": subwords.minn, "maxn": subwords.maxn,
                                "bucket": subwords.bucket, "eos_ngrams": subwords.eos_ngrams}
        (staging / "meta.json").write_text(json.dumps(meta))
    return path


def _damaged(file: Path, problem: str) -> EmbeddingFormatError:
    return EmbeddingFormatError(file, "embedding cache", f"{problem}; the cache is damaged: "
                                "delete its folder and create it again from the vector file")


def _load_array(file: Path, mode: str | None, ndim: int, dtype: str) -> np.ndarray:
    """``np.load`` with a named error for a missing, unreadable or mis-shaped array."""
    if not file.is_file():
        raise _damaged(file, "the file is missing")
    try:
        array = np.load(file, mmap_mode=mode, allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:
        raise _damaged(file, f"not a readable .npy array ({err})") from None
    if array.ndim != ndim or array.dtype.kind != dtype:
        raise _damaged(file, f"a {array.dtype} array of shape {array.shape}, expected "
                       f"{ndim} dimension(s) of kind {dtype!r}")
    return array


def _load_meta(path: Path) -> dict:
    meta_file = path / "meta.json"
    if not meta_file.is_file():
        raise FileNotFoundError(f"{path}: not an embedding cache (no meta.json); "
                                "create one with TokenEmbedding.save()")
    try:
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise _damaged(meta_file, f"not valid JSON ({err})") from None
    if not isinstance(meta, dict):
        raise _damaged(meta_file, "not a JSON object")
    if meta.get("format_version") != _FORMAT_VERSION:
        raise ValueError(f"{path}: cache format {meta.get('format_version')} is not "
                         f"{_FORMAT_VERSION}; re-create it from the source file")
    for key in ("count", "dim"):
        if not isinstance(meta.get(key), int) or meta[key] < 0:
            raise _damaged(meta_file, f"{key!r} is {meta.get(key)!r}, expected an int >= 0")
    return meta


def _load_subwords(path: Path, info: object, dim: int, mode: str | None) -> FastTextSubwords:
    meta_file = path / "meta.json"
    keys = ("minn", "maxn", "bucket", "eos_ngrams")
    if not isinstance(info, dict) or any(key not in info for key in keys):
        raise _damaged(meta_file, f"'subwords' must hold {list(keys)}, got {info!r}")
    ngrams = _load_array(path / "ngrams.npy", mode, 2, "f")
    if ngrams.shape[1] != dim:
        raise _damaged(path / "ngrams.npy", f"n-gram rows have dimension {ngrams.shape[1]}, "
                       f"the vectors {dim}")
    prune_file = path / "prune_map.npy"
    prune_map = _load_array(prune_file, None, 1, "i") if prune_file.exists() else None
    return FastTextSubwords(ngrams, info["minn"], info["maxn"], info["bucket"], prune_map,
                            eos_ngrams=info["eos_ngrams"])


def load_cache(path: str | os.PathLike, mmap: bool = True
               ) -> tuple[list[str], np.ndarray, FastTextSubwords | None]:
    """``(tokens, vectors, subwords)`` from a cache folder; ``mmap`` maps the matrices read-only.

    A missing, unreadable or inconsistent file raises ``EmbeddingFormatError`` naming it.
    """
    path = Path(path)
    meta = _load_meta(path)
    mode = "r" if mmap else None
    vectors = _load_array(path / "vectors.npy", mode, 2, "f")
    tokens_file = path / "tokens.txt"
    if not tokens_file.is_file():
        raise _damaged(tokens_file, "the file is missing")
    try:
        text = tokens_file.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        line = tokens_file.read_bytes().count(b"\n", 0, err.start) + 1
        raise _damaged(tokens_file, f"line {line} is not valid UTF-8") from None
    tokens = text.split("\n") if text or meta["count"] else []
    if len(tokens) != meta["count"] or vectors.shape != (meta["count"], meta["dim"]):
        raise _damaged(path, f"{len(tokens)} tokens (tokens.txt) and a {vectors.shape} matrix "
                       f"(vectors.npy), expected {meta['count']} x {meta['dim']} (meta.json)")
    subwords = None
    if "subwords" in meta:
        subwords = _load_subwords(path, meta["subwords"], meta["dim"], mode)
    return tokens, vectors, subwords
