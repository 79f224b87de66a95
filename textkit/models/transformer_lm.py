"""Decoder-only Transformer language model under a precision policy.

A ``LanguageModel`` of the decoding contract (``textkit.decoding.contract``), through
``model.apply({"params": p}, ..., method=...)``::

    logits, state = model.apply(v, tokens)                          # f32 [B, T, V], None
    state = model.initial_state(batch_size)                         # None
    cache = model.apply(v, batch_size, max_length, method="init_cache")
    log_probs, cache = model.apply(v, cache, tokens, method="decode_step")  # f32 [B, V]

Windows and decoding caches hold at most ``config.max_len`` positions (a ``ValueError`` at trace
time beyond it); token ids must lie in ``[0, vocab_size)``.

``state`` exists for parity with the recurrent LMs and is always None: a window attends causally
within itself only. Layers are ``textkit.models.transformer.TransformerLayer`` without
cross-attention; precision follows ``textkit.models.layers``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from textkit.models.attention import causal_mask
from textkit.models.beam_cache import beam_cache, beam_step_inputs, reorder_beams, resize_cache
from textkit.models.layers import (
    Dense,
    Dropout,
    Embed,
    LayerNorm,
    PositionEmbedding,
    log_softmax,
)
from textkit.models.registry import register_preset
from textkit.models.transformer import TransformerLayer, TransformerStackConfig, layer_options

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class TransformerLMConfig(TransformerStackConfig):
    """Hyper-parameters of ``TransformerLM`` (frozen, hashable): the stack fields (learned
    positions by default), the vocabulary and the layer count."""

    tiny: ClassVar[Mapping[str, Any]] = {"d_model": 16, "num_heads": 2, "d_ff": 32,
                                         "num_layers": 1}

    positions: str = "learned"
    vocab_size: int = 32000
    num_layers: int = 6


class TransformerLM(nn.Module):
    """Causal Transformer LM; see the module docstring for the contract."""

    config: TransformerLMConfig

    def setup(self):
        c = self.config
        self.embed = Embed(c.vocab_size, c.d_model, c.policy)
        self.positions = PositionEmbedding(c.positions, c.max_len, c.d_model, c.policy)
        self.layers = [TransformerLayer(**layer_options(c), name=f"layer_{i}")
                       for i in range(c.num_layers)]
        if c.pre_norm:
            self.final_norm = LayerNorm(c.policy)
        if not c.tie_output:
            self.output = Dense(c.vocab_size, policy=c.policy, use_bias=False,
                                dtype=jnp.float32)
        self.drop = Dropout(c.dropout)

    def _logits(self, x: Array) -> Array:
        if self.config.pre_norm:
            x = self.final_norm(x)
        return self.embed.attend(x) if self.config.tie_output else self.output(x)

    def initial_state(self, batch_size: int) -> None:
        """No state between windows: None for any ``batch_size``."""
        del batch_size

    def __call__(self, tokens: Array, state: None = None, *,
                 deterministic: bool = True) -> tuple[Array, None]:
        """tokens int32[B, T] -> (logits float32[B, T, V], None)."""
        if state is not None:
            raise ValueError("TransformerLM carries no state between windows; pass state=None")
        self.config.check_length(tokens.shape[1], "tokens")
        positions = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
        x = self.drop(self.positions(self.embed(tokens), positions), deterministic=deterministic)
        mask = causal_mask(tokens.shape[1])
        for layer in self.layers:
            x = layer(x, mask, deterministic=deterministic)
        return self._logits(x), None

    def init_cache(self, batch_size: int, max_length: int) -> dict[str, Any]:
        """Empty cache: ``{"position": int32[B], "layers": tuple of {"key": [B, H, Dh,
        max_length], "value": [B, H, max_length, Dh]} in the compute dtype}}``
        (``textkit.models.attention``)."""
        self.config.check_length(max_length, "the decoding cache (max_length)")
        return {"position": jnp.zeros((batch_size,), jnp.int32),
                "layers": tuple(layer.init_cache(batch_size, max_length)
                                for layer in self.layers)}

    def decode_step(self, cache: dict[str, Any], tokens: Array) -> tuple[Array, dict[str, Any]]:
        """tokens int32[N] at ``cache["position"]`` -> (log_probs float32[N, V], cache).

        N = B for an ``init_cache`` cache, B*K for a ``beam_cache`` one (``Transformer``)."""
        position = cache["position"]                                             # [B]
        beams, slots = beam_step_inputs(cache)
        row_position = position if beams is None else jnp.repeat(position, beams)  # [N]
        x = self.positions(self.embed(tokens[:, None]), row_position[:, None])
        new_layers = []
        for layer, layer_cache in zip(self.layers, cache["layers"]):
            x, layer_cache = layer(x, slots.get("mask"), cache=layer_cache, positions=position,
                                   beams=beams)
            new_layers.append(layer_cache)
        log_probs = log_softmax(self._logits(x)[:, 0])
        new_cache = {**cache, "position": position + 1, "layers": tuple(new_layers)}
        if beams is not None:
            new_cache["ancestry"] = slots["ancestry"]
        return log_probs, new_cache

    def beam_cache(self, cache: dict[str, Any], beam_size: int) -> dict[str, Any]:
        """Row cache -> beam-search cache (as ``Transformer.beam_cache``)."""
        return beam_cache(cache, beam_size, _own, _replace)

    def reorder_beams(self, cache: dict[str, Any], parent: Array) -> dict[str, Any]:
        """Beam cache after hypotheses took parents int32[B, K] (the ancestry table moves)."""
        return reorder_beams(cache, parent)

    def resize_cache(self, cache: dict[str, Any], length: int) -> dict[str, Any]:
        """Cache holding ``length`` positions (as ``Transformer.resize_cache``)."""
        self.config.check_length(length, "the decoding cache (length)")
        return resize_cache(cache, length, _own, _replace)


def _own(layer_cache: dict[str, Array]) -> dict[str, Array]:
    return layer_cache


def _replace(layer_cache: dict[str, Array], new: dict[str, Array]) -> dict[str, Array]:
    return new


register_preset("transformer_lm_base", "language_model", TransformerLM, TransformerLMConfig,
                d_model=512, num_heads=8, d_ff=2048, num_layers=6)
register_preset("transformer_lm_small", "language_model", TransformerLM, TransformerLMConfig,
                d_model=256, num_heads=4, d_ff=1024, num_layers=4, max_len=512)
register_preset("transformer_lm_tiny", "language_model", TransformerLM, TransformerLMConfig,
                d_model=64, num_heads=4, d_ff=256, num_layers=2, max_len=256)
