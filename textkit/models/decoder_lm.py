"""One configurable decoder-only Transformer: GPT-2, Llama (Llama-2/3, TinyLlama, SmolLM),
Mistral, Qwen2, Qwen3 and Gemma are settings of ``DecoderLMConfig``, not modules of their own.

What varies between the families is a field each: the norm (``norm`` layer / rms, ``norm_offset``
1 for Gemma's ``1 + w``), the positions (``learned`` for GPT-2, ``rotary`` with
``rope_theta`` and ``rope_scaling`` for the others: "linear" and Llama-3's "llama3"), grouped-query
attention (``num_kv_heads``), biases (``qkv_bias``: Qwen2 and GPT-2, ``out_bias``, ``mlp_bias``),
Qwen3's per-head ``qk_norm``, Mistral's ``sliding_window``, Gemma's ``scale_embeddings`` and the
gated MLP (``gated_mlp``: ``act(gate) * up``), tied or untied output embeddings.

Inputs of different lengths share a batch by padding with a key-validity mask: each row keeps its
own positions (0 at its first real token), pads are never attended to, so a padded row's outputs
equal those of the row alone (tested against transformers on left- and right-padded batches)::

    logits = model.apply(v, tokens, mask)                            # f32 [B, T, V]
    cache = model.apply(v, batch_size, max_length, method="init_cache")
    cache = model.apply(v, cache, tokens, mask, method="prefill")    # one pass over [B, P]
    log_probs, cache = model.apply(v, cache, tokens, method="decode_step")   # f32 [N, V]
    logits, cache = model.apply(v, cache, tokens, method="decode_logits")    # f32 [N, V]
    logits, cache = model.apply(v, cache, tokens, method="decode_logits_own_slots")

The cache holds, per layer, keys and values [B, KVH, S, Dh] in the compute dtype, and per row
``valid`` bool[B, S] (slots holding a real token), ``position`` int32[B] (the next token's
position) and ``index`` int32[B] (the next slot written, the same for every row: prompts are
left-padded so that every row's next token goes to the same slot; ``decode_logits_own_slots``
writes each row at its own ``index``, for a serving engine whose rows start at different times).
Every leaf has leading axis B, so the decoders of ``textkit.decoding`` tile and reorder it for
beams as any cache.

Precision follows ``textkit.models.layers``: compute-dtype matmuls with float32 results; norms,
rotary positions, softmax and logits in float32.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from textkit.models.attention import dot_product_attention, rope_frequencies, rotary
from textkit.models.config import ModelConfig
from textkit.models.layers import (
    ACTIVATIONS,
    Dense,
    Dropout,
    Embed,
    FeedForward,
    RMSNorm,
    log_softmax,
    make_norm,
)
from textkit.models.registry import register_preset

Array = jax.Array
ROPE_TYPES = ("default", "linear", "llama3")


@dataclasses.dataclass(frozen=True)
class DecoderLMConfig(ModelConfig):
    """Hyper-parameters of ``DecoderLM`` (frozen, hashable; see the module docstring).

    ``rope_scaling``: ``(("rope_type", "llama3"), ("factor", 8.0), ...)``, the sorted items of
    transformers' ``rope_scaling`` dict (a tuple so that the config hashes); empty: none.
    ``architecture``: the checkpoint family (``config.json``'s ``model_type``) it was read as.
    """

    tiny: ClassVar[Mapping[str, Any]] = {"hidden_size": 16, "num_heads": 2, "num_kv_heads": 1,
                                         "intermediate_size": 32, "num_layers": 1}
    _rates = ("dropout", "attention_dropout")
    _choices = {"norm": ("rms", "layer"), "positions": ("rotary", "learned"),
                "activation": tuple(ACTIVATIONS)}

    architecture: str = "llama"
    vocab_size: int = 32000
    hidden_size: int = 256
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int | None = None
    head_dim: int | None = None
    intermediate_size: int = 1024
    activation: str = "silu"
    gated_mlp: bool = True
    norm: str = "rms"
    norm_epsilon: float = 1e-6
    norm_offset: float = 0.0
    positions: str = "rotary"
    max_position_embeddings: int = 2048
    rope_theta: float = 10000.0
    rope_scaling: tuple[tuple[str, Any], ...] = ()
    qkv_bias: bool = False
    out_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    sliding_window: int | None = None
    tie_embeddings: bool = True
    scale_embeddings: bool = False
    dropout: float = 0.0
    attention_dropout: float = 0.0

    def _validate(self) -> None:
        if self.num_heads % self.kv_heads:
            raise ValueError(f"num_heads={self.num_heads} is not a multiple of "
                             f"num_kv_heads={self.kv_heads}")
        if self.head_dim is None and self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size={self.hidden_size} is not divisible by "
                             f"num_heads={self.num_heads}; set head_dim")
        rope = dict(self.rope_scaling)
        if rope.get("rope_type", "default") not in ROPE_TYPES:
            raise ValueError(f"rope_type={rope.get('rope_type')!r}; textkit has {ROPE_TYPES}")
        if self.sliding_window is not None and self.sliding_window < 1:
            raise ValueError(f"sliding_window={self.sliding_window}; expected None or >= 1")

    @property
    def kv_heads(self) -> int:
        """Key/value heads (``num_kv_heads``, else ``num_heads``)."""
        return self.num_kv_heads or self.num_heads

    @property
    def depth(self) -> int:
        """Dimension of one head (``head_dim``, else hidden_size / num_heads)."""
        return self.head_dim or self.hidden_size // self.num_heads

    @property
    def max_positions(self) -> int | None:
        return self.max_position_embeddings


def _norm(config: DecoderLMConfig, name: str) -> nn.Module:
    return make_norm(config.norm, config.policy, config.norm_epsilon,
                     offset=config.norm_offset, name=name)


def attention_mask(query_slots: Array, key_slots: Array, key_valid: Array,
                   window: int | None) -> Array:
    """bool[B, 1, 1, Q, S]: query at slot q may see key slot s when s is a real token, s <= q
    and (with ``window``) q - s < window. query_slots int[Q] or int[B, Q], key_slots int[S],
    key_valid bool[B, S]."""
    q = query_slots[..., :, None]                                               # [(B,) Q, 1]
    allowed = key_slots <= q
    if window is not None:
        allowed &= q - key_slots < window
    allowed = jnp.broadcast_to(allowed, (key_valid.shape[0], *allowed.shape[-2:]))
    return (allowed & key_valid[:, None, :])[:, None, None]                     # [B,1,1,Q,S]


class DecoderAttention(nn.Module):
    """Grouped-query self-attention: one fused projection [D, H + 2 KVH, Dh] (queries, then
    keys, then values), rotary or no positions, optional per-head q/k RMS norms; the G = H / KVH
    query heads of a key head attend together, through the one attention function of
    ``textkit.models.attention`` (scores and softmax in float32)."""

    config: DecoderLMConfig

    def setup(self):
        c = self.config
        self.qkv = Dense((c.num_heads + 2 * c.kv_heads, c.depth), policy=c.policy,
                         use_bias=c.qkv_bias)
        self.out = Dense(c.hidden_size, contract=2, policy=c.policy, use_bias=c.out_bias)
        if c.qk_norm:
            self.query_norm = RMSNorm(c.policy, c.norm_epsilon)
            self.key_norm = RMSNorm(c.policy, c.norm_epsilon)

    def __call__(self, x: Array, positions: Array, mask: Array, cache: dict | None = None,
                 index: Array | None = None, *, deterministic: bool = True,
                 own_slots: bool = False):
        """x float32[B, T, D], positions int32[B, T], mask bool[B, 1, 1, T, S] -> float32
        [B, T, D] (and the cache with this call's keys/values written at slots ``index`` ..
        ``index + T`` when ``cache`` is given; S is then the cache length, else T).
        ``own_slots`` (T = 1): row b writes at its own slot ``index[b]``."""
        c = self.config
        heads, kv_heads, depth = c.num_heads, c.kv_heads, c.depth
        qkv = self.qkv(x)                                                       # [B,T,H+2KV,Dh]
        query, key, value = jnp.split(qkv, [heads, heads + kv_heads], axis=2)
        if c.qk_norm:
            query, key = self.query_norm(query), self.key_norm(key)
        if c.positions == "rotary":
            inverse = rope_frequencies(depth, c.rope_theta, c.rope_scaling)
            query = rotary(query, positions, inverse)
            key = rotary(key, positions, inverse)
        compute = c.policy.compute_dtype
        key = jnp.swapaxes(key, 1, 2).astype(compute)                           # [B, KV, T, Dh]
        value = jnp.swapaxes(value, 1, 2).astype(compute)
        if cache is not None and own_slots:
            rows = jnp.arange(key.shape[0])
            cache = {"key": cache["key"].at[rows, :, index].set(key[:, :, 0]),
                     "value": cache["value"].at[rows, :, index].set(value[:, :, 0])}
            key, value = cache["key"], cache["value"]                           # [B, KV, S, Dh]
        elif cache is not None:
            start = (0, 0, index[0], 0)
            cache = {"key": jax.lax.dynamic_update_slice(cache["key"], key, start),
                     "value": jax.lax.dynamic_update_slice(cache["value"], value, start)}
            key, value = cache["key"], cache["value"]                           # [B, KV, S, Dh]
        batch, length = query.shape[:2]
        groups = heads // kv_heads
        # the G query heads of a key head are one group of G*T queries: [B, KV, G*T, Dh]
        query = jnp.transpose(query.reshape(batch, length, kv_heads, groups, depth),
                              (0, 2, 3, 1, 4)).reshape(batch, kv_heads, groups * length, depth)
        mask = jnp.broadcast_to(mask, (batch, 1, groups, length, mask.shape[-1])).reshape(
            batch, 1, groups * length, mask.shape[-1])                          # [B,1,G*T,S]
        dropout_rng = None
        if not deterministic and c.attention_dropout > 0.0:
            dropout_rng = self.make_rng("dropout")
        out = dot_product_attention(query, key, value, mask,
                                    dropout_rate=c.attention_dropout, dropout_rng=dropout_rng,
                                    deterministic=deterministic)               # [B,KV,G*T,Dh]
        out = jnp.transpose(out.reshape(batch, kv_heads, groups, length, depth),
                            (0, 3, 1, 2, 4)).reshape(batch, length, heads, depth)
        out = self.out(out)                                                     # [B, T, D]
        return out if cache is None else (out, cache)


class DecoderLayer(nn.Module):
    """Pre-norm block: ``x + attention(norm(x))``, then ``x + mlp(norm(x))``."""

    config: DecoderLMConfig

    def setup(self):
        c = self.config
        self.attention_norm = _norm(c, "attention_norm")
        self.attention = DecoderAttention(c)
        self.mlp_norm = _norm(c, "mlp_norm")
        self.mlp = FeedForward(c.intermediate_size, policy=c.policy, activation=c.activation,
                               gated=c.gated_mlp, use_bias=c.mlp_bias)
        self.drop = Dropout(c.dropout)

    def __call__(self, x: Array, positions: Array, mask: Array, cache: dict | None = None,
                 index: Array | None = None, *, deterministic: bool = True,
                 own_slots: bool = False):
        """x float32[B, T, D] -> float32[B, T, D] (and the layer's cache, when given)."""
        found = self.attention(self.attention_norm(x), positions, mask, cache, index,
                               deterministic=deterministic, own_slots=own_slots)
        h, cache = found if cache is not None else (found, None)
        x = x + self.drop(h, deterministic=deterministic)
        x = x + self.drop(self.mlp(self.mlp_norm(x), deterministic=deterministic),
                          deterministic=deterministic)
        return x if cache is None else (x, cache)


def row_positions(mask: Array) -> Array:
    """Positions int32[B, T] of a padded batch with key-validity mask bool[B, T]: 0 at each
    row's first real token, counting real tokens only (pads get the position before theirs,
    0 at the front; their outputs are never used)."""
    return jnp.maximum(jnp.cumsum(mask.astype(jnp.int32), axis=1) - 1, 0)


class DecoderLM(nn.Module):
    """Decoder-only causal LM; see the module docstring for the contract."""

    config: DecoderLMConfig

    def setup(self):
        c = self.config
        self.embed = Embed(c.vocab_size, c.hidden_size, c.policy,
                           scale_by_sqrt_dim=c.scale_embeddings)
        if c.positions == "learned":
            self.position_embed = Embed(c.max_position_embeddings, c.hidden_size, c.policy,
                                        scale_by_sqrt_dim=False)
        self.layers = [DecoderLayer(c, name=f"layer_{i}") for i in range(c.num_layers)]
        self.final_norm = _norm(c, "final_norm")
        if not c.tie_embeddings:
            self.lm_head = Dense(c.vocab_size, policy=c.policy, use_bias=False,
                                 dtype=jnp.float32)
        self.drop = Dropout(c.dropout)

    def _inputs(self, tokens: Array, positions: Array, deterministic: bool) -> Array:
        x = self.embed(tokens)                                                  # [B, T, D]
        if self.config.positions == "learned":
            x = x + self.position_embed(positions)
        return self.drop(x, deterministic=deterministic)

    def _logits(self, x: Array) -> Array:
        x = self.final_norm(x)
        return self.embed.attend(x) if self.config.tie_embeddings else self.lm_head(x)

    def hidden_states(self, tokens: Array, mask: Array | None = None, *,
                      deterministic: bool = True) -> Array:
        """tokens int32[B, T], mask bool[B, T] (True at real tokens; None: all) -> the final
        layer's output float32 [B, T, D], before the final norm."""
        c = self.config
        c.check_length(tokens.shape[1], "tokens")
        if mask is None:
            mask = jnp.ones(tokens.shape, bool)
        positions = row_positions(mask)
        slots = jnp.arange(tokens.shape[1])
        attend = attention_mask(slots, slots, mask, c.sliding_window)
        x = self._inputs(tokens, positions, deterministic)
        for layer in self.layers:
            x = layer(x, positions, attend, deterministic=deterministic)
        return x

    def __call__(self, tokens: Array, mask: Array | None = None, *,
                 deterministic: bool = True) -> Array:
        """tokens int32[B, T], mask bool[B, T] (True at real tokens, left or right padding;
        None: all real) -> logits float32 [B, T, V] (each row as if alone)."""
        return self._logits(self.hidden_states(tokens, mask, deterministic=deterministic))

    def init_cache(self, batch_size: int, max_length: int) -> dict[str, Any]:
        """Empty cache of ``max_length`` slots (see the module docstring). Slots are not
        positions (left padding takes slots only); callers keep each row's positions within
        ``max_positions`` (``Generator`` refuses or cuts a prompt that would pass it)."""
        c = self.config
        kv = jnp.zeros((batch_size, c.kv_heads, max_length, c.depth), c.policy.compute_dtype)
        return {"layers": tuple({"key": kv, "value": kv} for _ in range(c.num_layers)),
                "valid": jnp.zeros((batch_size, max_length), bool),
                "position": jnp.zeros((batch_size,), jnp.int32),
                "index": jnp.zeros((batch_size,), jnp.int32)}

    def _extend(self, cache: dict[str, Any], tokens: Array, mask: Array,
                own_slots: bool = False) -> tuple[Array, dict[str, Any]]:
        """Feed tokens int32[B, T] with validity mask bool[B, T] at the cache's next slots
        (``own_slots``, T = 1: each row at its own next slot): (final hidden states float32
        [B, T, D], cache)."""
        c = self.config
        index = cache["index"]                                                  # [B]
        length = tokens.shape[1]
        positions = cache["position"][:, None] + row_positions(mask)           # [B, T]
        if own_slots:
            valid = cache["valid"].at[jnp.arange(index.shape[0]), index].set(mask[:, 0])
            query_slots = index[:, None]                                        # [B, 1]
        else:
            valid = jax.lax.dynamic_update_slice(cache["valid"], mask, (0, index[0]))
            query_slots = index[0] + jnp.arange(length)                         # [T]
        attend = attention_mask(query_slots, jnp.arange(valid.shape[1]), valid,
                                c.sliding_window)
        x = self._inputs(tokens, positions, True)
        layers = []
        for layer, layer_cache in zip(self.layers, cache["layers"]):
            x, layer_cache = layer(x, positions, attend, layer_cache, index,
                                   own_slots=own_slots)
            layers.append(layer_cache)
        count = mask.sum(axis=1).astype(jnp.int32)
        return x, {"layers": tuple(layers), "valid": valid,
                   "position": cache["position"] + count, "index": index + length}

    def prefill(self, cache: dict[str, Any], tokens: Array, mask: Array) -> dict[str, Any]:
        """Feed a padded block of prompts tokens int32[B, P] (mask bool[B, P], True at real
        tokens; left padding keeps every row's next slot the same) in one parallel pass."""
        return self._extend(cache, tokens, mask)[1]

    def decode_logits(self, cache: dict[str, Any],
                      tokens: Array) -> tuple[Array, dict[str, Any]]:
        """tokens int32[N] -> (next-token logits float32 [N, V], cache one slot on)."""
        x, cache = self._extend(cache, tokens[:, None], jnp.ones((tokens.shape[0], 1), bool))
        return self._logits(x[:, 0]), cache

    def decode_logits_own_slots(self, cache: dict[str, Any],
                                tokens: Array) -> tuple[Array, dict[str, Any]]:
        """As ``decode_logits``, each row b writing at its own slot ``cache["index"][b]``
        (rows that started at different times share one cache: continuous batching,
        ``textkit.serve.engine``)."""
        x, cache = self._extend(cache, tokens[:, None], jnp.ones((tokens.shape[0], 1), bool),
                                own_slots=True)
        return self._logits(x[:, 0]), cache

    def decode_step(self, cache: dict[str, Any],
                    tokens: Array) -> tuple[Array, dict[str, Any]]:
        """tokens int32[N] -> (log_probs float32 [N, V], cache): the decoding contract."""
        logits, cache = self.decode_logits(cache, tokens)
        return log_softmax(logits), cache


register_preset("llama_tiny", "causal_lm", DecoderLM, DecoderLMConfig,
                hidden_size=64, num_heads=4, num_kv_heads=2, intermediate_size=128,
                num_layers=2, vocab_size=512, max_position_embeddings=256)
register_preset("gpt2_small", "causal_lm", DecoderLM, DecoderLMConfig,
                architecture="gpt2", vocab_size=50257, hidden_size=768, num_layers=12,
                num_heads=12, intermediate_size=3072, activation="gelu_new", gated_mlp=False,
                norm="layer", norm_epsilon=1e-5, positions="learned",
                max_position_embeddings=1024, qkv_bias=True, out_bias=True, mlp_bias=True)
