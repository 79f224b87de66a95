"""Recurrent language models: a Zaremba-style LSTM LM and an AWD-LSTM-style LM.

Both are ``LanguageModel``s of the decoding contract (``textkit.decoding.contract``):
``__call__(tokens, state=None, *, deterministic=True) -> (logits float32 [B,T,V], state)``.
``state`` is a tuple over layers of float32 ``(h, c) [B,H_l]`` pairs (``initial_state(B)``
gives zeros); pass the returned state into the next BPTT window (wrap it in
``jax.lax.stop_gradient`` to truncate backpropagation there). Positions with ``tokens == pad_id``
leave the state unchanged, so a padded last window carries the state of its last real token.
``init_cache(batch_size, max_length)`` / ``decode_step(cache, tokens)`` run one token at a time
through the same code path.

``LSTMLM`` (Zaremba et al. 2014; GluonNLP's standard_lstm_lm_*): dropout on the embeddings,
between layers and before the output layer; ``tie_weights`` shares the embedding matrix with the
output layer, through a linear projection hidden -> embedding when the sizes differ.

``AWDLSTMLM`` (Merity et al. 2017): embedding dropout (whole word types), locked (variational)
dropout with one mask per sequence on the input, between layers and on the output, and
weight-drop (DropConnect) on every hidden-to-hidden matrix. With tied weights the last layer's
size is the embedding size. All dropout is off when ``deterministic``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from textkit.models.config import ModelConfig
from textkit.models.kernels import mixed_einsum
from textkit.models.layers import (
    Dense,
    Dropout,
    dropout,
    log_softmax,
    lookup,
    uniform_init,
)
from textkit.models.registry import register_preset
from textkit.models.rnn import LSTM, LSTMState, zero_state


@dataclasses.dataclass(frozen=True)
class _RecurrentLMConfig(ModelConfig):
    """The fields both recurrent LM configs share (defaults: ``LSTMLMConfig``'s)."""

    tiny: ClassVar[Mapping[str, Any]] = {"embed_size": 16, "hidden_size": 16,
                                         "num_layers": 1}

    vocab_size: int = 10000
    embed_size: int = 200
    hidden_size: int = 200
    num_layers: int = 2
    tie_weights: bool = True

    def _validate(self) -> None:
        if self.num_layers < 1:
            raise ValueError(f"{type(self).__name__}.num_layers={self.num_layers}; "
                             "expected >= 1")


@dataclasses.dataclass(frozen=True)
class LSTMLMConfig(_RecurrentLMConfig):
    """LSTM LM hyper-parameters. ``policy`` may be given as a string."""

    _rates = ("dropout",)

    dropout: float = 0.2

    @property
    def layer_sizes(self) -> tuple[int, ...]:
        """Hidden size of each LSTM layer (the state shapes)."""
        return (self.hidden_size,) * self.num_layers


@dataclasses.dataclass(frozen=True)
class AWDLSTMLMConfig(_RecurrentLMConfig):
    """AWD-LSTM hyper-parameters (defaults: GluonNLP's awd_lstm_lm_1150)."""

    _rates = ("embedding_dropout", "input_dropout", "hidden_dropout", "output_dropout",
              "weight_drop")

    embed_size: int = 400
    hidden_size: int = 1150
    num_layers: int = 3
    embedding_dropout: float = 0.1
    input_dropout: float = 0.65
    hidden_dropout: float = 0.2
    output_dropout: float = 0.4
    weight_drop: float = 0.5

    @property
    def layer_sizes(self) -> tuple[int, ...]:
        """Hidden size of each LSTM layer; the last is ``embed_size`` when weights are tied."""
        last = self.embed_size if self.tie_weights else self.hidden_size
        return (self.hidden_size,) * (self.num_layers - 1) + (last,)


class _RecurrentLM(nn.Module):
    """The recurrent LM; subclasses define ``config`` and the embedding (``_embed``), layer
    (``_lstm``) and between-layer dropout (``_layer_dropout``) they use."""

    @nn.compact
    def __call__(self, tokens: jax.Array, state: tuple[LSTMState, ...] | None = None, *,
                 deterministic: bool = True) -> tuple[jax.Array, tuple[LSTMState, ...]]:
        """``tokens`` int32 ``[B,T]`` -> (logits float32 ``[B,T,V]``, state after the window)."""
        cfg = self.config
        if state is None:
            state = self.initial_state(tokens.shape[0])
        mask = tokens != cfg.pad_id
        embedding = self._embedding_table()
        x = self._embed(embedding, tokens, deterministic)
        new_state = []
        for index, size in enumerate(cfg.layer_sizes):
            x, layer_state = self._lstm(index, size)(x, state[index], mask,
                                                     deterministic=deterministic)
            x = self._layer_dropout(index)(x, deterministic=deterministic)
            new_state.append(layer_state)
        return self._output_logits(x, embedding), tuple(new_state)

    def _lstm(self, index: int, size: int) -> LSTM:
        return LSTM(size, self.config.policy, name=f"lstm_{index}")

    def initial_state(self, batch_size: int) -> tuple[LSTMState, ...]:
        """All-zero state: per layer float32 ``(h, c) [batch_size, H_l]``."""
        return tuple(zero_state(batch_size, size) for size in self.config.layer_sizes)

    def init_cache(self, batch_size: int, max_length: int) -> dict[str, Any]:
        """Decoding cache (every leaf has leading axis B); ``max_length`` is unused by an RNN."""
        del max_length
        return {"state": self.initial_state(batch_size)}

    def decode_step(self, cache: dict[str, Any],
                    tokens: jax.Array) -> tuple[jax.Array, dict[str, Any]]:
        """``tokens`` int32 ``[B]`` -> (log-probs float32 ``[B,V]``, advanced cache)."""
        logits, state = self(tokens[:, None], cache["state"], deterministic=True)
        return log_softmax(logits[:, 0]), {"state": state}

    def _embedding_table(self) -> jax.Array:
        cfg = self.config
        return self.param("embedding", uniform_init(0.1), (cfg.vocab_size, cfg.embed_size),
                          cfg.policy.param_dtype)

    def _output_logits(self, x: jax.Array, embedding: jax.Array) -> jax.Array:
        """``x [B,T,H_last]`` -> logits float32 ``[B,T,V]`` (tied to ``embedding`` or not)."""
        cfg = self.config
        if not cfg.tie_weights:
            return Dense(cfg.vocab_size, cfg.policy, name="output", dtype=jnp.float32)(x)
        if x.shape[-1] != cfg.embed_size:
            x = Dense(cfg.embed_size, cfg.policy, use_bias=False,
                            name="tied_projection")(x)
        bias = self.param("output_bias", nn.initializers.zeros, (cfg.vocab_size,),
                          cfg.policy.param_dtype)
        logits = mixed_einsum("...d,vd->...v", x, embedding, cfg.policy.compute_dtype)
        return logits + bias.astype(jnp.float32)


class LSTMLM(_RecurrentLM):
    """Embedding, ``num_layers`` LSTM layers, dropout, (tied) output layer."""

    config: LSTMLMConfig

    def _embed(self, embedding: jax.Array, tokens: jax.Array, deterministic: bool) -> jax.Array:
        x = lookup(embedding, tokens).astype(self.config.policy.compute_dtype)
        return Dropout(self.config.dropout)(x, deterministic=deterministic)

    def _layer_dropout(self, index: int) -> Dropout:
        return Dropout(self.config.dropout)


class AWDLSTMLM(_RecurrentLM):
    """AWD-LSTM: embedding dropout, locked dropout, weight-dropped LSTM layers, tied output."""

    config: AWDLSTMLMConfig

    def _dropped_embedding(self, embedding: jax.Array, tokens: jax.Array,
                           deterministic: bool) -> jax.Array:
        """Embedding lookup that drops whole word types (same type -> same decision)."""
        x = lookup(embedding, tokens).astype(self.config.policy.compute_dtype)
        rate = self.config.embedding_dropout
        if deterministic or rate == 0.0:
            return x
        # One inverted-dropout decision per vocabulary row: 0 or 1 / keep.
        scale = dropout(jnp.ones((embedding.shape[0],), x.dtype), rate, self.make_rng("dropout"))
        return x * jnp.take(scale, tokens, axis=0, mode="fill")[..., None]

    def _embed(self, embedding: jax.Array, tokens: jax.Array, deterministic: bool) -> jax.Array:
        """Dropped embedding, then locked dropout: one mask per sequence and feature, shared
        over time (axis 1)."""
        x = self._dropped_embedding(embedding, tokens, deterministic)
        return Dropout(self.config.input_dropout, broadcast_dims=(1,))(
            x, deterministic=deterministic)

    def _lstm(self, index: int, size: int) -> LSTM:
        return LSTM(size, self.config.policy, weight_drop=self.config.weight_drop,
                    name=f"lstm_{index}")

    def _layer_dropout(self, index: int) -> Dropout:
        cfg = self.config
        last = index == len(cfg.layer_sizes) - 1
        return Dropout(cfg.output_dropout if last else cfg.hidden_dropout, broadcast_dims=(1,))


# Zaremba et al.'s small / medium / large sizes (GluonNLP's standard_lstm_lm_200/650/1500),
# tied; and a 2 x 32 model with a 1000-token vocab for tests and CPU smoke runs.
register_preset("lstm_lm_200", "language_model", LSTMLM, LSTMLMConfig,
                embed_size=200, hidden_size=200, num_layers=2, dropout=0.2)
register_preset("lstm_lm_650", "language_model", LSTMLM, LSTMLMConfig,
                embed_size=650, hidden_size=650, num_layers=2, dropout=0.5)
register_preset("lstm_lm_1500", "language_model", LSTMLM, LSTMLMConfig,
                embed_size=1500, hidden_size=1500, num_layers=2, dropout=0.65)
register_preset("lstm_lm_tiny", "language_model", LSTMLM, LSTMLMConfig,
                vocab_size=1000, embed_size=32, hidden_size=32, num_layers=2, dropout=0.1)
# Merity et al.: 3 layers, 400-d embedding, 1150 hidden, tied (GluonNLP awd_lstm_lm_1150); and
# 3 layers, 16-d embedding, 48 hidden, 1000-token vocab for tests and CPU smoke runs.
register_preset("awd_lstm_lm", "language_model", AWDLSTMLM, AWDLSTMLMConfig)
register_preset("awd_lstm_lm_tiny", "language_model", AWDLSTMLM, AWDLSTMLMConfig,
                vocab_size=1000, embed_size=16, hidden_size=48)
