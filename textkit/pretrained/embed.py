"""``embed_texts``: texts -> one vector each, with a loaded encoder (contextual embeddings).

``embed_texts(load_pretrained(dir), texts)`` tokenizes every text (truncated to the model's
limit), sorts the texts by length and runs them in batches of ``batch_size`` rows whose width
is the smallest of ``length_buckets(limit)`` (powers of two from 8, then the limit) that holds
the batch's longest text; the last batch of a width is filled with copies of its first row.
So a call compiles at most ``len(length_buckets(limit))`` programs, each once per process (the
jit cache is keyed by the model's config and the shape). The vectors come back in the texts'
order as float32 numpy [N, E].

A sentence-transformers directory loads as a ``SentenceEncoder``: its pooling, dense layers,
normalisation and ``max_seq_length`` apply, and the vectors are those of
``SentenceTransformer.encode``. A bare ``Encoder`` (any head) is pooled over its last hidden
states, ``pooling="mean"`` unless given; ``pooling`` / ``normalize`` override either.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from textkit.models.encoder import Encoder
from textkit.models.sentence_encoder import SentenceEncoder, SentenceEncoderConfig
from textkit.pretrained.encoder_tokenizer import EncoderTokenizer

__all__ = ["embed_texts", "length_buckets", "sentence_model"]


def length_buckets(limit: int, smallest: int = 8) -> tuple[int, ...]:
    """The padded widths a call may use: powers of two from ``smallest`` below ``limit``,
    then ``limit`` (e.g. 128 -> (8, 16, 32, 64, 128); 20 -> (8, 16, 20))."""
    widths = [2 ** k for k in range(int(math.log2(smallest)), int(math.log2(max(limit, 1))) + 1)
              if smallest <= 2 ** k < limit]
    return (*widths, limit)


def sentence_model(model: Encoder | SentenceEncoder, params: Any, *,
                   pooling: str | Sequence[str] | None = None,
                   normalize: bool | None = None) -> tuple[SentenceEncoder, Any]:
    """``(SentenceEncoder, params)`` of a loaded encoder: a bare ``Encoder`` is wrapped
    (``pooling`` default "mean", params under "encoder"); ``pooling`` / ``normalize`` given
    replace the model's."""
    changes: dict[str, Any] = {}
    if pooling is not None:
        changes["pooling"] = (pooling,) if isinstance(pooling, str) else tuple(pooling)
    if normalize is not None:
        changes["normalize"] = bool(normalize)
    if isinstance(model, Encoder):
        config = SentenceEncoderConfig.for_encoder(model.config, **changes)
        return SentenceEncoder(config), {"encoder": params}
    if not isinstance(model, SentenceEncoder):
        raise TypeError(f"embed_texts needs an Encoder or a SentenceEncoder (load_pretrained "
                        f"of an encoder or sentence-transformers directory); got "
                        f"{type(model).__name__}")
    config = model.config
    if "pooling" in changes and config.dense and \
            len(changes["pooling"]) != len(config.pooling):
        raise ValueError(f"pooling={changes['pooling']!r}: the dense layers take "
                         f"{len(config.pooling)} pooled vector(s) per text")
    return SentenceEncoder(dataclasses.replace(config, **changes)), params


@functools.partial(jax.jit, static_argnums=0)
def _embed(model: SentenceEncoder, params: Any, batch: dict[str, jax.Array]) -> jax.Array:
    """float32 [B, E] sentence embeddings of a batch of int32 [B, T] inputs."""
    return model.apply({"params": params}, **batch)["sentence_embedding"]


def embed_texts(encoder: Any, texts: Sequence[str], *,
                pooling: str | Sequence[str] | None = None, normalize: bool | None = None,
                batch_size: int = 32, max_length: int | None = None) -> np.ndarray:
    """One vector per text: ``encoder`` is the ``Pretrained`` that ``load_pretrained`` gives
    for an encoder or a sentence-transformers directory (an ``Encoder`` or
    ``SentenceEncoder`` and an ``EncoderTokenizer``); ``texts`` a sequence of str -> float32
    numpy [len(texts), E], in the texts' order (module docstring). ``max_length`` (tokens per
    text, special tokens included) defaults to the model's ``max_seq_length`` or its positions;
    longer texts are truncated."""
    model, params, tokenizer = encoder.model, encoder.params, encoder.tokenizer
    if not isinstance(tokenizer, EncoderTokenizer):
        raise TypeError(f"embed_texts needs an EncoderTokenizer; got {type(tokenizer).__name__}")
    if isinstance(texts, str):
        raise TypeError("texts is one str: pass a list of texts")
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size}; expected >= 1")
    model, params = sentence_model(model, params, pooling=pooling, normalize=normalize)
    config = model.config
    limit = config.length_limit if max_length is None else int(max_length)
    if not 0 < limit <= config.max_positions:
        raise ValueError(f"max_length={max_length}; the model takes 1 to "
                         f"{config.max_positions} tokens per text")
    encodings = tokenizer.encodings(list(texts), max_length=limit)
    params = jax.device_put(params)
    buckets = np.asarray(length_buckets(limit))
    lengths = np.array([len(e.ids) for e in encodings], np.int64)
    order = np.argsort(lengths, kind="stable")
    out: np.ndarray | None = None
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        width = int(buckets[np.searchsorted(buckets, lengths[rows].max())])
        batch = _batch([encodings[i] for i in rows], batch_size, width, tokenizer)
        vectors = np.asarray(_embed(model, params, batch), np.float32)[:len(rows)]
        if out is None:
            out = np.empty((len(encodings), vectors.shape[1]), np.float32)
        out[rows] = vectors
    if out is None:
        dummy = {"input_ids": jax.ShapeDtypeStruct((1, 8), np.int32)}
        shape = jax.eval_shape(lambda p, b: _embed(model, p, b), params, dummy).shape
        out = np.empty((0, shape[1]), np.float32)
    return out


def _batch(encodings: list[Any], rows: int, width: int,
           tokenizer: EncoderTokenizer) -> dict[str, np.ndarray]:
    """int32 [rows, width] model inputs of ``encodings``; missing rows repeat the first."""
    ids = np.full((rows, width), tokenizer.pad_id, np.int32)
    mask = np.zeros((rows, width), np.int32)
    types = np.zeros((rows, width), np.int32)
    for row in range(rows):
        enc = encodings[row] if row < len(encodings) else encodings[0]
        n = len(enc.ids)
        ids[row, :n] = enc.ids
        mask[row, :n] = 1
        types[row, :n] = enc.type_ids
    batch = {"input_ids": ids, "attention_mask": mask}
    if tokenizer.with_token_types:
        batch["token_type_ids"] = types
    return batch
