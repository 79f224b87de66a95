"""An independent float64 numpy forward of textkit's pre-norm Transformer (sinusoidal
positions, scaled and shared embeddings, tied output, ReLU), written from the architecture
(Vaswani et al., pre-norm as in tensor2tensor) and the parameter names only: the oracle for
``tests/test_transformer.py`` and ``tests/test_attention.py``.

A query whose keys are all masked attends uniformly to them (the mask fills a large finite
negative score, as textkit does), so an all-padding dummy row has a defined value."""

from __future__ import annotations

import numpy as np

MASKED = -1e30


def as64(tree):
    if isinstance(tree, dict):
        return {k: as64(v) for k, v in tree.items()}
    return np.asarray(tree).astype(np.float64)


def positions(length: int, dim: int) -> np.ndarray:
    """[sin | cos] halves, frequencies 10000 ** (-i / (dim/2 - 1)) (tensor2tensor's)."""
    half = dim // 2
    inv_freq = 10000.0 ** (-np.arange(half) / max(half - 1, 1))
    angles = np.arange(length)[:, None] * inv_freq[None]
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=1)


def layer_norm(x, p, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * p["scale"] + p["bias"]


def attention(q, k, v, mask):
    """q [B, Q, H, Dh], k / v [B, K, H, Dh], mask bool broadcastable to [B, H, Q, K]."""
    scores = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
    scores = np.where(np.broadcast_to(mask, scores.shape), scores, MASKED)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    return np.einsum("bhqk,bkhd->bqhd", probs, v)


def self_attention(x, p, mask):
    qkv = np.einsum("bld,dthe->tblhe", x, p["qkv"]["kernel"]) + p["qkv"]["bias"][:, None, None]
    out = attention(qkv[0], qkv[1], qkv[2], mask)
    return np.einsum("blhe,hed->bld", out, p["out"]["kernel"]) + p["out"]["bias"]


def cross_attention(x, memory, p, mask):
    q = np.einsum("bld,dhe->blhe", x, p["query"]["kernel"]) + p["query"]["bias"]
    kv = np.einsum("bsd,dthe->tbshe", memory, p["key_value"]["kernel"])
    kv = kv + p["key_value"]["bias"][:, None, None]
    out = attention(q, kv[0], kv[1], mask)
    return np.einsum("blhe,hed->bld", out, p["out"]["kernel"]) + p["out"]["bias"]


def feed_forward(x, p):
    h = np.maximum(x @ p["wi"]["kernel"] + p["wi"]["bias"], 0.0)
    return h @ p["wo"]["kernel"] + p["wo"]["bias"]


def transformer_logits(params, src, tgt, *, pad_id: int, num_encoder_layers: int,
                       num_decoder_layers: int, eps: float = 1e-6) -> np.ndarray:
    """float64 [B, T, V] logits of ``src`` int[B, S] and ``tgt`` int[B, T]."""
    p = as64(params)
    src, tgt = np.asarray(src), np.asarray(tgt)
    table = p["src_embed"]["embedding"]
    d = table.shape[1]
    x = table[src] * np.sqrt(d) + positions(src.shape[1], d)
    src_mask = (src != pad_id)[:, None, None, :]
    for i in range(num_encoder_layers):
        layer = p[f"encoder_{i}"]
        x = x + self_attention(layer_norm(x, layer["self_norm"]["norm"], eps),
                               layer["self_attention"], src_mask)
        x = x + feed_forward(layer_norm(x, layer["ff_norm"]["norm"], eps), layer["feed_forward"])
    memory = layer_norm(x, p["encoder_norm"]["norm"], eps)
    y = table[tgt] * np.sqrt(d) + positions(tgt.shape[1], d)
    causal = np.tril(np.ones((tgt.shape[1], tgt.shape[1]), bool))[None, None]
    for i in range(num_decoder_layers):
        layer = p[f"decoder_{i}"]
        y = y + self_attention(layer_norm(y, layer["self_norm"]["norm"], eps),
                               layer["self_attention"], causal)
        y = y + cross_attention(layer_norm(y, layer["cross_norm"]["norm"], eps), memory,
                                layer["cross_attention"], src_mask)
        y = y + feed_forward(layer_norm(y, layer["ff_norm"]["norm"], eps), layer["feed_forward"])
    return layer_norm(y, p["decoder_norm"]["norm"], eps) @ table.T
