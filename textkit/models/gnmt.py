"""GNMT: LSTM encoder-decoder with attention (Wu et al. 2016), a ``Seq2SeqModel`` of the decoding
contract (``textkit.decoding.contract``).

Encoder: layer 1 is bidirectional (``H`` per direction, outputs concatenated to ``2H``); layers
2.. are unidirectional ``H``; residual connections ``x + LSTM(x)`` from layer 3 on, as in Wu et
al. (layer 2 cannot have one: its input is ``2H`` wide). Right padding is masked throughout and
the backward direction reads each sequence from its own last real token.

Decoder: layer 1 runs over the target embeddings; its output at step ``t`` is the attention
query (the current step's output, Luong-style, instead of GNMT's previous-step output, so the
whole training sequence attends in one batched op). The attention context is concatenated to
the input of every upper layer; residuals from layer 3 on; the top layer feeds the output
projection. The decoder starts from a zero state (no bridge from the encoder), so beam search
only tiles the memory. Without input feeding every layer is one ``lax.scan`` with its input
projection hoisted out of the loop (see ``rnn.py``).

Attention (``GNMTConfig.attention``): ``"scaled_dot"`` (projected query and keys, dot / sqrt(H)),
``"luong"`` (Luong "general": ``h^T W m``), ``"bahdanau"`` (additive: ``v^T tanh(W_q h + W_k m)``).
Scores, masks and softmax are float32; matmuls follow the policy.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from textkit.models.config import ModelConfig
from textkit.models.layers import Dense, Dropout, log_softmax, lookup, mixed_einsum, uniform_init
from textkit.models.registry import register_preset
from textkit.models.rnn import LSTM, BidirectionalLSTM, LSTMState, zero_state
from textkit.precision import Policy, mask_value

ATTENTION_KINDS = ("scaled_dot", "luong", "bahdanau")
RESIDUAL_FROM_LAYER = 3
"""1-based index of the first encoder/decoder layer with a residual connection."""


@dataclasses.dataclass(frozen=True)
class GNMTConfig(ModelConfig):
    """Hyper-parameters of a GNMT model. ``policy`` may be given as a string."""

    _rates = ("dropout",)
    _choices = {"attention": ATTENTION_KINDS}

    src_vocab_size: int = 32000
    tgt_vocab_size: int = 32000
    embed_size: int = 512
    hidden_size: int = 512
    num_encoder_layers: int = 2
    num_decoder_layers: int = 2
    attention: str = "scaled_dot"
    dropout: float = 0.2

    def _validate(self) -> None:
        if self.num_encoder_layers < 1 or self.num_decoder_layers < 2:
            raise ValueError("GNMT needs >= 1 encoder layer and >= 2 decoder layers (the "
                             "attention context enters the decoder from layer 2); got "
                             f"{self.num_encoder_layers} and {self.num_decoder_layers}")


class RecurrentAttention(nn.Module):
    """Single-head attention of decoder outputs over the encoder memory."""

    kind: str
    hidden_size: int
    policy: Policy = Policy()

    def setup(self):
        self.key_projection = Dense(self.hidden_size, self.policy,
                                          use_bias=self.kind == "bahdanau")
        if self.kind != "luong":
            self.query_projection = Dense(self.hidden_size, self.policy, use_bias=False)
        if self.kind == "bahdanau":
            self.score_vector = self.param("score_vector",
                                           nn.initializers.normal(self.hidden_size ** -0.5),
                                           (self.hidden_size,), self.policy.param_dtype)

    def project_keys(self, memory: jax.Array) -> jax.Array:
        """``memory [B,S,Dm]`` -> keys ``[B,S,H]`` in compute dtype (computed once per source)."""
        return self.key_projection(memory).astype(self.policy.compute_dtype)

    def __call__(self, query: jax.Array, keys: jax.Array, memory: jax.Array,
                 src_mask: jax.Array) -> jax.Array:
        """``query [B,T,H]``, ``keys [B,S,H]``, ``memory [B,S,Dm]``, ``src_mask`` bool ``[B,S]``
        -> context ``[B,T,Dm]`` in compute dtype."""
        cdt = self.policy.compute_dtype
        if self.kind == "bahdanau":
            q = self.query_projection(query)                                   # f32 [B,T,H]
            hidden = jnp.tanh(q[:, :, None, :] + keys[:, None, :, :].astype(jnp.float32))
            scores = mixed_einsum("btsh,h->bts", hidden, self.score_vector, cdt)
        else:
            q = query if self.kind == "luong" else self.query_projection(query)
            scores = mixed_einsum("bth,bsh->bts", q, keys, cdt)
            if self.kind == "scaled_dot":
                scores = scores * self.hidden_size ** -0.5
        scores = jnp.where(src_mask[:, None, :], scores, mask_value(jnp.float32))
        weights = jax.nn.softmax(scores, axis=-1)                              # f32 [B,T,S]
        context = mixed_einsum("bts,bsd->btd", weights, memory, cdt)
        return context.astype(cdt)


class GNMT(nn.Module):
    """GNMT encoder-decoder; see the module docstring and ``textkit.decoding.contract``."""

    config: GNMTConfig

    def setup(self):
        cfg = self.config
        pol = cfg.policy
        self.src_embedding = self.param("src_embedding", uniform_init(0.1),
                                        (cfg.src_vocab_size, cfg.embed_size), pol.param_dtype)
        self.tgt_embedding = self.param("tgt_embedding", uniform_init(0.1),
                                        (cfg.tgt_vocab_size, cfg.embed_size), pol.param_dtype)
        self.encoder_bidirectional = BidirectionalLSTM(cfg.hidden_size, pol)
        self.encoder_layers = [LSTM(cfg.hidden_size, pol)
                               for _ in range(cfg.num_encoder_layers - 1)]
        self.decoder_layers = [LSTM(cfg.hidden_size, pol) for _ in range(cfg.num_decoder_layers)]
        self.attention = RecurrentAttention(cfg.attention, cfg.hidden_size, pol)
        self.output_projection = Dense(cfg.tgt_vocab_size, pol)
        self.dropout = Dropout(cfg.dropout)

    def _embed(self, table: jax.Array, tokens: jax.Array) -> jax.Array:
        return lookup(table, tokens).astype(self.config.policy.compute_dtype)

    def encode(self, src_tokens: jax.Array, *, deterministic: bool = True) -> dict[str, jax.Array]:
        """``src_tokens`` int32 ``[B,S]`` -> ``{"memory": [B,S,Dm] compute dtype (zero at
        padding), "src_mask": bool [B,S]}`` (the contract's ``Encoded``); ``Dm`` is ``H``
        (``2H`` with one encoder layer)."""
        mask = src_tokens != self.config.pad_id
        x = self._embed(self.src_embedding, src_tokens)
        x = self.encoder_bidirectional(self.dropout(x, deterministic=deterministic), mask)
        for layer_number, layer in enumerate(self.encoder_layers, start=2):
            y, _ = layer(self.dropout(x, deterministic=deterministic), mask=mask)
            x = y + x if layer_number >= RESIDUAL_FROM_LAYER else y
        return {"memory": x, "src_mask": mask}

    def _zero_decoder_state(self, batch_size: int) -> tuple[LSTMState, ...]:
        return tuple(zero_state(batch_size, self.config.hidden_size)
                     for _ in range(self.config.num_decoder_layers))

    def _decode(self, tgt_tokens: jax.Array, memory: jax.Array, keys: jax.Array,
                src_mask: jax.Array, state: tuple[LSTMState, ...],
                deterministic: bool) -> tuple[jax.Array, tuple[LSTMState, ...]]:
        """``tgt_tokens [B,T]`` from ``state`` -> (logits float32 ``[B,T,V]``, new state)."""
        x = self._embed(self.tgt_embedding, tgt_tokens)
        first = self.decoder_layers[0]
        x, first_state = first(self.dropout(x, deterministic=deterministic), state[0])
        new_state = [first_state]
        context = self.attention(x, keys, memory, src_mask)                  # [B,T,Dm]
        for layer_number, layer in enumerate(self.decoder_layers[1:], start=2):
            inputs = jnp.concatenate([x, context], axis=-1)
            y, layer_state = layer(self.dropout(inputs, deterministic=deterministic),
                                   state[layer_number - 1])
            new_state.append(layer_state)
            x = y + x if layer_number >= RESIDUAL_FROM_LAYER else y
        logits = self.output_projection(self.dropout(x, deterministic=deterministic))
        return logits, tuple(new_state)

    def __call__(self, src_tokens: jax.Array, tgt_input: jax.Array, *,
                 deterministic: bool = True) -> jax.Array:
        """``src_tokens [B,S]``, ``tgt_input [B,T]`` int32 -> logits float32 ``[B,T,V]``."""
        encoded = self.encode(src_tokens, deterministic=deterministic)
        memory = encoded["memory"]
        keys = self.attention.project_keys(memory)
        logits, _ = self._decode(tgt_input, memory, keys, encoded["src_mask"],
                                 self._zero_decoder_state(src_tokens.shape[0]), deterministic)
        return logits

    def init_cache(self, memory: dict[str, jax.Array], src_tokens: jax.Array,
                   max_length: int) -> dict[str, Any]:
        """Decoding cache from ``encode``'s output. Every leaf has leading axis B.

        ``max_length`` is accepted for the shared contract; a recurrent cache does not grow.
        """
        del max_length
        return {"memory": memory["memory"],
                "keys": self.attention.project_keys(memory["memory"]),
                "src_mask": src_tokens != self.config.pad_id,
                "state": self._zero_decoder_state(src_tokens.shape[0])}

    def decode_step(self, cache: dict[str, Any],
                    tokens: jax.Array) -> tuple[jax.Array, dict[str, Any]]:
        """``tokens`` int32 ``[B]`` -> (log-probs float32 ``[B,V]``, cache advanced one step)."""
        logits, state = self._decode(tokens[:, None], cache["memory"], cache["keys"],
                                     cache["src_mask"], cache["state"], True)
        return log_softmax(logits[:, 0]), {**cache, "state": state}


# GluonNLP's IWSLT'15 en-vi setting: 2 layers x 512 (first bidirectional), dropout 0.2; the
# vocabulary sizes are those of the IWSLT'15 en-vi vocab files (override with yours).
register_preset("gnmt_iwslt", "translation", GNMT, GNMTConfig, src_vocab_size=17191,
                tgt_vocab_size=7709, embed_size=512, hidden_size=512, num_encoder_layers=2,
                num_decoder_layers=2, attention="scaled_dot", dropout=0.2)
# 4 + 4 layers x 1024, additive attention, 32k shared-size vocab (WMT-style).
register_preset("gnmt_4layer", "translation", GNMT, GNMTConfig, embed_size=1024,
                hidden_size=1024, num_encoder_layers=4, num_decoder_layers=4,
                attention="bahdanau", dropout=0.2)
# 8 + 8 layers x 1024 as in Wu et al. 2016, additive attention.
register_preset("gnmt_8layer", "translation", GNMT, GNMTConfig, embed_size=1024,
                hidden_size=1024, num_encoder_layers=8, num_decoder_layers=8,
                attention="bahdanau", dropout=0.2)
# 2 + 2 layers x 64 with a 1000-token vocab: trains in minutes on a CPU.
register_preset("gnmt_tiny", "translation", GNMT, GNMTConfig, src_vocab_size=1000,
                tgt_vocab_size=1000, embed_size=64, hidden_size=64, num_encoder_layers=2,
                num_decoder_layers=2, attention="scaled_dot", dropout=0.1)
