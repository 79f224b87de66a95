"""A minimal, plain flax.linen Transformer: the baseline ``train_step.py`` compares against.

Written the way most flax users would (in the style of the flax WMT example): ``nn.Embed``,
``nn.MultiHeadDotProductAttention``, ``nn.Dense`` and ``nn.LayerNorm`` with ``dtype`` set to the
compute dtype, pre-norm layers, sinusoidal positions, a shared embedding used for the tied
output logits, and ``optax.softmax_cross_entropy_with_integer_labels`` for the loss.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax


@dataclasses.dataclass(frozen=True)
class ReferenceConfig:
    vocab_size: int = 32000
    d_model: int = 512
    num_heads: int = 8
    d_ff: int = 2048
    num_encoder_layers: int = 6
    num_decoder_layers: int = 6
    dropout: float = 0.1
    max_len: int = 256
    pad_id: int = 1
    dtype: Any = jnp.float32


def _sinusoids(length: int, dim: int) -> np.ndarray:
    half = dim // 2
    freq = np.exp(-np.log(10000.0) * np.arange(half) / max(half - 1, 1))
    angles = np.arange(length)[:, None] * freq[None]
    return np.concatenate([np.sin(angles), np.cos(angles)], 1).astype(np.float32)


class Mlp(nn.Module):
    config: ReferenceConfig

    @nn.compact
    def __call__(self, x, deterministic):
        c = self.config
        h = nn.relu(nn.Dense(c.d_ff, dtype=c.dtype)(x))
        h = nn.Dropout(c.dropout)(h, deterministic=deterministic)
        return nn.Dense(c.d_model, dtype=c.dtype)(h)


class Block(nn.Module):
    config: ReferenceConfig
    cross: bool = False

    @nn.compact
    def __call__(self, x, mask, memory=None, memory_mask=None, deterministic=True):
        c = self.config

        def attention():
            return nn.MultiHeadDotProductAttention(num_heads=c.num_heads, dtype=c.dtype,
                                                   dropout_rate=0.0, deterministic=deterministic)

        drop = nn.Dropout(c.dropout)
        h = nn.LayerNorm(dtype=c.dtype)(x)
        x = x + drop(attention()(h, h, mask=mask), deterministic=deterministic)
        if self.cross:
            h = nn.LayerNorm(dtype=c.dtype)(x)
            x = x + drop(attention()(h, memory, mask=memory_mask), deterministic=deterministic)
        h = nn.LayerNorm(dtype=c.dtype)(x)
        return x + drop(Mlp(c)(h, deterministic), deterministic=deterministic)


class ReferenceTransformer(nn.Module):
    """``(src int32[B, S], tgt_input int32[B, T]) -> logits [B, T, V]``."""

    config: ReferenceConfig

    @nn.compact
    def __call__(self, src, tgt, deterministic=True):
        c = self.config
        embed = nn.Embed(c.vocab_size, c.d_model, dtype=c.dtype,
                         embedding_init=nn.initializers.normal(stddev=c.d_model ** -0.5))
        positions = jnp.asarray(_sinusoids(c.max_len, c.d_model))
        scale = np.sqrt(c.d_model)

        src_mask = nn.make_attention_mask(src != c.pad_id, src != c.pad_id)
        x = embed(src) * scale + positions[: src.shape[1]]
        x = nn.Dropout(c.dropout)(x, deterministic=deterministic)
        for _ in range(c.num_encoder_layers):
            x = Block(c)(x, src_mask, deterministic=deterministic)
        memory = nn.LayerNorm(dtype=c.dtype)(x)

        causal = nn.make_causal_mask(tgt)
        cross_mask = nn.make_attention_mask(tgt != c.pad_id, src != c.pad_id)
        y = embed(tgt) * scale + positions[: tgt.shape[1]]
        y = nn.Dropout(c.dropout)(y, deterministic=deterministic)
        for _ in range(c.num_decoder_layers):
            y = Block(c, cross=True)(y, causal, memory, cross_mask, deterministic=deterministic)
        y = nn.LayerNorm(dtype=c.dtype)(y)
        return embed.attend(y).astype(jnp.float32)


def make_reference_train_step(model: ReferenceTransformer, optimizer: optax.GradientTransformation):
    """Plain jitted step: ``(params, opt_state, batch, rng) -> (params, opt_state, loss)``."""

    def loss_fn(params, batch, rng):
        logits = model.apply({"params": params}, batch["src_tokens"], batch["tgt_input"],
                             deterministic=False, rngs={"dropout": rng})
        weights = (batch["tgt_output"] != model.config.pad_id).astype(jnp.float32)
        losses = optax.softmax_cross_entropy_with_integer_labels(logits, batch["tgt_output"])
        return (losses * weights).sum() / weights.sum()

    def step(params, opt_state, batch, rng):
        loss, grads = jax.value_and_grad(loss_fn)(params, batch, rng)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return jax.jit(step, donate_argnums=(0, 1))
