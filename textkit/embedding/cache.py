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


def load_cache(path: str | os.PathLike, mmap: bool = True
               ) -> tuple[list[str], np.ndarray, FastTextSubwords | None]:
    """``(tokens, vectors, subwords)`` from a cache folder; ``mmap`` maps the matrices read-only."""
    path = Path(path)
    meta_file = path / "meta.json"
    if not meta_file.is_file():
        raise FileNotFoundError(f"{path}: not an embedding cache (no meta.json); "
                                "create one with TokenEmbedding.save()")
    meta = json.loads(meta_file.read_text())
    if meta.get("format_version") != _FORMAT_VERSION:
        raise ValueError(f"{path}: cache format {meta.get('format_version')} is not "
                         f"{_FORMAT_VERSION}; re-create it from the source file")
    mode = "r" if mmap else None
    vectors = np.load(path / "vectors.npy", mmap_mode=mode)
    text = (path / "tokens.txt").read_bytes().decode("utf-8")
    tokens = text.split("\n") if text or meta["count"] else []
    if len(tokens) != meta["count"] or vectors.shape != (meta["count"], meta["dim"]):
        raise ValueError(f"{path}: {len(tokens)} tokens and a {vectors.shape} matrix, "
                         f"expected {meta['count']} x {meta['dim']}; the cache is damaged")
    subwords = None
    if "subwords" in meta:
        info = meta["subwords"]
        prune_file = path / "prune_map.npy"
        subwords = FastTextSubwords(
            np.load(path / "ngrams.npy", mmap_mode=mode), info["minn"], info["maxn"],
            info["bucket"], np.load(prune_file) if prune_file.exists() else None,
            eos_ngrams=info["eos_ngrams"])
    return tokens, vectors, subwords
