"""Sentence embeddings from an ``Encoder``: the pooling, dense and normalisation modules of
sentence-transformers, computed as it computes them.

``SentenceEncoder(SentenceEncoderConfig.for_encoder(encoder_config, pooling=("mean",),
normalize=True))`` runs the wrapped ``Encoder`` (its params under ``"encoder"``), pools its
last hidden states over the real tokens, applies the dense layers in order (params
``dense_0``, ``dense_1``, ...) and optionally L2-normalises::

    out = model.apply({"params": params}, input_ids=ids, attention_mask=mask)
    out["sentence_embedding"]          # float32 [B, len(pooling) * D] (or the last dense width)

The encoder's own outputs come along (``last_hidden_state`` [B, T, D] for the bare model).
Pooling modes (concatenated in the order given): ``cls`` (the first real token), ``mean``,
``max``, ``mean_sqrt_len_tokens`` (sum / sqrt(length)), ``weightedmean`` (position weights
1, 2, ... from the first real token), ``lasttoken`` (the last real token). Pooling, dense
activations and the normalisation run in float32; the dense matmuls in the policy's compute
dtype. Rows whose mask is all zeros pool to zeros (``max``: -inf), as in sentence-transformers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from textkit.models.config import ModelConfig
from textkit.models.encoder import Encoder, EncoderConfig
from textkit.models.layers import Dense

__all__ = ["DENSE_ACTIVATIONS", "POOLING_MODES", "SentenceDense", "SentenceEncoder",
           "SentenceEncoderConfig", "pool"]

Array = jax.Array

POOLING_MODES = ("cls", "mean", "max", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
DENSE_ACTIVATIONS: dict[str, Callable[[Array], Array]] = {
    "identity": lambda x: x, "tanh": jnp.tanh, "relu": jax.nn.relu,
    "gelu": lambda x: jax.nn.gelu(x, approximate=False), "sigmoid": jax.nn.sigmoid,
    "silu": jax.nn.silu}
"""Activations a dense layer may have (torch's Identity, Tanh, ReLU, GELU, Sigmoid, SiLU)."""


@dataclasses.dataclass(frozen=True)
class SentenceDense:
    """One dense layer after pooling: ``activation(x @ kernel + bias)`` to ``features``."""

    features: int
    bias: bool = True
    activation: str = "tanh"


@dataclasses.dataclass(frozen=True)
class SentenceEncoderConfig(ModelConfig):
    """An ``EncoderConfig`` and what turns its hidden states into one vector per text.

    ``pooling``: modes of ``POOLING_MODES``, concatenated; ``dense``: layers applied in order;
    ``normalize``: L2-normalise the result; ``max_seq_length``: tokens per text the embedding
    API keeps (None: the encoder's ``max_positions``). ``pad_id`` / ``policy`` are the
    encoder's (``for_encoder`` sets them).
    """

    encoder: EncoderConfig
    pooling: tuple[str, ...] = ("mean",)
    dense: tuple[SentenceDense, ...] = ()
    normalize: bool = False
    max_seq_length: int | None = None

    @classmethod
    def for_encoder(cls, encoder: EncoderConfig, **fields: Any) -> SentenceEncoderConfig:
        """The config over ``encoder`` with its ``pad_id`` and ``policy``."""
        return cls(encoder=encoder, pad_id=encoder.pad_id, policy=encoder.policy, **fields)

    def _validate(self) -> None:
        name = type(self).__name__
        if isinstance(self.pooling, str):
            object.__setattr__(self, "pooling", (self.pooling,))
        object.__setattr__(self, "dense", tuple(self.dense))
        if not self.pooling or any(m not in POOLING_MODES for m in self.pooling):
            raise ValueError(f"{name}.pooling={self.pooling!r}; expected modes of "
                             f"{POOLING_MODES}")
        for layer in self.dense:
            if layer.activation not in DENSE_ACTIVATIONS:
                raise ValueError(f"{name}: dense activation {layer.activation!r}; expected one "
                                 f"of {sorted(DENSE_ACTIVATIONS)}")
        if (self.pad_id, self.policy) != (self.encoder.pad_id, self.encoder.policy):
            raise ValueError(f"{name}: pad_id / policy differ from the encoder's (build it "
                             f"with SentenceEncoderConfig.for_encoder)")
        limit = self.encoder.max_positions
        if self.max_seq_length is not None and not 0 < self.max_seq_length <= limit:
            raise ValueError(f"{name}.max_seq_length={self.max_seq_length}; the encoder takes "
                             f"1 to {limit} tokens")

    @property
    def max_positions(self) -> int:
        """Longest input row: the encoder's."""
        return self.encoder.max_positions

    @property
    def input_vocab_size(self) -> int:
        """Input ids lie in ``[0, encoder.vocab_size)``."""
        return self.encoder.vocab_size

    @property
    def output_vocab_size(self) -> None:
        """A sentence encoder predicts no tokens."""
        return None

    @property
    def length_limit(self) -> int:
        """Tokens per text the embedding API keeps: ``max_seq_length`` or ``max_positions``."""
        return self.max_seq_length or self.max_positions


def pool(hidden: Array, attention_mask: Array, mode: str) -> Array:
    """sentence-transformers' pooling ``mode``: hidden [B, T, D], attention_mask int/bool
    [B, T] (1 at real tokens) -> float32 [B, D]."""
    h = hidden.astype(jnp.float32)
    mask = (attention_mask != 0).astype(jnp.float32)                            # [B, T]
    rows = jnp.arange(h.shape[0])
    if mode == "cls":
        return h[rows, jnp.argmax(mask, axis=1)]
    if mode == "max":
        return jnp.max(jnp.where(mask[..., None] > 0, h, -jnp.inf), axis=1)
    if mode == "lasttoken":
        last = h.shape[1] - 1 - jnp.argmax(mask[:, ::-1], axis=1)
        last = jnp.where(mask.any(axis=1), last, 0)
        return (h * mask[..., None])[rows, last]
    if mode == "weightedmean":
        weights = jnp.arange(1, h.shape[1] + 1, dtype=jnp.float32)[None, :]
        mask = mask * (weights - jnp.argmax(mask, axis=1)[:, None])
    total = jnp.einsum("btd,bt->bd", h, mask, precision="highest")
    count = jnp.maximum(mask.sum(axis=1, keepdims=True), 1e-9)
    return total / (jnp.sqrt(count) if mode == "mean_sqrt_len_tokens" else count)


class SentenceEncoder(nn.Module):
    """An ``Encoder`` followed by pooling, dense layers and normalisation (module docstring)."""

    config: SentenceEncoderConfig

    def setup(self):
        c = self.config
        self.encoder = Encoder(c.encoder)
        self.dense = [Dense(layer.features, policy=c.policy, use_bias=layer.bias,
                            name=f"dense_{i}") for i, layer in enumerate(c.dense)]

    def __call__(self, input_ids: Array, attention_mask: Array | None = None,
                 token_type_ids: Array | None = None, position_ids: Array | None = None, *,
                 deterministic: bool = True) -> dict[str, Any]:
        """input_ids int[B, T] (the ``Encoder``'s inputs) -> the encoder's outputs and
        ``sentence_embedding`` float32 [B, E]."""
        c = self.config
        if attention_mask is None:
            attention_mask = jnp.ones(input_ids.shape, jnp.int32)
        bare = c.encoder.head == "model"
        out = self.encoder(input_ids, attention_mask, token_type_ids, position_ids,
                           deterministic=deterministic, output_hidden_states=not bare)
        hidden = out["last_hidden_state"] if bare else out["hidden_states"][-1]
        x = jnp.concatenate([pool(hidden, attention_mask, m) for m in c.pooling], axis=-1)
        for layer, spec in zip(self.dense, c.dense):
            x = DENSE_ACTIVATIONS[spec.activation](layer(x))
        if c.normalize:
            norm = jnp.sqrt(jnp.sum(x * x, axis=-1, keepdims=True))
            x = x / jnp.maximum(norm, 1e-12)
        return {**out, "sentence_embedding": x}
