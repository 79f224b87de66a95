"""GNMT: LSTM encoder-decoder with attention (Wu et al. 2016), a ``Seq2SeqModel`` of the decoding
contract (``textkit.decoding.contract``).

Encoder: layer 1 is bidirectional (``H`` per direction, outputs concatenated to ``2H``); layers
2.. are unidirectional ``H``; residual connections ``x + LSTM(x)`` from layer 3 on, as in Wu et
al. (layer 2 cannot have one: its input is ``2H`` wide). Right padding is masked throughout and
the backward direction reads each sequence from its own last real token.

Decoder: layer 1 reads the target embedding and, with ``input_feeding``, the previous step's
attention context (Luong et al. 2015), so its output, the attention query, depends on the
source; layer 1 and the attention then run in one ``nn.scan`` per step. With ``bridge`` every
decoder layer starts from ``tanh(W mean(memory))`` (a learned bridge from the encoder) instead
of zeros. The context is concatenated to the input of every upper layer (batched scans over
``[h1; ctx]``, input projections hoisted out of the loop, see ``rnn.py``), residuals from layer 3
on, and with ``output_context`` the output projection reads ``[h_top; ctx]``.

Attention (``GNMTConfig.attention``): ``"normalized"`` (cosine of projected query and keys
times a learned scale initialised to sqrt(H): unit-variance scores at initialisation, never a
uniform start), ``"scaled_dot"`` (projected query and keys, dot / sqrt(H)), ``"luong"`` (Luong
"general": ``h^T W m``), ``"bahdanau"`` (additive: ``v^T tanh(W_q h + W_k m)``). Scores, masks
and softmax are float32; matmuls follow the policy. ``init_scale`` draws the embeddings and
LSTM matrices from U(-s, s) as GNMT does (None: the LSTM's PyTorch-style default).

Embeddings: ``share_embeddings`` uses one table for source and target (a joint vocabulary);
``tie_output`` computes the logits as ``tanh(W [h_top; ctx]) @ E_tgt^T + b`` (Luong's attentional
hidden state of embedding width, then the transposed target embedding) instead of a separate
``[D,V]`` kernel: fewer parameters and a cheaper softmax layer.

``bridge=False, input_feeding=False, output_context=False, attention="scaled_dot",
init_scale=None`` is the earlier decoder (a target-side language model until the upper layers
learn to use the context), kept for comparison.
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
from textkit.models.layers import Dense, Dropout, log_softmax, lookup, uniform_init
from textkit.models.registry import register_preset
from textkit.models.rnn import LSTM, BidirectionalLSTM, zero_state
from textkit.precision import Policy, mask_value

ATTENTION_KINDS = ("normalized", "scaled_dot", "luong", "bahdanau")
RESIDUAL_FROM_LAYER = 3
"""1-based index of the first encoder/decoder layer with a residual connection."""


@dataclasses.dataclass(frozen=True)
class GNMTConfig(ModelConfig):
    """Hyper-parameters of a GNMT model. ``policy`` may be given as a string."""

    tiny: ClassVar[Mapping[str, Any]] = {"embed_size": 16, "hidden_size": 16,
                                         "num_encoder_layers": 2, "num_decoder_layers": 2}

    _rates = ("dropout",)
    _choices = {"attention": ATTENTION_KINDS}

    src_vocab_size: int = 32000
    tgt_vocab_size: int = 32000
    embed_size: int = 512
    hidden_size: int = 512
    num_encoder_layers: int = 2
    num_decoder_layers: int = 2
    attention: str = "normalized"
    dropout: float = 0.2
    bridge: bool = True
    input_feeding: bool = True
    output_context: bool = True
    init_scale: float | None = 0.1
    share_embeddings: bool = False
    tie_output: bool = False

    def _validate(self) -> None:
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError("share_embeddings needs src_vocab_size == tgt_vocab_size, got "
                             f"{self.src_vocab_size} and {self.tgt_vocab_size}")
        if self.num_encoder_layers < 1 or self.num_decoder_layers < 2:
            raise ValueError("GNMT needs >= 1 encoder layer and >= 2 decoder layers (the "
                             "attention context enters the decoder from layer 2); got "
                             f"{self.num_encoder_layers} and {self.num_decoder_layers}")


class RecurrentAttention(nn.Module):
    """Single-head attention of decoder outputs over the encoder memory, given keys projected
    once per source (``GNMT.project_keys``)."""

    kind: str
    hidden_size: int
    policy: Policy = Policy()

    def setup(self):
        if self.kind != "luong":
            self.query_projection = Dense(self.hidden_size, self.policy, use_bias=False)
        if self.kind == "bahdanau":
            self.score_vector = self.param("score_vector",
                                           nn.initializers.normal(self.hidden_size ** -0.5),
                                           (self.hidden_size,), self.policy.param_dtype)
        if self.kind == "normalized":
            self.scale = self.param("scale", nn.initializers.constant(self.hidden_size ** 0.5),
                                    (), jnp.float32)

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
            if self.kind == "normalized":
                q = _unit(q)
            scores = mixed_einsum("bth,bsh->bts", q, keys, cdt)
            if self.kind == "scaled_dot":
                scores = scores * self.hidden_size ** -0.5
            elif self.kind == "normalized":
                scores = scores * self.scale
        scores = jnp.where(src_mask[:, None, :], scores, mask_value(jnp.float32))
        weights = jax.nn.softmax(scores, axis=-1)                              # f32 [B,T,S]
        context = mixed_einsum("bts,bsd->btd", weights, memory, cdt)
        return context.astype(cdt)


def _unit(x: jax.Array) -> jax.Array:
    """``x`` float32 scaled to unit l2 norm along the last axis."""
    x = x.astype(jnp.float32)
    return x * jax.lax.rsqrt(jnp.sum(x * x, axis=-1, keepdims=True) + 1e-12)


class InputFeedingStep(nn.Module):
    """One step of the bottom decoder layer with input feeding, for ``nn.scan`` over time.

    carry ``((h, c) float32 [B,H], feed [B,Dm])``; ``gates_x`` float32 ``[B,4H]`` (the
    embedding's input projection, hoisted out of the loop) -> new carry and ``(h, context)``.
    """

    hidden_size: int
    attention: str
    policy: Policy
    kernel_init: Any

    @nn.compact
    def __call__(self, carry, gates_x, keys, memory, src_mask):
        (h, c), feed = carry
        hidden, pdt, cdt = self.hidden_size, self.policy.param_dtype, self.policy.compute_dtype
        w_feed = self.param("w_feed", self.kernel_init, (feed.shape[-1], 4 * hidden), pdt)
        w_hh = self.param("w_hh", self.kernel_init, (hidden, 4 * hidden), pdt)
        gates = (gates_x + mixed_einsum("bd,dg->bg", feed, w_feed, cdt)
                 + mixed_einsum("bh,hg->bg", h.astype(cdt), w_hh, cdt))
        i, f, g, o = jnp.split(gates, 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        context = RecurrentAttention(self.attention, hidden, self.policy, name="attention")(
            h[:, None].astype(cdt), keys, memory, src_mask)[:, 0]              # [B,Dm]
        return ((h, c), context), (h.astype(cdt), context)


_ScannedFeeding = nn.scan(InputFeedingStep, variable_broadcast="params",
                          split_rngs={"params": False},
                          in_axes=(0, nn.broadcast, nn.broadcast, nn.broadcast), out_axes=0)


class GNMT(nn.Module):
    """GNMT encoder-decoder; see the module docstring and ``textkit.decoding.contract``."""

    config: GNMTConfig

    def setup(self):
        cfg = self.config
        pol = cfg.policy
        init = None if cfg.init_scale is None else uniform_init(cfg.init_scale)
        self.src_embedding = self.param("src_embedding", uniform_init(cfg.init_scale or 0.1),
                                        (cfg.src_vocab_size, cfg.embed_size), pol.param_dtype)
        if not cfg.share_embeddings:
            self.tgt_embedding = self.param("tgt_embedding", uniform_init(cfg.init_scale or 0.1),
                                            (cfg.tgt_vocab_size, cfg.embed_size),
                                            pol.param_dtype)
        self.encoder_bidirectional = BidirectionalLSTM(cfg.hidden_size, pol, kernel_init=init)
        self.encoder_layers = [LSTM(cfg.hidden_size, pol, kernel_init=init)
                               for _ in range(cfg.num_encoder_layers - 1)]
        first = 1 if cfg.input_feeding else 0
        self.decoder_layers = [LSTM(cfg.hidden_size, pol, kernel_init=init)
                               for _ in range(first, cfg.num_decoder_layers)]
        self.key_projection = Dense(cfg.hidden_size, pol, use_bias=cfg.attention == "bahdanau")
        if cfg.input_feeding:
            self.feeding_input = Dense(4 * cfg.hidden_size, pol, kernel_init=init)
            self.feeding = _ScannedFeeding(cfg.hidden_size, cfg.attention, pol,
                                           init or uniform_init(cfg.hidden_size ** -0.5))
        else:
            self.attention = RecurrentAttention(cfg.attention, cfg.hidden_size, pol)
        if cfg.bridge:
            self.bridge = Dense((cfg.num_decoder_layers, 2, cfg.hidden_size), pol,
                               dtype=jnp.float32)
        if cfg.tie_output:
            self.output_hidden = Dense(cfg.embed_size, pol)
            self.output_bias = self.param("output_bias", nn.initializers.zeros,
                                          (cfg.tgt_vocab_size,), jnp.float32)
        else:
            self.output_projection = Dense(cfg.tgt_vocab_size, pol, dtype=jnp.float32)
        self.dropout = Dropout(cfg.dropout)

    def _target_table(self) -> jax.Array:
        """The target embedding ``[V,E]`` (the source one with ``share_embeddings``)."""
        return self.src_embedding if self.config.share_embeddings else self.tgt_embedding

    def _logits(self, x: jax.Array, deterministic: bool) -> jax.Array:
        """Top decoder features ``x [B,T,D]`` -> logits float32 ``[B,T,V]``; with ``tie_output``
        through ``tanh(W x)`` of embedding width and the transposed target embedding."""
        x = self.dropout(x, deterministic=deterministic)
        if not self.config.tie_output:
            return self.output_projection(x)
        hidden = jnp.tanh(self.output_hidden(x))                                  # [B,T,E]
        logits = mixed_einsum("bte,ve->btv", hidden, self._target_table(),
                              self.config.policy.compute_dtype)
        return logits.astype(jnp.float32) + self.output_bias

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

    def project_keys(self, memory: jax.Array) -> jax.Array:
        """``memory [B,S,Dm]`` -> attention keys ``[B,S,H]`` in compute dtype (computed once
        per source; unit length for ``"normalized"``)."""
        keys = self.key_projection(memory)
        if self.config.attention == "normalized":
            keys = _unit(keys)
        return keys.astype(self.config.policy.compute_dtype)

    def _initial_state(self, memory: jax.Array, src_mask: jax.Array) -> dict[str, Any]:
        """The decoder's first state: per layer float32 ``(h, c) [B,H]`` (the bridge, or
        zeros) and, with input feeding, ``feed`` = a zero context ``[B,Dm]``."""
        cfg, batch = self.config, memory.shape[0]
        if cfg.bridge:
            weights = src_mask[..., None].astype(jnp.float32)                    # [B,S,1]
            mean = (memory.astype(jnp.float32) * weights).sum(1) / jnp.maximum(
                weights.sum(1), 1.0)                                             # [B,Dm]
            init = jnp.tanh(self.bridge(mean))                                   # [B,L,2,H]
            layers = tuple((init[:, i, 0], init[:, i, 1])
                           for i in range(cfg.num_decoder_layers))
        else:
            layers = tuple(zero_state(batch, cfg.hidden_size)
                           for _ in range(cfg.num_decoder_layers))
        state = {"layers": layers}
        if cfg.input_feeding:
            state["feed"] = jnp.zeros(memory.shape[:1] + memory.shape[2:],
                                      self.config.policy.compute_dtype)
        return state

    def _bottom(self, x: jax.Array, keys: jax.Array, memory: jax.Array, src_mask: jax.Array,
                state: dict[str, Any]) -> tuple[jax.Array, jax.Array, dict[str, Any]]:
        """Layer 1 and the attention: ``x [B,T,E]`` -> (``h1 [B,T,H]``, context
        ``[B,T,Dm]``, the layer's new state)."""
        if not self.config.input_feeding:
            h1, carry = self.decoder_layers[0](x, state["layers"][0])
            return h1, self.attention(h1, keys, memory, src_mask), {"layers": (carry,)}
        gates_x = jnp.swapaxes(self.feeding_input(x), 0, 1)                    # f32 [T,B,4H]
        (carry, feed), (h1, context) = self.feeding(
            (state["layers"][0], state["feed"]), gates_x, keys, memory, src_mask)
        return (jnp.swapaxes(h1, 0, 1), jnp.swapaxes(context, 0, 1),
                {"layers": (carry,), "feed": feed})

    def _decode(self, tgt_tokens: jax.Array, memory: jax.Array, keys: jax.Array,
                src_mask: jax.Array, state: dict[str, Any],
                deterministic: bool) -> tuple[jax.Array, dict[str, Any]]:
        """``tgt_tokens [B,T]`` from ``state`` -> (logits float32 ``[B,T,V]``, new state)."""
        x = self.dropout(self._embed(self._target_table(), tgt_tokens),
                         deterministic=deterministic)
        x, context, new_state = self._bottom(x, keys, memory, src_mask, state)
        layers = list(new_state["layers"])
        upper = self.decoder_layers[0 if self.config.input_feeding else 1:]
        for layer_number, layer in enumerate(upper, start=2):
            inputs = jnp.concatenate([x, context], axis=-1)
            y, layer_state = layer(self.dropout(inputs, deterministic=deterministic),
                                   state["layers"][layer_number - 1])
            layers.append(layer_state)
            x = y + x if layer_number >= RESIDUAL_FROM_LAYER else y
        if self.config.output_context:
            x = jnp.concatenate([x, context], axis=-1)
        return self._logits(x, deterministic), {**new_state, "layers": tuple(layers)}

    def __call__(self, src_tokens: jax.Array, tgt_input: jax.Array, *,
                 deterministic: bool = True) -> jax.Array:
        """``src_tokens [B,S]``, ``tgt_input [B,T]`` int32 -> logits float32 ``[B,T,V]``."""
        encoded = self.encode(src_tokens, deterministic=deterministic)
        memory, mask = encoded["memory"], encoded["src_mask"]
        keys = self.project_keys(memory)
        logits, _ = self._decode(tgt_input, memory, keys, mask,
                                 self._initial_state(memory, mask), deterministic)
        return logits

    def init_cache(self, memory: dict[str, jax.Array], src_tokens: jax.Array,
                   max_length: int) -> dict[str, Any]:
        """Decoding cache from ``encode``'s output. Every leaf has leading axis B.

        ``max_length`` is accepted for the shared contract; a recurrent cache does not grow.
        """
        del max_length
        src_mask = src_tokens != self.config.pad_id
        return {"memory": memory["memory"],
                "keys": self.project_keys(memory["memory"]),
                "src_mask": src_mask,
                "state": self._initial_state(memory["memory"], src_mask)}

    def decode_step(self, cache: dict[str, Any],
                    tokens: jax.Array) -> tuple[jax.Array, dict[str, Any]]:
        """``tokens`` int32 ``[B]`` -> (log-probs float32 ``[B,V]``, cache advanced one step)."""
        logits, state = self._decode(tokens[:, None], cache["memory"], cache["keys"],
                                     cache["src_mask"], cache["state"], True)
        return log_softmax(logits[:, 0]), {**cache, "state": state}


# 2 + 2 layers x 512 (first encoder layer bidirectional), dropout 0.2: the sizes of GluonNLP's
# IWSLT'15 en-vi GNMT, with this module's decoder (bridge, input feeding, normalized attention);
# the vocabulary sizes are placeholders (the recipes set them). "gnmt_iwslt" is its old name.
for _name in ("gnmt_2x512", "gnmt_iwslt"):
    register_preset(_name, "translation", GNMT, GNMTConfig, src_vocab_size=17191,
                    tgt_vocab_size=7709, embed_size=512, hidden_size=512, num_encoder_layers=2,
                    num_decoder_layers=2, dropout=0.2)
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
                num_decoder_layers=2, dropout=0.1)
