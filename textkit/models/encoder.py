"""Pretrained-style Transformer encoders: BERT, RoBERTa, XLM-RoBERTa, ELECTRA (discriminator),
DistilBERT, DeBERTa-v3 and ModernBERT with their heads, as transformers computes them.

One model class, ``Encoder``, configured by one ``EncoderConfig``: ``architecture`` (the
family, named by its transformers ``model_type``) says how tokens become vectors and which head
layout the family uses; ``head`` picks the output::

    model = get_model("bert_base_uncased", head="sequence_classification", num_labels=3)
    out = model.apply({"params": params}, input_ids=ids, attention_mask=mask,
                      token_type_ids=types)      # inference mode (no dropout)
    out["logits"]                                # float32 [B, num_labels]
    model.apply(v, **batch, deterministic=False, rngs={"dropout": key})   # training

==============  ===================================================================================
family          layers
==============  ===================================================================================
``bert``        post-norm; learned absolute positions and token types
``roberta``,    as BERT, positions counted after the padding id (``roberta_positions``)
``xlm-roberta``
``electra``     as BERT, embeddings of ``embedding_size`` projected to ``hidden_size``
``distilbert``  as BERT without token types
``deberta-v2``  DeBERTa-v2/v3: post-norm; disentangled relative attention
                (``attention.Disentangled``: c2p / p2c scores from log-bucketed relative
                positions, one shared table of relative embeddings, layer-normed); absolute
                positions only with ``absolute_positions``; embeddings zeroed at padding; a
                padded query attends to nothing (its row is uniform), as transformers' 2-D mask
``modernbert``  pre-norm (no norm before the first layer's attention) with a final norm; rotary
                positions; every ``global_attn_every_n_layers``-th layer global (rotary theta
                ``global_rope_theta``), the others local (keys within ``local_attention // 2``,
                ``local_rope_theta``); GeGLU feed-forward; biases only where
                ``attention_bias`` / ``mlp_bias`` / ``norm_bias`` say; no token types
==============  ===================================================================================

Outputs are a dict under transformers' names:

==========================  ==================================================================
head                        outputs
==========================  ==================================================================
``model``                   ``last_hidden_state`` [B, T, D], ``pooler_output`` [B, D] (BERT,
                            RoBERTa, XLM-R: the tanh dense layer on the first token)
``masked_lm``               ``logits`` [B, T, V] (decoder tied to the word embeddings, own bias;
                            ModernBERT's bias only with ``decoder_bias``)
``pretraining``             ``logits`` [B, T] (ELECTRA's discriminator: replaced-token scores)
``sequence_classification`` ``logits`` [B, num_labels] (packed: [B, K, num_labels]) (BERT:
                            pooler -> classifier; RoBERTa / XLM-R: dense-tanh-dense on
                            ``<s>``; ELECTRA: dense-gelu-dense; DistilBERT: pre-classifier
                            -> relu -> classifier; DeBERTa: dense-act-dense on the first
                            token; ModernBERT: the first token or the mean of the real ones
                            (``classifier_pooling``) -> dense-act-norm -> classifier)
``token_classification``    ``logits`` [B, T, num_labels] (ModernBERT: dense-act-norm first)
``question_answering``      ``start_logits``, ``end_logits`` [B, T] (ModernBERT: likewise)
==========================  ==================================================================

``output_hidden_states=True`` adds ``hidden_states``: a tuple of num_layers + 1 arrays [B, T, D]
(the embeddings' output, then each layer's; ModernBERT's last one after its final norm, as
transformers gives it). Every layer is a ``transformer.TransformerLayer`` (attention from
``attention.MultiHeadAttention``, whose options give the families' variants); matmuls run in
the policy's compute dtype with float32 accumulation, while embeddings, layer norm, softmax and
logits stay float32; hidden states are returned in the policy's output dtype.
``gradient_checkpointing=True`` recomputes each layer in the backward pass (``jax.checkpoint``).
Where the head reads only the first token (``EncoderConfig.first_token_head``) and no hidden
states are asked for, the last layer computes that row alone: its query, attention output,
residual, norms and feed-forward (keys and values from every row; rotary, window and relative
positions of row 0, so the logits are those of the full computation).

Inputs: ``input_ids`` int[B, T] (``0 <= id < vocab_size``), ``attention_mask`` int/bool[B, T]
(1 at real tokens; default all ones), ``token_type_ids`` int[B, T] (families with token types;
default zeros; DeBERTa without them ignores them, as transformers does), ``position_ids``
int[B, T] (default: as the family counts them; ModernBERT's rotary positions). A length over
``max_positions`` is a ``ValueError`` at trace time.

Packed rows (``textkit.data.packing``: several examples in one row): ``segment_ids`` int[B, T]
(1, 2, ... per example of the row, 0 at padding) makes attention block-diagonal (a token sees
the real tokens of its own example only) and, without ``position_ids``, restarts the positions
at each example (``segment_positions``; RoBERTa's from ``pad_id + 1``). With the
``sequence_classification`` head, ``example_starts`` int[B, K] (the column of each example's
first token) gives ``logits`` float32 [B, K, num_labels], one per example, and the last layer
computes those K rows alone. The result equals each example run alone, in every family: the
relative positions (DeBERTa), rotary positions and local windows (ModernBERT) depend only on
distances inside one example; ModernBERT's mean pooling is refused (a ``ValueError``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from textkit.models.attention import Disentangled, take_rows
from textkit.models.config import ModelConfig
from textkit.models.layers import ACTIVATIONS, Dense, Dropout, Embed, LayerNorm, PositionEmbedding
from textkit.models.registry import register_preset
from textkit.models.transformer import TransformerLayer

__all__ = ["ENCODER_FAMILIES", "ENCODER_HEADS", "Encoder", "EncoderConfig"]

Array = jax.Array

ENCODER_FAMILIES = ("bert", "roberta", "xlm-roberta", "electra", "distilbert", "deberta-v2",
                    "modernbert")
ENCODER_HEADS = ("model", "masked_lm", "pretraining", "sequence_classification",
                 "token_classification", "question_answering")
_POOLED = {"bert": ("model", "sequence_classification"), "roberta": ("model",),
           "xlm-roberta": ("model",)}
"""The (family, head) pairs whose transformers model has a pooler (add_pooling_layer)."""


@dataclasses.dataclass(frozen=True)
class EncoderConfig(ModelConfig):
    """Hyper-parameters of ``Encoder`` (frozen, hashable); names follow textkit (the family
    options keep transformers' names), the mapping from transformers' ``config.json`` is in
    ``textkit.pretrained.encoders``.

    ``type_vocab_size`` 0 means no token types (DistilBERT, DeBERTa-v3, ModernBERT).
    ``embedding_size`` (ELECTRA) is the width of the embeddings, projected to ``hidden_size``
    (None: ``hidden_size``). ``absolute_positions``: a learned position table (False for
    DeBERTa-v3's ``position_biased_input: false`` and ModernBERT). ``classifier_dropout`` None
    uses ``dropout``; ``classifier_activation`` None is the family's (DeBERTa's pooler and
    ModernBERT's head: gelu). ``gradient_checkpointing`` recomputes each layer's activations in
    the backward pass. ``pad_id`` is the padding token (RoBERTa counts positions from
    ``pad_id + 1``). ``labels``: the class names of a classification head (transformers'
    ``id2label``; None: unnamed), one per label, distinct.

    DeBERTa: ``relative_attention`` (transformers' ``pos_att_type``: "c2p", "p2c"),
    ``position_buckets``, ``max_relative_positions`` (< 1: ``max_position_embeddings``),
    ``share_att_key``, ``relative_norm`` (``norm_rel_ebd: layer_norm``). ModernBERT:
    ``global_rope_theta``, ``local_rope_theta``, ``local_attention`` (the window, both sides
    together), ``global_attn_every_n_layers``, ``attention_bias``, ``mlp_bias``, ``norm_bias``,
    ``classifier_bias`` (its head's dense layer), ``decoder_bias``, ``classifier_pooling``
    ("cls" or "mean").
    """

    tiny: ClassVar[Mapping[str, Any]] = {"hidden_size": 16, "num_layers": 1, "num_heads": 2,
                                         "intermediate_size": 32, "embedding_size": None,
                                         "position_buckets": 8, "local_attention": 8}

    _rates = ("dropout", "attention_dropout")
    _choices = {"architecture": ENCODER_FAMILIES, "head": ENCODER_HEADS,
                "activation": tuple(ACTIVATIONS),
                "classifier_activation": (None, *ACTIVATIONS),
                "classifier_pooling": ("cls", "mean")}

    architecture: str = "bert"
    head: str = "model"
    vocab_size: int = 30522
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    intermediate_size: int = 3072
    activation: str = "gelu"
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    embedding_size: int | None = None
    absolute_positions: bool = True
    layer_norm_epsilon: float = 1e-12
    dropout: float = 0.1
    attention_dropout: float = 0.1
    classifier_dropout: float | None = None
    classifier_activation: str | None = None
    num_labels: int = 2
    gradient_checkpointing: bool = False
    relative_attention: tuple[str, ...] = ()
    position_buckets: int = 256
    max_relative_positions: int = -1
    share_att_key: bool = True
    relative_norm: bool = True
    global_rope_theta: float = 160_000.0
    local_rope_theta: float = 10_000.0
    local_attention: int = 128
    global_attn_every_n_layers: int = 3
    attention_bias: bool = True
    mlp_bias: bool = True
    norm_bias: bool = True
    classifier_bias: bool = True
    decoder_bias: bool = True
    classifier_pooling: str = "cls"
    labels: tuple[str, ...] | None = None

    def _validate(self) -> None:
        name = type(self).__name__
        if self.hidden_size % self.num_heads:
            raise ValueError(f"{name}.hidden_size={self.hidden_size} is not divisible by "
                             f"num_heads={self.num_heads}")
        if self.classifier_dropout is not None and not 0.0 <= self.classifier_dropout < 1.0:
            raise ValueError(f"{name}.classifier_dropout={self.classifier_dropout!r}; expected "
                             f"0 <= classifier_dropout < 1 (or None)")
        if self.head == "pretraining" and self.architecture != "electra":
            raise ValueError(f"{name}.head='pretraining' is ELECTRA's discriminator head; "
                             f"architecture={self.architecture!r} has masked_lm")
        if self.architecture in ("distilbert", "modernbert") and self.type_vocab_size:
            raise ValueError(f"{name}: {self.architecture} has no token types "
                             f"(type_vocab_size=0), got {self.type_vocab_size}")
        if self.embedding_size is not None and self.architecture != "electra":
            raise ValueError(f"{name}.embedding_size is ELECTRA's (got "
                             f"architecture={self.architecture!r})")
        if self.embedding_size == self.hidden_size:
            raise ValueError(f"{name}.embedding_size={self.embedding_size} equals hidden_size: "
                             f"leave it None (no projection, as transformers has none then)")
        if not self.absolute_positions and self.architecture not in ("deberta-v2", "modernbert"):
            raise ValueError(f"{name}.absolute_positions=False is DeBERTa's or ModernBERT's "
                             f"(got architecture={self.architecture!r})")
        if self.architecture == "modernbert" and self.absolute_positions:
            raise ValueError(f"{name}: ModernBERT has rotary positions "
                             f"(absolute_positions=False)")
        unknown = set(self.relative_attention) - {"c2p", "p2c"}
        if unknown or (self.relative_attention and self.architecture != "deberta-v2"):
            raise ValueError(f"{name}.relative_attention={self.relative_attention!r}; expected "
                             f"DeBERTa's 'c2p' and / or 'p2c'")
        if self.architecture == "modernbert" and (self.local_attention < 2
                                                  or self.global_attn_every_n_layers < 1):
            raise ValueError(f"{name}: local_attention={self.local_attention} (>= 2) and "
                             f"global_attn_every_n_layers={self.global_attn_every_n_layers} "
                             f"(>= 1) out of range")
        if self.num_labels < 1:
            raise ValueError(f"{name}.num_labels={self.num_labels}; expected >= 1")
        if self.labels is not None:
            object.__setattr__(self, "labels", tuple(str(label) for label in self.labels))
            if len(self.labels) != self.num_labels or len(set(self.labels)) != self.num_labels:
                raise ValueError(f"{name}.labels={self.labels!r}; expected {self.num_labels} "
                                 f"distinct names (num_labels)")
        if self.max_positions < 1:
            raise ValueError(f"{name}.max_position_embeddings={self.max_position_embeddings} "
                             f"leaves no positions (pad_id={self.pad_id})")

    @property
    def offset_positions(self) -> bool:
        """RoBERTa / XLM-R: positions count from ``pad_id + 1``, pads sit at ``pad_id``."""
        return self.architecture in ("roberta", "xlm-roberta")

    @property
    def max_positions(self) -> int:
        """Longest input row: ``max_position_embeddings`` (RoBERTa / XLM-R: minus pad_id + 1,
        e.g. 514 - 2 = 512)."""
        if self.offset_positions:
            return self.max_position_embeddings - self.pad_id - 1
        return self.max_position_embeddings

    @property
    def has_pooler(self) -> bool:
        """Whether transformers' model of this family and head has a pooler."""
        return self.head in _POOLED.get(self.architecture, ())

    @property
    def width(self) -> int:
        """Width of the embedding tables (``embedding_size`` or ``hidden_size``)."""
        return self.embedding_size or self.hidden_size

    @property
    def first_token_head(self) -> bool:
        """Whether the head reads only the first token of the last hidden states (sequence
        classification; ModernBERT's only with ``classifier_pooling`` "cls"): the last layer
        then computes that row alone (``Encoder``)."""
        return self.head == "sequence_classification" and (
            self.architecture != "modernbert" or self.classifier_pooling == "cls")

    @property
    def relative(self) -> Disentangled | None:
        """DeBERTa's relative-attention spec (None for the other families)."""
        if self.architecture != "deberta-v2" or not self.relative_attention:
            return None
        distance = self.max_relative_positions
        return Disentangled(kinds=self.relative_attention, buckets=self.position_buckets,
                            max_distance=distance if distance >= 1
                            else self.max_position_embeddings,
                            share_key=self.share_att_key)

    def layer_options(self, index: int) -> dict[str, Any]:
        """The ``TransformerLayer`` fields of layer ``index`` (family options included)."""
        options = dict(d_model=self.hidden_size, num_heads=self.num_heads,
                       d_ff=self.intermediate_size, dropout=self.dropout,
                       attention_dropout=self.attention_dropout, pre_norm=False,
                       policy=self.policy, activation=self.activation,
                       layer_norm_epsilon=self.layer_norm_epsilon, ff_dropout=0.0,
                       relative=self.relative)
        if self.architecture == "modernbert":
            local = index % self.global_attn_every_n_layers != 0
            options.update(pre_norm=True, attention_norm=index > 0, gated_ff=True,
                           dropout=0.0, ff_dropout=self.dropout,
                           attention_bias=self.attention_bias, ff_bias=self.mlp_bias,
                           norm_bias=self.norm_bias,
                           rotary_theta=self.local_rope_theta if local
                           else self.global_rope_theta,
                           window=self.local_attention // 2 if local else None)
        return options


def roberta_positions(input_ids: Array, pad_id: int) -> Array:
    """RoBERTa's position ids: int[B, T] -> int32[B, T], ``pad_id + 1, pad_id + 2, ...`` over
    the non-pad tokens, ``pad_id`` at pads (transformers'
    ``create_position_ids_from_input_ids``)."""
    real = (input_ids != pad_id).astype(jnp.int32)
    return jnp.cumsum(real, axis=1) * real + pad_id


def segment_positions(segment_ids: Array, first: int = 0, pad: int = 0) -> Array:
    """Positions restarting at each example of packed rows: ``segment_ids`` int[B, T] ->
    int32[B, T], ``first, first + 1, ...`` from each example's first token, ``pad`` at
    segment 0 (padding)."""
    index = jnp.arange(segment_ids.shape[1], dtype=jnp.int32)
    previous = jnp.pad(segment_ids[:, :-1], ((0, 0), (1, 0)), constant_values=-1)
    starts = jax.lax.cummax(jnp.where(segment_ids != previous, index, 0), axis=1)
    return jnp.where(segment_ids != 0, index - starts + first, pad).astype(jnp.int32)


class _Layer(TransformerLayer):
    """``TransformerLayer`` with ``deterministic`` positional, so that ``nn.remat`` can hold it
    static (gradient checkpointing)."""

    def __call__(self, x: Array, mask: Array, deterministic: bool = True,  # noqa: D102
                 relative_embeddings: Array | None = None,
                 rotary_positions: Array | None = None, queries: Array | None = None) -> Array:
        return super().__call__(x, mask, deterministic=deterministic,
                                relative_embeddings=relative_embeddings,
                                rotary_positions=rotary_positions, queries=queries)


_RematLayer = nn.remat(_Layer, static_argnums=(3,))


class Encoder(nn.Module):
    """The encoder families of ``EncoderConfig`` with their heads (module docstring)."""

    config: EncoderConfig

    def setup(self):
        c = self.config
        p = c.policy
        modern = c.architecture == "modernbert"
        self.word_embeddings = Embed(c.vocab_size, c.width, p, scale_by_sqrt_dim=False)
        if c.absolute_positions:
            self.position_embeddings = PositionEmbedding("learned", c.max_position_embeddings,
                                                         c.width, p)
        if c.type_vocab_size:
            self.token_type_embeddings = Embed(c.type_vocab_size, c.width, p,
                                               scale_by_sqrt_dim=False)
        self.embeddings_norm = LayerNorm(p, c.layer_norm_epsilon, use_bias=c.norm_bias)
        if c.embedding_size is not None:
            self.embeddings_project = Dense(c.hidden_size, policy=p)
        if c.relative is not None:
            self.relative_embeddings = Embed(2 * c.relative.span, c.hidden_size, p,
                                             scale_by_sqrt_dim=False)
            if c.relative_norm:
                self.relative_norm = LayerNorm(p, c.layer_norm_epsilon)
        layer_cls = _RematLayer if c.gradient_checkpointing else _Layer
        self.layers = [layer_cls(**c.layer_options(i), name=f"layer_{i}")
                       for i in range(c.num_layers)]
        if modern:
            self.final_norm = LayerNorm(p, c.layer_norm_epsilon, use_bias=c.norm_bias)
        self.drop = Dropout(c.dropout)
        self.classifier_drop = Dropout(c.dropout if c.classifier_dropout is None
                                       else c.classifier_dropout)
        if c.has_pooler:
            self.pooler = Dense(c.hidden_size, policy=p)
        self._setup_head()

    def _setup_head(self) -> None:
        c = self.config
        p = c.policy
        head, modern = c.head, c.architecture == "modernbert"
        head_dense = dict(policy=p, use_bias=c.classifier_bias)
        if head == "masked_lm":
            self.mlm_dense = Dense(c.width, **head_dense)
            self.mlm_norm = LayerNorm(p, c.layer_norm_epsilon, use_bias=c.norm_bias)
            if c.decoder_bias:
                self.mlm_bias = self.param("mlm_bias", nn.initializers.zeros, (c.vocab_size,),
                                           p.param_dtype)
        elif head == "pretraining":
            self.discriminator_dense = Dense(c.hidden_size, policy=p)
            self.discriminator_prediction = Dense(1, policy=p, dtype=jnp.float32)
        elif head != "model":
            if modern or (head == "sequence_classification" and c.architecture != "bert"):
                self.classifier_dense = Dense(c.hidden_size, **head_dense)
            if modern:
                self.classifier_norm = LayerNorm(p, c.layer_norm_epsilon, use_bias=c.norm_bias)
            if head == "question_answering":
                self.qa_outputs = Dense(2, policy=p, dtype=jnp.float32)
            else:
                self.classifier = Dense(c.num_labels, policy=p, dtype=jnp.float32)

    def embed(self, input_ids: Array, token_type_ids: Array | None = None,
              position_ids: Array | None = None, *, deterministic: bool = True,
              attention_mask: Array | None = None) -> Array:
        """Token (+ position + token type) embeddings, layer norm, (DeBERTa: zeroed at
        ``attention_mask`` 0), dropout (and ELECTRA's projection): int[B, T] -> float32
        [B, T, hidden_size]."""
        c = self.config
        x = self.word_embeddings(input_ids)
        if c.absolute_positions:
            if position_ids is None:
                if c.offset_positions:
                    position_ids = roberta_positions(input_ids, c.pad_id)
                else:
                    position_ids = jnp.broadcast_to(jnp.arange(input_ids.shape[1]),
                                                    input_ids.shape)
            x = self.position_embeddings(x, position_ids)
        if c.type_vocab_size:
            if token_type_ids is None:
                token_type_ids = jnp.zeros_like(input_ids)
            x = x + self.token_type_embeddings(token_type_ids)
        elif token_type_ids is not None and c.architecture != "deberta-v2":
            raise ValueError(f"{c.architecture} has no token types: call it without token_type_ids")
        x = self.embeddings_norm(x)
        if c.architecture == "deberta-v2" and attention_mask is not None:
            x = x * (attention_mask != 0)[..., None].astype(x.dtype)
        x = self.drop(x, deterministic=deterministic)
        if c.embedding_size is not None:
            x = self.embeddings_project(x)
        return x

    def _mask(self, attention_mask: Array, segment_ids: Array | None = None) -> Array:
        """Attention mask bool[B, 1, 1, T] (DeBERTa: [B, 1, T, T], real queries only; packed
        rows: block-diagonal bool[B, 1, T, T], the query's segment equal to the key's)."""
        real = attention_mask != 0
        if segment_ids is not None:
            same = segment_ids[:, :, None] == segment_ids[:, None, :]
            return (same & real[:, None, :])[:, None]
        if self.config.architecture == "deberta-v2":
            return real[:, None, :, None] & real[:, None, None, :]
        return real[:, None, None, :]

    def __call__(self, input_ids: Array, attention_mask: Array | None = None,
                 token_type_ids: Array | None = None, position_ids: Array | None = None,
                 segment_ids: Array | None = None, example_starts: Array | None = None, *,
                 deterministic: bool = True,
                 output_hidden_states: bool = False) -> dict[str, Any]:
        """input_ids int[B, T] (and the optional inputs of the module docstring; packed rows:
        ``segment_ids`` int[B, T], ``example_starts`` int[B, K]) -> the head's outputs (module
        docstring); ``deterministic=False`` applies dropout (needs a "dropout" rng)."""
        c = self.config
        c.check_length(input_ids.shape[1], "input_ids")
        self._check_packed(segment_ids, example_starts)
        if attention_mask is None:
            attention_mask = (jnp.ones(input_ids.shape, bool) if segment_ids is None
                              else segment_ids != 0)
        if segment_ids is not None and position_ids is None:
            position_ids = (segment_positions(segment_ids, c.pad_id + 1, c.pad_id)
                            if c.offset_positions else segment_positions(segment_ids))
        mask = self._mask(attention_mask, segment_ids)
        x = self.embed(input_ids, token_type_ids, position_ids, deterministic=deterministic,
                       attention_mask=attention_mask)
        relative = None
        if c.relative is not None:
            relative = self.relative_embeddings.embedding.astype(jnp.float32)
            if c.relative_norm:
                relative = self.relative_norm(relative)
        rotary = position_ids if c.architecture == "modernbert" else None
        states, pruned = [x], False
        for index, layer in enumerate(self.layers):
            rel = None if relative is None else self.drop(relative, deterministic=deterministic)
            if (index == c.num_layers - 1 and c.first_token_head
                    and not output_hidden_states):   # the first row (of each example) alone
                if example_starts is None:
                    queries, query_mask = jnp.zeros((x.shape[0], 1), jnp.int32), mask[:, :, :1]
                else:
                    queries = example_starts.astype(jnp.int32)                   # [B, K]
                    query_mask = take_rows(mask[:, 0], queries)[:, None]          # [B,1,K,T]
                x, pruned = layer(x, query_mask, deterministic, rel, rotary, queries), True
            else:
                x = layer(x, mask, deterministic, rel, rotary)
            states.append(x)
        if c.architecture == "modernbert":
            x = states[-1] = self.final_norm(x)
        if example_starts is None:
            first = x[:, 0]                                               # [B, D]
        elif pruned:
            first = x                                                     # [B, K, D]
        else:
            first = take_rows(x, example_starts.astype(jnp.int32))        # [B, K, D]
        out_dtype = c.policy.output_dtype
        out: dict[str, Any] = {}
        if c.head == "model":
            out["last_hidden_state"] = x.astype(out_dtype)
        if c.has_pooler:
            pooled = jnp.tanh(self.pooler(first))
            if c.head == "model":
                out["pooler_output"] = pooled.astype(out_dtype)
        out.update(self._head(x, first, pooled if c.has_pooler else None, attention_mask,
                              deterministic))
        if output_hidden_states:
            out["hidden_states"] = tuple(h.astype(out_dtype) for h in states)
        return out

    def _check_packed(self, segment_ids: Array | None, example_starts: Array | None) -> None:
        """Packed inputs the configuration can take exactly, else a ``ValueError``."""
        c = self.config
        if example_starts is not None and (segment_ids is None
                                           or c.head != "sequence_classification"):
            raise ValueError("example_starts needs segment_ids and the sequence_classification "
                             f"head (got head={c.head!r})")
        if segment_ids is not None and c.head == "sequence_classification" and (
                not c.first_token_head):
            raise ValueError(f"{c.architecture} with classifier_pooling="
                             f"{c.classifier_pooling!r} pools every token of a row: packed "
                             "rows (segment_ids) need the first-token ('cls') pooling")
        if segment_ids is not None and c.head == "sequence_classification" and (
                example_starts is None):
            raise ValueError("packed rows (segment_ids) with the sequence_classification head "
                             "need example_starts (one logits row per example)")

    def _head(self, x: Array, first: Array, pooled: Array | None, attention_mask: Array,
              deterministic: bool) -> dict[str, Array]:
        """The head's float32 logits from the last hidden states x [B, T, D] (``first``: the
        first token of each row [B, D], or of each packed example [B, K, D])."""
        c = self.config
        drop = lambda h: self.classifier_drop(h, deterministic=deterministic)  # noqa: E731
        if c.head == "model":
            return {}
        if c.head == "masked_lm":
            return {"logits": self._masked_lm(x)}
        if c.head == "pretraining":
            h = ACTIVATIONS[c.activation](self.discriminator_dense(x))
            return {"logits": self.discriminator_prediction(h)[..., 0]}
        if c.architecture == "modernbert":
            return self._modernbert_head(x, first, attention_mask, drop)
        if c.head == "sequence_classification":
            if c.architecture == "bert":
                return {"logits": self.classifier(drop(pooled))}
            if c.architecture == "distilbert":
                h = drop(jax.nn.relu(self.classifier_dense(first)))
            else:
                act = {"electra": ACTIVATIONS["gelu"],
                       "deberta-v2": ACTIVATIONS[c.classifier_activation or "gelu"]}.get(
                    c.architecture, jnp.tanh)
                h = drop(act(self.classifier_dense(drop(first))))
            return {"logits": self.classifier(h)}
        if c.head == "token_classification":
            return {"logits": self.classifier(drop(x))}
        logits = self.qa_outputs(drop(x) if c.architecture == "distilbert" else x)
        return {"start_logits": logits[..., 0], "end_logits": logits[..., 1]}

    def _masked_lm(self, x: Array) -> Array:
        """Masked-LM logits float32 [B, T, V]: dense -> activation -> norm -> tied decoder
        (+ bias)."""
        c = self.config
        act = {"roberta": "gelu", "xlm-roberta": "gelu", "electra": "gelu",
               "modernbert": c.classifier_activation or "gelu"}.get(c.architecture,
                                                                    c.activation)
        logits = self.word_embeddings.attend(self.mlm_norm(ACTIVATIONS[act](self.mlm_dense(x))))
        return logits + self.mlm_bias.astype(jnp.float32) if c.decoder_bias else logits

    def _modernbert_head(self, x: Array, first: Array, attention_mask: Array,
                         drop) -> dict[str, Array]:
        """ModernBERT's heads: (pooling ->) dense -> activation -> norm -> dropout -> output."""
        c = self.config
        if c.head == "sequence_classification":
            if c.classifier_pooling == "cls":
                x = first
            else:
                weights = (attention_mask != 0).astype(jnp.float32)[..., None]   # [B, T, 1]
                x = (x * weights).sum(1) / weights.sum(1)
        act = ACTIVATIONS[c.classifier_activation or "gelu"]
        h = drop(self.classifier_norm(act(self.classifier_dense(x))))
        if c.head == "question_answering":
            logits = self.qa_outputs(h)
            return {"start_logits": logits[..., 0], "end_logits": logits[..., 1]}
        return {"logits": self.classifier(h)}


# ------------------------------------------------------------------------------------ presets
def _bert(name: str, layers: int, hidden: int, heads: int, **fields: Any) -> None:
    register_preset(name, "encoder", Encoder, EncoderConfig,
                    **{"architecture": "bert", "num_layers": layers, "hidden_size": hidden,
                       "num_heads": heads, "intermediate_size": 4 * hidden, "pad_id": 0,
                       **fields})


_bert("bert_base_uncased", 12, 768, 12)
_bert("bert_base_cased", 12, 768, 12, vocab_size=28996)
_bert("bert_large_uncased", 24, 1024, 16)
_bert("bert_base_multilingual_cased", 12, 768, 12, vocab_size=119547)
_bert("bert_tiny", 2, 128, 2)        # google/bert_uncased_L-2_H-128_A-2 (the miniatures)
_bert("bert_mini", 4, 256, 4)        # L-4_H-256_A-4
_bert("bert_small", 4, 512, 8)       # L-4_H-512_A-8
_bert("bert_medium", 8, 512, 8)      # L-8_H-512_A-8
_ROBERTA = dict(vocab_size=50265, max_position_embeddings=514, type_vocab_size=1,
                layer_norm_epsilon=1e-5, pad_id=1)
register_preset("roberta_base", "encoder", Encoder, EncoderConfig, architecture="roberta",
                **_ROBERTA)
register_preset("roberta_large", "encoder", Encoder, EncoderConfig, architecture="roberta",
                num_layers=24, hidden_size=1024, num_heads=16, intermediate_size=4096,
                **_ROBERTA)
register_preset("xlm_roberta_base", "encoder", Encoder, EncoderConfig, architecture="xlm-roberta",
                **{**_ROBERTA, "vocab_size": 250002})
register_preset("electra_small_discriminator", "encoder", Encoder, EncoderConfig,
                architecture="electra", head="pretraining", embedding_size=128, hidden_size=256,
                num_heads=4, intermediate_size=1024, pad_id=0)
register_preset("electra_base_discriminator", "encoder", Encoder, EncoderConfig,
                architecture="electra", head="pretraining", pad_id=0)   # 768 wide: no projection
register_preset("distilbert_base_uncased", "encoder", Encoder, EncoderConfig,
                architecture="distilbert", num_layers=6, type_vocab_size=0, pad_id=0)
_DEBERTA_V3 = dict(architecture="deberta-v2", vocab_size=128100, type_vocab_size=0,
                   absolute_positions=False, relative_attention=("p2c", "c2p"),
                   position_buckets=256, share_att_key=True, layer_norm_epsilon=1e-7, pad_id=0)
register_preset("deberta_v3_xsmall", "encoder", Encoder, EncoderConfig, num_layers=12,
                hidden_size=384, num_heads=6, intermediate_size=1536, **_DEBERTA_V3)
register_preset("deberta_v3_small", "encoder", Encoder, EncoderConfig, num_layers=6,
                **_DEBERTA_V3)
register_preset("deberta_v3_base", "encoder", Encoder, EncoderConfig, **_DEBERTA_V3)
register_preset("deberta_v3_large", "encoder", Encoder, EncoderConfig, num_layers=24,
                hidden_size=1024, num_heads=16, intermediate_size=4096, **_DEBERTA_V3)
_MODERNBERT = dict(architecture="modernbert", vocab_size=50368, type_vocab_size=0,
                   absolute_positions=False, max_position_embeddings=8192,
                   layer_norm_epsilon=1e-5, dropout=0.0, attention_dropout=0.0,
                   classifier_dropout=0.0, attention_bias=False, mlp_bias=False,
                   norm_bias=False, classifier_bias=False, pad_id=50283)
register_preset("modernbert_base", "encoder", Encoder, EncoderConfig, num_layers=22,
                intermediate_size=1152, **_MODERNBERT)
register_preset("modernbert_large", "encoder", Encoder, EncoderConfig, num_layers=28,
                hidden_size=1024, num_heads=16, intermediate_size=2624, **_MODERNBERT)
