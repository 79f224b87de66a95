"""Multi-head dot-product attention with padding/causal masks and a key/value cache.

Masks are boolean and broadcastable to [B, heads, queries, keys] (True = may attend). The
projections are compute-dtype matmuls with float32 results; the score and value products run in
float32 (see ``dot_product_attention``); scores are masked with a finite fill
(``textkit.precision.mask_value(float32)``, so an all-masked dummy row gives a uniform
distribution, never NaN) and soft-maxed in float32.

Keys and values are kept heads-major so that the score and value products are plain batched
matmuls over (B, H): a one-token decoding step then reads the cache in place instead of
transposing all of it (as a [B, L, H, Dh] layout makes XLA do, every step, for every layer).
Values are [B, H, L, Dh]; keys that are read again and again (the decoding caches and the
cross-attention keys projected for decoding) are *depth-major*, [B, H, Dh, L]: the score product
``q [.., Q, Dh] @ k [.., Dh, L]`` is then a plain (non-transposed) matmul, several times
faster on XLA:CPU for one-query steps than contracting both operands' minor axes.

Incremental decoding uses an explicit cache pytree, never flax's mutable "cache" collection:
``{"key": [B, H, Dh, max_len], "value": [B, H, max_len, Dh]}`` in the compute dtype, with the
write position passed separately as int32[B] (the model keeps it in its own cache); a step
scatters its key/value into that one position (``POSITION_AXIS`` names the axis per leaf).

Beam search uses a *slot* layout instead (``beams=K``): the N = B*K query rows are the K
hypotheses of B sentences, the cache is key ``[B, H, Dh, K, max_len]`` / value
``[B, H, K, max_len, Dh]`` (slot j of sentence b is written by hypothesis j at each step, in
place, once per position) and an ancestry table
int32[B, K, max_len] says which slot holds each position of each hypothesis's history
(``textkit.models.beam_cache``). A hypothesis attends to its own history through that
mask, so the cache is never reordered when hypotheses change parents: only the table is. The K
queries of a sentence are one group (``group_beams``): one product against all K slots of its
self-attention cache, and one against a single, untiled copy of its cross-attention memory.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from textkit.models.layers import Dense, dropout
from textkit.precision import Policy, mask_value

Array = jax.Array

POSITION_AXIS = {"key": -1, "value": -2}
"""The position (length) axis of each decoding-cache leaf; a slot cache's slot axis is the one
just before it."""


def padding_mask(tokens: Array, pad_id: int) -> Array:
    """Key mask from token ids: int[B, K] -> bool[B, 1, 1, K] (True at real tokens)."""
    return (tokens != pad_id)[:, None, None, :]


def causal_mask(length: int) -> Array:
    """Lower-triangular mask bool[1, 1, length, length] (query i sees keys <= i)."""
    return jnp.tril(jnp.ones((length, length), dtype=bool))[None, None]


def position_mask(positions: Array, max_length: int) -> Array:
    """Cache mask for one decoding step: int32[B] -> bool[B, 1, 1, max_length] (keys <= pos)."""
    return (jnp.arange(max_length)[None, :] <= positions[:, None])[:, None, None, :]


def dot_product_attention(query: Array, key: Array, value: Array, mask: Array | None, *,
                          depth_major_key: bool = False, dropout_rate: float = 0.0,
                          dropout_rng: Array | None = None, deterministic: bool = True) -> Array:
    """Scaled dot-product attention, computed in float32, heads-major.

    query [B, H, Q, Dh], key [B, H, K, Dh] (``depth_major_key``: [B, H, Dh, K]), value
    [B, H, K, Dh] (any float dtype; projections arrive from compute-dtype matmuls), mask bool
    broadcastable to [B, H, Q, K] or None -> float32 [B, H, Q, Dh]. The two batched products run
    in float32 on purpose: a bf16 result would round the scores before the softmax. They are a
    small share of the FLOPs at translation lengths (4*T*d per token against 24*d^2).
    """
    depth = query.shape[-1]
    query = query.astype(jnp.float32) * np.float32(depth ** -0.5)
    spec = "bhqd,bhdk->bhqk" if depth_major_key else "bhqd,bhkd->bhqk"
    scores = jnp.einsum(spec, query, key.astype(jnp.float32))
    if mask is not None:
        scores = jnp.where(mask, scores, np.float32(mask_value(jnp.float32)))
    probs = jax.nn.softmax(scores, axis=-1)
    if not deterministic and dropout_rate > 0.0:
        probs = dropout(probs, dropout_rate, dropout_rng)
    return jnp.einsum("bhqk,bhkd->bhqd", probs, value.astype(jnp.float32))


def update_cache(cache: dict[str, Array], key: Array, value: Array,
                 positions: Array) -> dict[str, Array]:
    """Write one step's key/value [B, H, 1, Dh] at ``positions`` int32[B] of the cache
    (key [B, H, Dh, max_len], value [B, H, max_len, Dh]): a scatter of B*H rows or columns, not
    a rewrite of the whole cache."""
    rows = jnp.arange(positions.shape[0])
    key = cache["key"].at[rows, :, :, positions].set(key[:, :, 0].astype(cache["key"].dtype))
    value = cache["value"].at[rows, :, positions].set(value[:, :, 0].astype(cache["value"].dtype))
    return {"key": key, "value": value}


def heads_major(x: Array) -> Array:
    """[B, L, H, Dh] -> [B, H, L, Dh]."""
    return jnp.swapaxes(x, 1, 2)


def depth_major(x: Array) -> Array:
    """[B, L, H, Dh] -> [B, H, Dh, L] (the layout of keys that are read many times)."""
    return jnp.transpose(x, (0, 2, 3, 1))


def group_beams(x: Array, beams: int) -> Array:
    """One-query rows [B*K, 1, H, Dh] -> the K queries of each sentence, [B, H, K, Dh]."""
    return jnp.transpose(x.reshape(x.shape[0] // beams, beams, *x.shape[2:]), (0, 2, 1, 3))


def ungroup_beams(x: Array) -> Array:
    """[B, H, K, Dh] -> one-query rows [B*K, 1, H, Dh] (inverse of ``group_beams``)."""
    batch, heads, beams, depth = x.shape
    return jnp.transpose(x, (0, 2, 1, 3)).reshape(batch * beams, 1, heads, depth)


def update_slot_cache(cache: dict[str, Array], key: Array, value: Array,
                      positions: Array) -> dict[str, Array]:
    """Write one step's key/value [B, H, K, Dh] of every slot at ``positions`` int32[B] of the
    slot cache (key [B, H, Dh, K, L], value [B, H, K, L, Dh]; in place)."""
    rows = jnp.arange(positions.shape[0])
    key = jnp.swapaxes(key, 2, 3).astype(cache["key"].dtype)                 # [B, H, Dh, K]
    return {"key": cache["key"].at[rows, :, :, :, positions].set(key),
            "value": cache["value"].at[rows, :, :, positions].set(
                value.astype(cache["value"].dtype))}


class MultiHeadAttention(nn.Module):
    """Multi-head attention with fused projections over float32 [B, L, d_model] inputs.

    Self-attention (``cross=False``) projects queries, keys and values with one fused kernel
    [D, 3, H, Dh]; cross-attention (``cross=True``) has a query kernel [D, H, Dh] and a fused
    key/value kernel [D, 2, H, Dh]. The output kernel is [H, Dh, D].
    """

    num_heads: int
    d_model: int
    policy: Policy = Policy()
    cross: bool = False
    dropout_rate: float = 0.0

    def setup(self):
        if self.d_model % self.num_heads:
            raise ValueError(
                f"d_model {self.d_model} is not divisible by num_heads {self.num_heads}")
        shape = (self.num_heads, self.d_model // self.num_heads)
        if self.cross:
            self.query = Dense(shape, policy=self.policy)
            self.key_value = Dense((2, *shape), policy=self.policy, batch_axes=(0,))
        else:
            self.qkv = Dense((3, *shape), policy=self.policy, batch_axes=(0,))
        self.out = Dense(self.d_model, policy=self.policy, contract=2)

    def project_kv(self, inputs_kv: Array,
                   depth_major_key: bool = False) -> tuple[Array, Array]:
        """Cross-attention keys and values of float32[B, S, D] in compute dtype: keys
        [B, H, S, Dh] (``depth_major_key``, for decoding: [B, H, Dh, S]), values [B, H, S, Dh]."""
        kv = self.key_value(inputs_kv).astype(self.policy.compute_dtype)  # [B, S, 2, H, Dh]
        key = kv[..., 0, :, :]
        return (depth_major(key) if depth_major_key else heads_major(key),
                heads_major(kv[..., 1, :, :]))

    def __call__(self, inputs_q: Array, mask: Array | None = None, *,
                 kv: tuple[Array, Array] | None = None, cache: dict[str, Array] | None = None,
                 positions: Array | None = None, beams: int | None = None,
                 depth_major_key: bool = False,
                 deterministic: bool = True) -> Array | tuple[Array, dict[str, Array]]:
        """Attend ``inputs_q`` float32[N, Q, D]; returns float32[N, Q, D].

        Self-attention takes keys from ``inputs_q`` under ``mask``; with ``cache`` and
        ``positions`` int32[N] (one decoding step, Q == 1) the new key/value is written at
        ``positions``, keys up to it are visible, and ``(out, cache)`` is returned.
        Cross-attention takes ``kv`` from ``project_kv`` (``depth_major_key``: projected
        with it) and ``mask`` over its keys.

        ``beams=K`` (one beam-search step, Q == 1, N = B*K rows): queries are grouped by
        sentence; cross-attention ``kv`` holds one copy per sentence; the self-attention cache
        is the slot layout, ``positions`` is int32[B] and ``mask`` the step's
        ``ancestry_mask`` (module docstring).
        """
        compute = self.policy.compute_dtype
        depth_major_key = depth_major_key or cache is not None
        if self.cross:
            query = self.query(inputs_q)
            key, value = kv
        else:
            qkv = self.qkv(inputs_q)  # f32 [N, Q, 3, H, Dh]
            query = qkv[..., 0, :, :]
            # Keys/values are rounded to the compute dtype as the decoding cache stores them.
            key, value = (qkv[..., i, :, :].astype(compute) for i in (1, 2))
            if cache is not None and beams is not None:
                cache = update_slot_cache(cache, group_beams(key, beams),
                                          group_beams(value, beams), positions)
                key = cache["key"].reshape(*cache["key"].shape[:3], -1)      # [B, H, Dh, K*L]
                value = cache["value"].reshape(*cache["value"].shape[:2], -1,
                                               cache["value"].shape[-1])     # [B, H, K*L, Dh]
            elif cache is not None:
                cache = update_cache(cache, heads_major(key), heads_major(value), positions)
                key, value = cache["key"], cache["value"]
                mask = position_mask(positions, key.shape[-1])
            else:
                key, value = heads_major(key), heads_major(value)
        dropout_rng = None
        if not deterministic and self.dropout_rate > 0.0:
            dropout_rng = self.make_rng("dropout")
        query = heads_major(query) if beams is None else group_beams(query, beams)
        out = dot_product_attention(query, key, value, mask, depth_major_key=depth_major_key,
                                    dropout_rate=self.dropout_rate, dropout_rng=dropout_rng,
                                    deterministic=deterministic)
        out = self.out(heads_major(out) if beams is None else ungroup_beams(out))  # [N, Q, D]
        return out if cache is None else (out, cache)

    def init_cache(self, batch_size: int, max_length: int) -> dict[str, Array]:
        """Empty self-attention cache in compute dtype: key zeros [B, H, Dh, max_length],
        value zeros [B, H, max_length, Dh]."""
        depth = self.d_model // self.num_heads
        key = jnp.zeros((batch_size, self.num_heads, depth, max_length), self.policy.compute_dtype)
        return {"key": key, "value": jnp.swapaxes(key, 2, 3)}
