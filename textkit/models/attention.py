"""Multi-head dot-product attention with padding/causal masks and a key/value cache.

Masks are boolean and broadcastable to [B, heads, queries, keys] (True = may attend). The
projections are compute-dtype matmuls with float32 results; the score and value products run in
float32 (see ``dot_product_attention``; 16-bit attention on a GPU takes the fused
``jax.nn.dot_product_attention`` instead, by the rule of ``fused_attention_applies``); scores
are masked with a finite fill (``textkit.precision.mask_value(float32)``, so an all-masked
dummy row gives a uniform distribution, never NaN) and soft-maxed in float32.

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

Options of the pretrained encoder families, on the one module (full sequences, no cache):
``use_bias`` (ModernBERT's bias-free projections), ``rotary_theta`` (rotary positions on
queries and keys, ``rotary``), ``window`` (local attention: query i sees keys j with
``|i - j| <= window``) and ``relative`` (DeBERTa's disentangled relative attention: a
``Disentangled`` spec; the layer is handed the shared relative-position embeddings and adds the
content->position and position->content scores of ``disentangled_bias`` to the content scores).
"""

from __future__ import annotations

import dataclasses
from typing import Any

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


def window_mask(length: int, window: int, queries: Array | None = None) -> Array:
    """Local-attention band bool[1, 1, length, length]: True where ``|i - j| <= window``;
    with ``queries`` int[N, Q] (the query rows' positions) bool[N, 1, Q, length]."""
    index = np.arange(length)
    if queries is not None:
        return (jnp.abs(queries[:, :, None] - index) <= window)[:, None]
    return jnp.asarray(np.abs(index[:, None] - index[None, :]) <= window)[None, None]


def take_rows(x: Array, rows: Array) -> Array:
    """The rows of x [N, T, ...] at ``rows`` int[N, Q] -> [N, Q, ...]."""
    index = rows.reshape(*rows.shape, *(1,) * (x.ndim - 2))
    return jnp.take_along_axis(x, index, axis=1)


def rope_frequencies(depth: int, theta: float,
                     scaling: tuple[tuple[str, Any], ...] = ()) -> np.ndarray:
    """Rotary inverse frequencies float32 [depth / 2] as transformers computes them:
    ``theta ** (-2i / depth)``, divided by ``factor`` for "linear", and Llama-3's band-wise
    rescaling (long wavelengths by ``factor``, short ones kept, a smooth blend between) for
    "llama3"."""
    inverse = np.float32(1.0) / (np.float32(theta) ** (
        np.arange(0, depth, 2, dtype=np.int64).astype(np.float32) / np.float32(depth)))
    options = dict(scaling)
    kind = options.get("rope_type", "default")
    if kind == "linear":
        return (inverse / np.float32(options["factor"])).astype(np.float32)
    if kind == "llama3":
        factor = float(options["factor"])
        low, high = float(options["low_freq_factor"]), float(options["high_freq_factor"])
        old = float(options["original_max_position_embeddings"])
        wavelength = 2 * np.pi / inverse
        scaled = np.where(wavelength > old / low, inverse / factor, inverse)
        smooth = (old / wavelength - low) / (high - low)
        blended = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelength >= old / high) & (wavelength <= old / low)
        return np.where(medium, blended, scaled).astype(np.float32)
    return inverse.astype(np.float32)


def rotary(x: Array, positions: Array, inverse: np.ndarray) -> Array:
    """The one rotary position embedding (rotate-half layout) of x float[N, T, H, Dh] at
    positions int[N, T] with inverse frequencies float32 [Dh / 2] (``rope_frequencies``) ->
    float32 [N, T, H, Dh]."""
    angles = positions.astype(jnp.float32)[..., None] * inverse             # [N, T, Dh/2]
    angles = jnp.concatenate([angles, angles], axis=-1)[:, :, None, :]      # [N, T, 1, Dh]
    x = x.astype(jnp.float32)
    first, second = jnp.split(x, 2, axis=-1)
    return x * jnp.cos(angles) + jnp.concatenate([-second, first], axis=-1) * jnp.sin(angles)


@dataclasses.dataclass(frozen=True)
class Disentangled:
    """DeBERTa's disentangled relative attention (frozen, hashable).

    ``kinds``: the score terms added to content->content, "c2p" (content->position) and / or
    "p2c" (position->content); every term is scaled by ``1 / sqrt(Dh * (1 + len(kinds)))``.
    Relative distances ``i - j`` are bucketed (``relative_positions``: exact below
    ``buckets // 2``, logarithmic up to ``max_distance``; ``buckets`` <= 0: unbucketed) and
    read from a table of ``2 * span`` embeddings. ``share_key``: the positions are projected with
    the layer's own query / key projections (DeBERTa-v3), else with separate ``pos_query`` /
    ``pos_key`` projections.
    """

    kinds: tuple[str, ...] = ("p2c", "c2p")
    buckets: int = 256
    max_distance: int = 512
    share_key: bool = True

    @property
    def span(self) -> int:
        """Half the number of relative-position embeddings."""
        return self.buckets if self.buckets > 0 else self.max_distance

    @property
    def scale(self) -> float:
        """Multiplier of the content and relative scores, divided by sqrt(Dh)."""
        return (1 + len(self.kinds)) ** -0.5


def relative_positions(length: int, buckets: int, max_distance: int) -> np.ndarray:
    """DeBERTa's relative positions ``i - j`` int32[length, length], log-bucketed when
    ``buckets`` and ``max_distance`` are positive: distances below ``buckets // 2`` stay,
    longer ones become ``sign * (mid + ceil(log(|d| / mid) / log((max_distance - 1) / mid)
    * (mid - 1)))`` (float32 arithmetic, as transformers computes it)."""
    index = np.arange(length)
    rel = index[:, None] - index[None, :]
    if buckets <= 0 or max_distance <= 0:
        return rel.astype(np.int32)
    mid = buckets // 2
    inside = (rel < mid) & (rel > -mid)
    distance = np.where(inside, mid - 1, np.abs(rel)).astype(np.float32)
    ratio = np.log(distance / np.float32(mid)) / np.log(np.float32((max_distance - 1) / mid))
    log_pos = np.ceil(ratio * np.float32(mid - 1)) + np.float32(mid)
    return np.where(distance <= mid, rel, log_pos * np.sign(rel)).astype(np.int32)


def disentangled_bias(query: Array, key: Array, pos_query: Array | None, pos_key: Array | None,
                      spec: Disentangled, queries: Array | None = None) -> Array:
    """DeBERTa's relative score terms (unscaled by sqrt(Dh); ``Disentangled.scale`` applied).

    query float32 [B, H, Q, Dh], key float32 [B, H, T, Dh] (Q == T unless ``queries``
    int[B, Q] gives the query rows' positions); pos_query / pos_key float32 [H, 2 * span, Dh]
    (the projected relative-position embeddings; None where ``spec.kinds`` does not use them)
    -> float32 [B, H, Q, T]: c2p ``q_i . pos_key[d(i, j)]`` plus p2c ``k_j . pos_query[d'(j, i)]``
    with ``d = clip(rel(i, j) + span)`` and ``d' = clip(-rel(j, i) + span)`` over
    ``[0, 2 * span)``.
    """
    length, span = key.shape[2], spec.span
    rel = relative_positions(length, spec.buckets, spec.max_distance)
    scale = np.float32(spec.scale / np.sqrt(query.shape[-1]))
    shape = (*query.shape[:3], length)
    bias = jnp.zeros(shape, jnp.float32)
    if "c2p" in spec.kinds:
        rows = rel if queries is None else jnp.asarray(rel)[queries][:, None]   # [B, 1, Q, T]
        index = jnp.clip(rows + span, 0, 2 * span - 1)
        scores = jnp.einsum("bhqd,hrd->bhqr", query, pos_key)
        bias = bias + jnp.take_along_axis(scores, jnp.broadcast_to(index, shape), axis=-1)
    if "p2c" in spec.kinds:
        scores = jnp.einsum("bhkd,hrd->bhkr", key, pos_query)
        if queries is None:
            index = np.clip(-rel + span, 0, 2 * span - 1)
            gathered = jnp.take_along_axis(scores, jnp.broadcast_to(index, shape), axis=-1)
            bias = bias + jnp.swapaxes(gathered, -1, -2)
        else:
            rows = jnp.asarray(rel.T)[queries][:, None]                        # [B, 1, Q, T]
            index = jnp.clip(-rows + span, 0, 2 * span - 1)
            bias = bias + jnp.take_along_axis(jnp.swapaxes(scores, -1, -2),
                                              jnp.broadcast_to(index, shape), axis=-2)
    return bias * scale


FUSED_BACKENDS = ("gpu",)
"""Backends whose 16-bit attention goes through ``jax.nn.dot_product_attention`` (cuDNN's fused
kernel where it applies); XLA:CPU keeps the explicit float32 path, which it runs faster."""


def fused_attention_applies(query: Array, key: Array, *, bias: Array | None,
                            depth_major_key: bool, dropping: bool) -> bool:
    """The declared rule for the fused path: a backend of ``FUSED_BACKENDS``, keys and values in
    a 16-bit compute dtype, more than one query (one-query decoding steps read a cache whose
    scores are one row), heads-major keys, no additive score bias (DeBERTa's relative terms)
    and no attention dropout."""
    return (jax.default_backend() in FUSED_BACKENDS
            and key.dtype in (jnp.bfloat16, jnp.float16) and query.shape[2] > 1
            and bias is None and not depth_major_key and not dropping)


def fused_attention(query: Array, key: Array, value: Array, mask: Array | None,
                    scale: float) -> Array:
    """``jax.nn.dot_product_attention`` on heads-major inputs: query [B, H, Q, Dh], key and
    value [B, H, K, Dh] in the compute dtype, mask bool broadcastable to [B, H, Q, K] ->
    float32 [B, H, Q, Dh]. Scores are ``q . k * scale``; the softmax runs in float32 inside
    the kernel."""
    dtype = key.dtype
    out = jax.nn.dot_product_attention(
        jnp.swapaxes(query, 1, 2).astype(dtype), jnp.swapaxes(key, 1, 2),    # [B, Q|K, H, Dh]
        jnp.swapaxes(value, 1, 2).astype(dtype), mask=mask,
        scale=float(scale))                                                  # [B, Q, H, Dh]
    return jnp.swapaxes(out, 1, 2).astype(jnp.float32)                      # [B, H, Q, Dh]


def dot_product_attention(query: Array, key: Array, value: Array, mask: Array | None, *,
                          depth_major_key: bool = False, dropout_rate: float = 0.0,
                          dropout_rng: Array | None = None, deterministic: bool = True,
                          scale: float | None = None, bias: Array | None = None) -> Array:
    """Scaled dot-product attention, heads-major.

    query [B, H, Q, Dh], key [B, H, K, Dh] (``depth_major_key``: [B, H, Dh, K]), value
    [B, H, K, Dh] (any float dtype; projections arrive from compute-dtype matmuls), mask bool
    broadcastable to [B, H, Q, K] or None -> float32 [B, H, Q, Dh]. Scores are
    ``q . k * scale`` (``scale`` None: 1 / sqrt(Dh)) plus ``bias`` (float32 broadcastable to
    [B, H, Q, K], e.g. ``disentangled_bias``).

    Where ``fused_attention_applies`` (16-bit keys on a GPU), ``fused_attention`` computes it
    without materialising the scores. Elsewhere the two batched products run in float32 on
    purpose: a bf16 result would round the scores before the softmax. They are a small share
    of the FLOPs at translation lengths (4*T*d per token against 24*d^2).
    """
    dropping = not deterministic and dropout_rate > 0.0
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    if fused_attention_applies(query, key, bias=bias, depth_major_key=depth_major_key,
                               dropping=dropping):
        return fused_attention(query, key, value, mask, scale)
    query = query.astype(jnp.float32)
    if scale != 1.0:
        query = query * np.float32(scale)
    spec = "bhqd,bhdk->bhqk" if depth_major_key else "bhqd,bhkd->bhqk"
    scores = jnp.einsum(spec, query, key.astype(jnp.float32))
    if bias is not None:
        scores = scores + bias
    if mask is not None:
        scores = jnp.where(mask, scores, np.float32(mask_value(jnp.float32)))
    probs = jax.nn.softmax(scores, axis=-1)
    if dropping:
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
    key/value kernel [D, 2, H, Dh]. The output kernel is [H, Dh, D]. ``head_dim``: Dh (None:
    d_model / H); ``scaled=False``: scores are ``q . k`` without the 1/sqrt(Dh) (T5's).
    ``use_bias``, ``rotary_theta``, ``window`` and ``relative`` are the encoder families'
    options (module docstring); ``relative`` without ``share_key`` adds ``pos_query`` /
    ``pos_key`` kernels [D, H, Dh].
    """

    num_heads: int
    d_model: int
    policy: Policy = Policy()
    cross: bool = False
    dropout_rate: float = 0.0
    use_bias: bool = True
    rotary_theta: float | None = None
    window: int | None = None
    relative: Disentangled | None = None
    head_dim: int | None = None
    scaled: bool = True

    @property
    def depth(self) -> int:
        """Dh, the size of each head."""
        return self.head_dim or self.d_model // self.num_heads

    def setup(self):
        if self.head_dim is None and self.d_model % self.num_heads:
            raise ValueError(
                f"d_model {self.d_model} is not divisible by num_heads {self.num_heads}")
        shape = (self.num_heads, self.depth)
        dense = dict(policy=self.policy, use_bias=self.use_bias)
        if self.cross:
            self.query = Dense(shape, **dense)
            self.key_value = Dense((2, *shape), batch_axes=(0,), **dense)
        else:
            self.qkv = Dense((3, *shape), batch_axes=(0,), **dense)
        self.out = Dense(self.d_model, contract=2, **dense)
        relative = self.relative
        if relative is not None and not relative.share_key:
            if "p2c" in relative.kinds:
                self.pos_query = Dense(shape, **dense)
            if "c2p" in relative.kinds:
                self.pos_key = Dense(shape, **dense)

    def project_kv(self, inputs_kv: Array,
                   depth_major_key: bool = False) -> tuple[Array, Array]:
        """Cross-attention keys and values of float32[B, S, D] in compute dtype: keys
        [B, H, S, Dh] (``depth_major_key``, for decoding: [B, H, Dh, S]), values [B, H, S, Dh]."""
        kv = self.key_value(inputs_kv).astype(self.policy.compute_dtype)  # [B, S, 2, H, Dh]
        key = kv[..., 0, :, :]
        return (depth_major(key) if depth_major_key else heads_major(key),
                heads_major(kv[..., 1, :, :]))

    def _relative_projections(self, embeddings: Array) -> tuple[Array | None, Array | None]:
        """(pos_query, pos_key) float32 [H, 2 * span, Dh] of the relative-position embeddings
        float32 [2 * span, D] (None for a kind ``relative`` does not use)."""
        kinds = self.relative.kinds
        if self.relative.share_key:
            qkv = jnp.transpose(self.qkv(embeddings), (1, 2, 0, 3))      # [3, H, 2S, Dh]
            return qkv[0], qkv[1]
        project = lambda dense: jnp.swapaxes(dense(embeddings), 0, 1)  # noqa: E731
        return (project(self.pos_query) if "p2c" in kinds else None,
                project(self.pos_key) if "c2p" in kinds else None)

    def __call__(self, inputs_q: Array, mask: Array | None = None, *,
                 kv: tuple[Array, Array] | None = None, cache: dict[str, Array] | None = None,
                 positions: Array | None = None, beams: int | None = None,
                 depth_major_key: bool = False, deterministic: bool = True,
                 relative_embeddings: Array | None = None,
                 rotary_positions: Array | None = None,
                 queries: Array | None = None,
                 bias: Array | None = None) -> Array | tuple[Array, dict[str, Array]]:
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

        The encoder options take full sequences (no cache): ``rotary_positions`` int[N, Q] are
        the rotary positions (default ``0 .. Q-1``); ``relative_embeddings`` float32
        [2 * span, D] are the relative-position embeddings that ``relative`` needs.
        ``queries`` int[N, Q'] (self-attention without cache): only the rows of ``inputs_q`` at
        these positions are queries (keys and values come from every row; ``mask`` is over
        those queries, broadcastable to [N, H, Q', Q]) -> float32[N, Q', D].

        ``bias``: float32 scores added before the softmax, broadcastable to [N, H, Q, K]
        (a beam step: [B, H, 1, K * L] over the slot cache), e.g. T5's relative position bias.
        """
        if self.cross:
            query, (key, value) = self.query(inputs_q), kv
        elif cache is not None:
            query, key, value, mask, cache = self._cached_self(inputs_q, mask, cache,
                                                               positions, beams)
            depth_major_key = True
        else:
            query, key, value, mask, relative_bias = self._full_self(
                inputs_q, mask, relative_embeddings, rotary_positions, queries)
            if relative_bias is not None:
                bias = relative_bias if bias is None else bias + relative_bias
        out = self._attend(query, key, value, mask, bias, beams, depth_major_key,
                           deterministic)
        return out if cache is None else (out, cache)

    def _full_self(self, inputs_q: Array, mask: Array | None, relative_embeddings: Array | None,
                   rotary_positions: Array | None, queries: Array | None) -> tuple:
        """Self-attention over a full sequence: (query float32 [N, Q, H, Dh], key and value
        [N, H, L, Dh] in the compute dtype, mask, DeBERTa's relative score bias or None)."""
        length = inputs_q.shape[1]
        if queries is None:
            qkv = self.qkv(inputs_q)                                   # f32 [N, Q, 3, H, Dh]
            query, key, value = (qkv[..., i, :, :] for i in range(3))
        else:
            query = self.qkv(take_rows(inputs_q, queries), part=slice(0, 1))[..., 0, :, :]
            kv = self.qkv(inputs_q, part=slice(1, 3))                  # f32 [N, L, 2, H, Dh]
            key, value = kv[..., 0, :, :], kv[..., 1, :, :]
        if self.rotary_theta is not None:
            if rotary_positions is None:
                rotary_positions = jnp.broadcast_to(jnp.arange(length), inputs_q.shape[:2])
            inverse = rope_frequencies(query.shape[-1], self.rotary_theta)
            query = rotary(query, rotary_positions if queries is None
                           else take_rows(rotary_positions, queries), inverse)
            key = rotary(key, rotary_positions, inverse)
        if self.window is not None:
            band = window_mask(length, self.window, queries)
            mask = band if mask is None else mask & band
        bias = None
        if self.relative is not None:
            pos_query, pos_key = self._relative_projections(relative_embeddings)
            bias = disentangled_bias(heads_major(query), heads_major(key), pos_query, pos_key,
                                     self.relative, queries)
        # Keys/values are rounded to the compute dtype as the decoding cache stores them.
        compute = self.policy.compute_dtype
        return (query, heads_major(key.astype(compute)), heads_major(value.astype(compute)),
                mask, bias)

    def _cached_self(self, inputs_q: Array, mask: Array | None, cache: dict[str, Array],
                     positions: Array, beams: int | None) -> tuple:
        """One decoding step's self-attention: its key/value written into the cache; (query
        float32 [N, 1, H, Dh], the cache's keys (depth-major) and values, mask, new cache)."""
        compute = self.policy.compute_dtype
        qkv = self.qkv(inputs_q)                                       # f32 [N, 1, 3, H, Dh]
        query, key, value = (qkv[..., i, :, :] for i in range(3))
        key, value = key.astype(compute), value.astype(compute)
        if beams is not None:
            cache = update_slot_cache(cache, group_beams(key, beams), group_beams(value, beams),
                                      positions)
            key = cache["key"].reshape(*cache["key"].shape[:3], -1)          # [B, H, Dh, K*L]
            value = cache["value"].reshape(*cache["value"].shape[:2], -1,
                                           cache["value"].shape[-1])         # [B, H, K*L, Dh]
            return query, key, value, mask, cache
        cache = update_cache(cache, heads_major(key), heads_major(value), positions)
        mask = position_mask(positions, cache["key"].shape[-1])
        return query, cache["key"], cache["value"], mask, cache

    def _attend(self, query: Array, key: Array, value: Array, mask: Array | None,
                bias: Array | None, beams: int | None, depth_major_key: bool,
                deterministic: bool) -> Array:
        """Scores, softmax and the output projection: query float32 [N, Q, H, Dh] -> float32
        [N, Q, D]."""
        dropout_rng = None
        if not deterministic and self.dropout_rate > 0.0:
            dropout_rng = self.make_rng("dropout")
        if not self.scaled:
            scale = 1.0
        elif self.relative is not None:
            scale = self.relative.scale * self.depth ** -0.5
        else:
            scale = None
        query = heads_major(query) if beams is None else group_beams(query, beams)
        out = dot_product_attention(query, key, value, mask, depth_major_key=depth_major_key,
                                    dropout_rate=self.dropout_rate, dropout_rng=dropout_rng,
                                    deterministic=deterministic, bias=bias, scale=scale)
        return self.out(heads_major(out) if beams is None else ungroup_beams(out))

    def init_cache(self, batch_size: int, max_length: int) -> dict[str, Array]:
        """Empty self-attention cache in compute dtype: key zeros [B, H, Dh, max_length],
        value zeros [B, H, max_length, Dh]."""
        key = jnp.zeros((batch_size, self.num_heads, self.depth, max_length),
                        self.policy.compute_dtype)
        return {"key": key, "value": jnp.swapaxes(key, 2, 3)}
