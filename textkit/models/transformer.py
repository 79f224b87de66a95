"""Transformer encoder-decoder (Vaswani et al., 2017) under a precision policy.

A ``Seq2SeqModel`` of the decoding contract (``textkit.decoding.contract``), all through
``model.apply({"params": p}, ..., method=...)``::

    logits = model.apply(v, src_tokens, tgt_input)                # f32 [B, T, V]
    encoded = model.apply(v, src_tokens, method="encode")          # {"memory", "src_mask"}
    cache = model.apply(v, encoded, src_tokens, max_length, method="init_cache")
    log_probs, cache = model.apply(v, cache, tokens, method="decode_step")  # f32 [B, V]

Sources, targets and decoding caches hold at most ``config.max_len`` positions: a longer static
length is a ``ValueError`` at trace time (``ModelConfig.check_length``). Token ids must lie in
``[0, vocab size)`` (see ``textkit.models.layers.lookup``).

Source padding (``pad_id``) is masked out of every attention over the source. The decoder's
self-attention is causal only: targets are right-padded, so a real position never sees a pad.
Residual stream, layer norm, softmax and logits are float32; matmuls run in the policy's compute
dtype with float32 accumulation (see ``textkit.models.layers``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from textkit.models.attention import (
    Disentangled,
    MultiHeadAttention,
    causal_mask,
    padding_mask,
    take_rows,
)
from textkit.models.beam_cache import beam_cache, beam_step_inputs, reorder_beams, resize_cache
from textkit.models.config import ModelConfig
from textkit.models.layers import (
    ACTIVATIONS,
    NORMS,
    POSITION_KINDS,
    Dense,
    Dropout,
    Embed,
    FeedForward,
    PositionEmbedding,
    log_softmax,
    make_norm,
)
from textkit.models.registry import register_preset
from textkit.models.relative_bias import RelativePositionBias
from textkit.precision import Policy

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class TransformerStackConfig(ModelConfig):
    """Layer-stack fields shared by ``TransformerConfig`` and ``TransformerLMConfig``.

    ``tie_output`` computes logits with the (target) embedding instead of a separate kernel.
    ``pre_norm`` puts layer norm before each sub-layer (plus a final norm) instead of after the
    residual add. ``positions`` is "sinusoidal", "sinusoidal_marian" (Marian's frequencies) or
    "learned" (table of ``max_len`` rows). ``activation`` names the feed-forward non-linearity
    (``layers.ACTIVATIONS``: relu, gelu, gelu_new, swish/silu); ``layer_norm_epsilon`` is every
    layer norm's epsilon (1e-5 in PyTorch/Marian checkpoints).
    """

    _rates = ("dropout", "attention_dropout")
    _choices = {"positions": POSITION_KINDS, "activation": tuple(ACTIVATIONS)}

    tie_output: bool = True
    d_model: int = 512
    num_heads: int = 8
    d_ff: int = 2048
    dropout: float = 0.1
    attention_dropout: float = 0.0
    pre_norm: bool = True
    positions: str = "sinusoidal"
    max_len: int = 1024
    activation: str = "relu"
    layer_norm_epsilon: float = 1e-6

    def _validate(self) -> None:
        if self.max_len < 1:
            raise ValueError(f"{type(self).__name__}.max_len={self.max_len}; expected >= 1")

    @property
    def max_positions(self) -> int:
        """``max_len``: the longest source, target or decoding cache the model accepts."""
        return self.max_len


ARCHITECTURES = ("transformer", "marian", "bart", "mbart", "m2m_100", "t5", "mt5")
"""``TransformerConfig.architecture``: textkit's own, or the checkpoint family it was read
from (``textkit.pretrained.seq2seq`` writes it back in that family's layout)."""


@dataclasses.dataclass(frozen=True)
class TransformerConfig(TransformerStackConfig):
    """Hyper-parameters of ``Transformer`` (frozen, hashable): every encoder-decoder family as
    settings, as ``DecoderLMConfig`` is for the decoder-only ones.

    ``architecture``: "transformer" (textkit's) or the checkpoint family (``ARCHITECTURES``).
    Vocabularies and layer counts; ``share_embeddings`` uses one table for source and target
    (needs equal vocab sizes). The axes the families vary on: ``pre_norm`` (from the stack
    fields), ``final_norm`` (a norm after each stack; None: as ``pre_norm``),
    ``embedding_norm`` (a norm after the embeddings and positions, BART's),
    ``positions`` and ``position_offset`` (position p reads table row p + offset),
    ``scale_embedding`` (token embeddings times sqrt(d_model)), ``attention_bias`` /
    ``ff_bias`` / ``norm_bias``, ``activation``. ``final_logits_bias`` adds a bias [V] to the
    logits (Marian's, also with tied output); ``decoder_start_id`` is the first decoder input
    when decoding (None: the target tokenizer's ``bos_id``; Marian starts with its pad id).
    T5's axes: ``norm`` ("layer" or "rms"), ``head_dim`` (None: d_model / heads),
    ``scaled_attention`` (False: no 1/sqrt(head_dim)), ``gated_ff`` (a gated feed-forward,
    ``act(wi_0 x) * wi_1 x``), ``relative_buckets`` (> 0: a bucketed relative position bias
    per stack, ``relative_bias``, up to ``relative_max_distance``; positions "none" then) and
    ``scale_decoder_output`` (the decoder's output times d_model^-0.5 before the head, T5
    v1.0's tied head).
    """

    tiny: ClassVar[Mapping[str, Any]] = {"d_model": 16, "num_heads": 2, "d_ff": 32,
                                         "num_encoder_layers": 1, "num_decoder_layers": 1}
    _choices = {**TransformerStackConfig._choices, "architecture": ARCHITECTURES,
                "norm": NORMS}

    src_vocab_size: int = 32000
    tgt_vocab_size: int = 32000
    share_embeddings: bool = True
    num_encoder_layers: int = 6
    num_decoder_layers: int = 6
    scale_embedding: bool = True
    final_logits_bias: bool = False
    decoder_start_id: int | None = None
    architecture: str = "transformer"
    final_norm: bool | None = None
    embedding_norm: bool = False
    position_offset: int = 0
    attention_bias: bool = True
    ff_bias: bool = True
    norm_bias: bool = True
    norm: str = "layer"
    head_dim: int | None = None
    scaled_attention: bool = True
    gated_ff: bool = False
    relative_buckets: int = 0
    relative_max_distance: int = 128
    scale_decoder_output: bool = False

    @property
    def has_final_norm(self) -> bool:
        """Whether each stack ends with a norm (``final_norm``, else ``pre_norm``)."""
        return self.pre_norm if self.final_norm is None else self.final_norm

    def _validate(self) -> None:
        super()._validate()
        if self.position_offset < 0:
            raise ValueError(f"position_offset={self.position_offset}; expected >= 0")
        if self.relative_buckets < 0 or (self.relative_buckets and (
                self.relative_buckets < 4 or self.relative_max_distance < 2)):
            raise ValueError(f"relative_buckets={self.relative_buckets}, relative_max_distance="
                             f"{self.relative_max_distance}; expected 0 (none) or >= 4 buckets "
                             f"up to a distance >= 2")
        if self.head_dim is not None and self.head_dim < 1:
            raise ValueError(f"head_dim={self.head_dim}; expected >= 1 or None")
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError(
                f"share_embeddings needs src_vocab_size == tgt_vocab_size, got "
                f"{self.src_vocab_size} and {self.tgt_vocab_size}")


class TransformerLayer(nn.Module):
    """Self-attention (+ optional cross-attention) + feed-forward, pre- or post-norm.

    Used by the encoder (``cross=False``), the decoder (``cross=True``) and the decoder-only LM.
    Inputs and outputs are float32 [B, L, D].
    """

    d_model: int
    num_heads: int
    d_ff: int
    dropout: float = 0.0
    attention_dropout: float = 0.0
    pre_norm: bool = True
    cross: bool = False
    policy: Policy = Policy()
    activation: str = "relu"
    layer_norm_epsilon: float = 1e-6
    ff_dropout: float | None = None
    """Dropout between the feed-forward's two matmuls (None: ``dropout``; BERT-style encoders
    have none there)."""
    attention_bias: bool = True
    ff_bias: bool = True
    norm_bias: bool = True
    gated_ff: bool = False
    attention_norm: bool = True
    """False: no norm before the self-attention of a pre-norm layer (ModernBERT's first)."""
    rotary_theta: float | None = None
    window: int | None = None
    relative: Disentangled | None = None
    """Self-attention options (``attention.MultiHeadAttention``)."""
    head_dim: int | None = None
    scaled_attention: bool = True
    """Attention options of both attentions: the head size (None: d_model / heads) and
    whether scores are scaled by 1/sqrt(head size) (T5's are not)."""
    norm: str = "layer"
    """"layer" (``LayerNorm``) or "rms" (``RMSNorm``: no mean, no bias; T5's)."""

    def setup(self):
        attention = dict(num_heads=self.num_heads, d_model=self.d_model, policy=self.policy,
                         dropout_rate=self.attention_dropout, use_bias=self.attention_bias,
                         head_dim=self.head_dim, scaled=self.scaled_attention)
        self.self_attention = MultiHeadAttention(rotary_theta=self.rotary_theta,
                                                 window=self.window, relative=self.relative,
                                                 **attention)
        if self.attention_norm:
            self.self_norm = self._norm()
        if self.cross:
            self.cross_attention = MultiHeadAttention(cross=True, **attention)
            self.cross_norm = self._norm()
        ff_dropout = self.dropout if self.ff_dropout is None else self.ff_dropout
        self.feed_forward = FeedForward(self.d_ff, ff_dropout, self.policy, self.activation,
                                        gated=self.gated_ff, use_bias=self.ff_bias)
        self.ff_norm = self._norm()
        self.drop = Dropout(self.dropout)

    def _norm(self) -> nn.Module:
        return make_norm(self.norm, self.policy, self.layer_norm_epsilon, self.norm_bias)

    def _residual(self, x, sublayer, norm, deterministic, rows=None):
        """The sub-layer's residual block over x [B, L, D]; ``rows`` int[B, Q]: the sub-layer
        returns only those rows [B, Q, D], and so does the block."""
        skip = x if rows is None else take_rows(x, rows)
        if self.pre_norm:
            h = x if norm is None else norm(x)
            return skip + self.drop(sublayer(h), deterministic=deterministic)
        return norm(skip + self.drop(sublayer(x), deterministic=deterministic))

    def __call__(self, x: Array, mask: Array | None, *, memory_kv=None, memory_mask=None,
                 cache: dict[str, Array] | None = None, positions: Array | None = None,
                 beams: int | None = None, deterministic: bool = True,
                 relative_embeddings: Array | None = None,
                 rotary_positions: Array | None = None, queries: Array | None = None,
                 bias: Array | None = None):
        """Full sequence (``cache`` None) -> x; one decoding step -> (x, cache).

        ``memory_kv`` are this layer's cross-attention keys/values (``project_memory``; keys
        depth-major in a decoding step) and
        ``memory_mask`` bool[B, 1, 1, S] their padding mask. ``beams=K``: a beam-search step
        in the slot layout (``textkit.models.attention``), ``mask`` its ancestry mask.
        ``relative_embeddings`` / ``rotary_positions``: the self-attention's encoder options.
        ``queries`` int[B, Q] (full sequence, no cache): compute only the rows at these
        positions (keys and values from every row; ``mask`` over those queries) -> [B, Q, D].
        ``bias``: float32 self-attention scores added before the softmax (T5's relative
        position bias, ``relative_bias.RelativePositionBias``).
        """
        new_cache = None

        def self_attend(h):
            nonlocal new_cache
            if cache is None:
                return self.self_attention(h, mask, deterministic=deterministic,
                                           relative_embeddings=relative_embeddings,
                                           rotary_positions=rotary_positions, queries=queries,
                                           bias=bias)
            out, new_cache = self.self_attention(h, mask, cache=cache, positions=positions,
                                                 beams=beams, deterministic=deterministic,
                                                 bias=bias)
            return out

        x = self._residual(x, self_attend, self.self_norm if self.attention_norm else None,
                           deterministic, queries)
        if self.cross:
            x = self._residual(
                x, lambda h: self.cross_attention(h, memory_mask, kv=memory_kv, beams=beams,
                                                  depth_major_key=cache is not None,
                                                  deterministic=deterministic),
                self.cross_norm, deterministic)
        x = self._residual(x, lambda h: self.feed_forward(h, deterministic=deterministic),
                           self.ff_norm, deterministic)
        return x if cache is None else (x, new_cache)

    def project_memory(self, memory: Array, depth_major_key: bool = False) -> tuple[Array, Array]:
        """Cross-attention keys/values of ``memory`` f32[B, S, D] (compute dtype [B,H,S,Dh];
        ``depth_major_key``, for a decoding cache: keys [B,H,Dh,S])."""
        return self.cross_attention.project_kv(memory, depth_major_key)

    def init_cache(self, batch_size: int, max_length: int) -> dict[str, Array]:
        return self.self_attention.init_cache(batch_size, max_length)


LAYER_AXES = ("attention_bias", "ff_bias", "norm_bias", "norm", "head_dim", "scaled_attention",
              "gated_ff")
"""``TransformerConfig`` fields forwarded to every ``TransformerLayer`` under the same name."""


def layer_options(config: TransformerStackConfig) -> dict[str, Any]:
    """``TransformerLayer`` fields taken from a Transformer(LM) config: the stack fields and
    every axis of ``LAYER_AXES`` the config has."""
    return dict(d_model=config.d_model, num_heads=config.num_heads, d_ff=config.d_ff,
                dropout=config.dropout, attention_dropout=config.attention_dropout,
                pre_norm=config.pre_norm, policy=config.policy, activation=config.activation,
                layer_norm_epsilon=config.layer_norm_epsilon,
                **{axis: getattr(config, axis) for axis in LAYER_AXES if hasattr(config, axis)})


class Transformer(nn.Module):
    """Encoder-decoder Transformer; see the module docstring for the decoding contract."""

    config: TransformerConfig

    def setup(self):
        c = self.config
        self.src_embed = Embed(c.src_vocab_size, c.d_model, c.policy, c.scale_embedding)
        if not c.share_embeddings:
            self.tgt_embed = Embed(c.tgt_vocab_size, c.d_model, c.policy, c.scale_embedding)
        self.src_positions = PositionEmbedding(c.positions, c.max_len, c.d_model, c.policy,
                                               c.position_offset)
        self.tgt_positions = PositionEmbedding(c.positions, c.max_len, c.d_model, c.policy,
                                               c.position_offset)
        norm = lambda: make_norm(c.norm, c.policy, c.layer_norm_epsilon,  # noqa: E731
                                 c.norm_bias)
        if c.embedding_norm:
            self.src_embed_norm = norm()
            self.tgt_embed_norm = norm()
        if c.relative_buckets:
            relative = dict(num_heads=c.num_heads, buckets=c.relative_buckets,
                            max_distance=c.relative_max_distance, policy=c.policy)
            self.encoder_relative_bias = RelativePositionBias(bidirectional=True, **relative)
            self.decoder_relative_bias = RelativePositionBias(bidirectional=False, **relative)
        self.encoder_layers = [TransformerLayer(**layer_options(c), name=f"encoder_{i}")
                               for i in range(c.num_encoder_layers)]
        self.decoder_layers = [TransformerLayer(**layer_options(c), cross=True,
                                                name=f"decoder_{i}")
                               for i in range(c.num_decoder_layers)]
        if c.has_final_norm:
            self.encoder_norm = norm()
            self.decoder_norm = norm()
        if not c.tie_output:
            self.output = Dense(c.tgt_vocab_size, policy=c.policy, use_bias=False,
                                dtype=jnp.float32)
        if c.final_logits_bias:
            self.logits_bias = self.param("final_logits_bias", nn.initializers.zeros,
                                          (c.tgt_vocab_size,), c.policy.param_dtype)
        self.drop = Dropout(c.dropout)

    def _target_embed(self) -> Embed:
        return self.src_embed if self.config.share_embeddings else self.tgt_embed

    def _target_inputs(self, tokens: Array, positions: Array) -> Array:
        """The decoder's input vectors f32[B, T, D] of tokens int32[B, T] at positions
        int32[B, T]: embedded, positioned, normed (``embedding_norm``)."""
        x = self.tgt_positions(self._target_embed()(tokens), positions)
        return self.tgt_embed_norm(x) if self.config.embedding_norm else x

    def encode(self, src_tokens: Array, *, deterministic: bool = True) -> dict[str, Array]:
        """src_tokens int32[B, S] -> ``{"memory": [B, S, D] in the policy's output dtype,
        "src_mask": bool[B, S]}`` (the contract's ``Encoded``)."""
        c = self.config
        c.check_length(src_tokens.shape[1], "src_tokens")
        positions = jnp.broadcast_to(jnp.arange(src_tokens.shape[1]), src_tokens.shape)
        x = self.src_positions(self.src_embed(src_tokens), positions)
        if c.embedding_norm:
            x = self.src_embed_norm(x)
        x = self.drop(x, deterministic=deterministic)
        mask = padding_mask(src_tokens, c.pad_id)
        length = src_tokens.shape[1]
        bias = self.encoder_relative_bias(length, length) if c.relative_buckets else None
        for layer in self.encoder_layers:
            x = layer(x, mask, deterministic=deterministic, bias=bias)
        if c.has_final_norm:
            x = self.encoder_norm(x)
        return {"memory": x.astype(c.policy.output_dtype), "src_mask": src_tokens != c.pad_id}

    def _head_inputs(self, x: Array) -> Array:
        """The last decoder layer's output [N, T, D] as the head takes it: normed
        (``has_final_norm``), times d_model^-0.5 (``scale_decoder_output``)."""
        c = self.config
        if c.has_final_norm:
            x = self.decoder_norm(x)
        if c.scale_decoder_output:
            x = x * np.float32(c.d_model ** -0.5)
        return x

    def _logits(self, x: Array) -> Array:
        c = self.config
        x = self._head_inputs(x)
        logits = self._target_embed().attend(x) if c.tie_output else self.output(x)
        if c.final_logits_bias:
            logits = logits + self.logits_bias.astype(jnp.float32)
        return logits

    def decode(self, memory: Array, src_tokens: Array, tgt_input: Array, *,
               deterministic: bool = True) -> Array:
        """Teacher-forced decoder: tgt_input int32[B, T] -> logits float32[B, T, V]."""
        self.config.check_length(tgt_input.shape[1], "tgt_input")
        positions = jnp.broadcast_to(jnp.arange(tgt_input.shape[1]), tgt_input.shape)
        x = self._target_inputs(tgt_input, positions)
        x = self.drop(x, deterministic=deterministic)
        length = tgt_input.shape[1]
        self_mask = causal_mask(length)
        memory_mask = padding_mask(src_tokens, self.config.pad_id)
        bias = (self.decoder_relative_bias(length, length) if self.config.relative_buckets
                else None)
        for layer in self.decoder_layers:
            x = layer(x, self_mask, memory_kv=layer.project_memory(memory),
                      memory_mask=memory_mask, deterministic=deterministic, bias=bias)
        return self._logits(x)

    def __call__(self, src_tokens: Array, tgt_input: Array, *,
                 deterministic: bool = True) -> Array:
        """src_tokens int32[B, S], tgt_input int32[B, T] -> logits float32[B, T, V]."""
        memory = self.encode(src_tokens, deterministic=deterministic)["memory"]
        return self.decode(memory, src_tokens, tgt_input, deterministic=deterministic)

    def init_cache(self, memory: dict[str, Array], src_tokens: Array,
                   max_length: int) -> dict[str, Any]:
        """Decoding cache from ``encode``'s output; every leaf has leading axis B.

        ``{"position": int32[B], "memory_mask": bool[B, 1, 1, S], "layers": tuple of
        {"self": {"key": [B, H, Dh, max_length], "value": [B, H, max_length, Dh]},
        "memory_key": [B, H, Dh, S], "memory_value": [B, H, S, Dh]}}`` (compute dtype, keys
        depth-major: ``textkit.models.attention``; the memory is projected here once, not at
        every step).
        """
        self.config.check_length(max_length, "the decoding cache (max_length)")
        batch_size = src_tokens.shape[0]
        layers = []
        for layer in self.decoder_layers:
            key, value = layer.project_memory(memory["memory"], depth_major_key=True)
            layers.append({"self": layer.init_cache(batch_size, max_length),
                           "memory_key": key, "memory_value": value})
        return {"position": jnp.zeros((batch_size,), jnp.int32),
                "memory_mask": padding_mask(src_tokens, self.config.pad_id),
                "layers": tuple(layers)}

    def decode_step(self, cache: dict[str, Any], tokens: Array) -> tuple[Array, dict[str, Any]]:
        """tokens int32[N] at ``cache["position"]`` -> (log_probs float32[N, V], cache).

        N = B for an ``init_cache`` cache; N = B*K for a ``beam_cache`` one (K hypotheses per
        sentence, in the slot layout of ``textkit.models.attention``)."""
        x, new_cache = self._decode_hidden(cache, tokens)
        return log_softmax(self._logits(x)[:, 0]), new_cache

    def decode_step_logits_t(self, cache: dict[str, Any],
                             tokens: Array) -> tuple[Array, dict[str, Any]]:
        """``decode_step`` before the log-softmax, transposed: tokens int32[N] -> (logits
        float32[V, N], cache). XLA:CPU multiplies a few rows by the [V, D] output weight faster
        in this layout, and a decoder that keeps only the best few tokens per row reduces down
        its contiguous columns (the decoding contract's candidates hook)."""
        c = self.config
        x, new_cache = self._decode_hidden(cache, tokens)
        x = self._head_inputs(x)[:, 0]                                           # [N, D]
        logits_t = (self._target_embed().attend_t(x) if c.tie_output
                    else self.output.columns(x))                                # [V, N]
        if c.final_logits_bias:
            logits_t = logits_t + self.logits_bias.astype(jnp.float32)[:, None]
        return logits_t, new_cache

    def _decode_hidden(self, cache: dict[str, Any],
                       tokens: Array) -> tuple[Array, dict[str, Any]]:
        """``decode_step`` up to the last decoder layer: (x [N, 1, D], cache)."""
        position = cache["position"]                                             # [B]
        beams, slots = beam_step_inputs(cache)
        row_position = position if beams is None else jnp.repeat(position, beams)  # [N]
        x = self._target_inputs(tokens[:, None], row_position[:, None])
        bias = None
        if self.config.relative_buckets:
            length = cache["layers"][0]["self"]["value"].shape[-2]
            bias = self.decoder_relative_bias.step(position, length)            # [B, H, 1, L]
            if beams is not None:
                bias = jnp.tile(bias, (1, 1, 1, beams))                      # [B, H, 1, K*L]
        new_layers = []
        for layer, layer_cache in zip(self.decoder_layers, cache["layers"]):
            x, self_cache = layer(
                x, slots.get("mask"),
                memory_kv=(layer_cache["memory_key"], layer_cache["memory_value"]),
                memory_mask=cache["memory_mask"], cache=layer_cache["self"], positions=position,
                beams=beams, bias=bias)
            new_layers.append({**layer_cache, "self": self_cache})
        new_cache = {**cache, "position": position + 1, "layers": tuple(new_layers)}
        if beams is not None:
            new_cache["ancestry"] = slots["ancestry"]
        return x, new_cache

    def beam_cache(self, cache: dict[str, Any], beam_size: int) -> dict[str, Any]:
        """``init_cache``'s cache (B rows, possibly advanced) -> the beam-search cache: the
        self-attention caches in K slots per sentence, an ancestry table
        int32[B, K, L], the cross-attention memory left untiled (decoding contract's beam
        hooks; ``textkit.models.attention`` for the layout)."""
        return beam_cache(cache, beam_size, lambda layer: layer["self"],
                          lambda layer, new: {**layer, "self": new})

    def reorder_beams(self, cache: dict[str, Any], parent: Array) -> dict[str, Any]:
        """Beam cache after each sentence's hypotheses took parents int32[B, K]: only the
        ancestry table moves."""
        return reorder_beams(cache, parent)

    def resize_cache(self, cache: dict[str, Any], length: int) -> dict[str, Any]:
        """Cache (row or beam layout) holding ``length`` positions: cut or zero-padded; the
        positions kept must include every one filled so far."""
        self.config.check_length(length, "the decoding cache (length)")
        return resize_cache(cache, length, lambda layer: layer["self"],
                            lambda layer, new: {**layer, "self": new})


register_preset("transformer_base", "translation", Transformer, TransformerConfig,
                d_model=512, num_heads=8, d_ff=2048, num_encoder_layers=6, num_decoder_layers=6)
register_preset("transformer_big", "translation", Transformer, TransformerConfig,
                d_model=1024, num_heads=16, d_ff=4096, num_encoder_layers=6,
                num_decoder_layers=6, dropout=0.3)
register_preset("transformer_small", "translation", Transformer, TransformerConfig,
                d_model=256, num_heads=4, d_ff=1024, num_encoder_layers=3, num_decoder_layers=3)
register_preset("transformer_tiny", "translation", Transformer, TransformerConfig,
                d_model=64, num_heads=4, d_ff=256, num_encoder_layers=2, num_decoder_layers=2,
                max_len=256)
