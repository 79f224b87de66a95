"""Sentence classifiers on (pretrained) word embeddings: Kim's TextCNN and an (Bi)LSTM.

Both take ``tokens`` int32 [B, T] (padding is ``config.pad_id``, real tokens first) and return
``logits`` float32 [B, num_classes]. Padding is invisible: its embeddings are zeroed and the
pooling only sees positions (or convolution windows) that touch a real token, so appending
padding never changes the output.

Embedding modes (Kim 2014):

* ``rand``: one table, random init, trained.
* ``static``: one pretrained table, frozen.
* ``non-static``: one pretrained table, fine-tuned.
* ``multichannel``: a frozen and a fine-tuned copy of the pretrained table, concatenated on the
  feature axis (for TextCNN this is Kim's "each filter is applied to both channels and the
  results are added").

A frozen table lives in params under the name ``frozen_embedding`` (a tuned one under
``embedding``). The forward pass reads it through ``stop_gradient`` so its gradient is exactly
zero, and ``textkit.training.freeze(tx, trainable_mask)`` (zero updates and no state for the
``trainable_mask(params) == False`` leaves) keeps weight decay or any other update from moving
it. Use ``init_classifier(model, rng, pretrained)`` to
initialize params with the matrix from ``TokenEmbedding.for_vocab``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from textkit.models.config import ModelConfig
from textkit.models.kernels import mixed_einsum
from textkit.models.layers import Dense, Dropout, lookup, uniform_init
from textkit.models.registry import register_preset
from textkit.precision import Policy, mask_value

__all__ = [
    "EMBEDDING_MODES",
    "TextCNNConfig",
    "TextCNN",
    "WideConv",
    "RNNClassifierConfig",
    "RNNClassifier",
    "init_classifier",
    "with_embedding_matrix",
    "trainable_mask",
]

EMBEDDING_MODES = ("rand", "static", "non-static", "multichannel")
FROZEN = "frozen_embedding"
TUNED = "embedding"


@dataclasses.dataclass(frozen=True)
class _ClassifierConfig(ModelConfig):
    """The fields and checks both classifier configs share (each adds its own and ``dropout``)."""

    _rates = ("dropout",)
    _choices = {"mode": EMBEDDING_MODES}

    vocab_size: int
    num_classes: int = 2
    embed_dim: int = 300
    mode: str = "rand"

    def _validate(self) -> None:
        if self.vocab_size <= 0 or self.embed_dim <= 0 or self.num_classes < 2:
            raise ValueError(f"need vocab_size > 0, embed_dim > 0, num_classes >= 2; got {self}")

    @property
    def output_vocab_size(self) -> None:
        """None: a classifier predicts ``num_classes`` labels, no tokens."""
        return None


@dataclasses.dataclass(frozen=True)
class TextCNNConfig(_ClassifierConfig):
    """Kim (2014) CNN: filter windows ``windows`` with ``num_filters`` maps each, ReLU,
    max-over-time pooling, dropout, dense to ``num_classes``. Kim's l2 max-norm constraint on
    the output weights is an optimizer link: ``textkit.training.max_norm``."""

    tiny: ClassVar[Mapping[str, Any]] = {"embed_dim": 16, "num_filters": 4}

    windows: tuple[int, ...] = (3, 4, 5)
    num_filters: int = 100
    dropout: float = 0.5

    def _validate(self) -> None:
        super()._validate()
        if not self.windows or min(self.windows) < 1 or self.num_filters < 1:
            raise ValueError(f"need windows >= 1 and num_filters >= 1; got {self.windows}, "
                             f"{self.num_filters}")


@dataclasses.dataclass(frozen=True)
class RNNClassifierConfig(_ClassifierConfig):
    """LSTM (or BiLSTM) over the embeddings, ``mean`` or ``max`` pooling of the outputs over
    the real tokens, dropout, dense to ``num_classes``. ``hidden_size`` is per direction."""

    tiny: ClassVar[Mapping[str, Any]] = {"embed_dim": 16, "hidden_size": 8}

    _choices = {**_ClassifierConfig._choices, "pooling": ("mean", "max")}

    hidden_size: int = 150
    bidirectional: bool = False
    pooling: str = "mean"
    dropout: float = 0.5



class EmbeddingChannels(nn.Module):
    """Looks up ``tokens`` int32 [B, T] in the mode's tables -> [B, T, channels * D] in the
    compute dtype, zero at padding positions."""

    vocab_size: int
    embed_dim: int
    mode: str
    pad_id: int
    policy: Policy

    @nn.compact
    def __call__(self, tokens: jax.Array) -> jax.Array:
        shape = (self.vocab_size, self.embed_dim)
        init = uniform_init(0.25)  # Kim's init for random word vectors
        channels = []
        if self.mode in ("static", "multichannel"):
            table = self.param(FROZEN, init, shape, self.policy.param_dtype)
            channels.append(lookup(jax.lax.stop_gradient(table), tokens))
        if self.mode in ("rand", "non-static", "multichannel"):
            table = self.param(TUNED, init, shape, self.policy.param_dtype)
            channels.append(lookup(table, tokens))
        x = jnp.concatenate(channels, axis=-1).astype(self.policy.compute_dtype)  # [B,T,C*D]
        return x * (tokens != self.pad_id)[..., None].astype(x.dtype)


class WideConv(nn.Module):
    """Kim's wide 1-D convolution: ``x`` [B, T, C] -> float32 [B, T + window - 1, features],
    with ``window - 1`` zeros padded on each side, so output ``j`` covers input positions
    ``j - window + 1 .. j``.

    Written as an unfold (the ``window`` shifted copies of ``x`` side by side, [B, T', window*C])
    and one matmul in ``policy.compute_dtype`` with float32 accumulation: on XLA:CPU this trains
    faster than ``lax.conv`` (whose gradient is slow there). Params are those of
    ``nn.Conv``: ``kernel`` [window, C, features] (LeCun normal) and ``bias`` [features].
    """

    window: int
    features: int
    policy: Policy = Policy()

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        w, channels = self.window, x.shape[-1]
        kernel = self.param("kernel", nn.initializers.lecun_normal(),
                            (w, channels, self.features), self.policy.param_dtype)
        bias = self.param("bias", nn.initializers.zeros_init(), (self.features,),
                          self.policy.param_dtype)
        x = x.astype(self.policy.compute_dtype)
        padded = jnp.pad(x, ((0, 0), (w - 1, w - 1), (0, 0)))             # [B, T+2w-2, C]
        out_len = x.shape[1] + w - 1
        unfolded = jnp.concatenate([padded[:, i:i + out_len] for i in range(w)],
                                   axis=-1)                                # [B, T', w*C]
        h = mixed_einsum("btc,ck->btk", unfolded, kernel.reshape(w * channels, self.features),
                         self.policy.compute_dtype)                       # [B, T', K] f32
        return h + bias.astype(jnp.float32)


class _SentenceClassifier(nn.Module):
    """What TextCNN and RNNClassifier share: the embedding channels in, dropout and the output
    layer out (subclasses define ``config`` and a compact ``__call__``)."""

    def _embed(self, tokens: jax.Array) -> jax.Array:
        """tokens int32 [B, T] -> [B, T, channels * D] in the compute dtype, zero at padding."""
        cfg = self.config
        return EmbeddingChannels(cfg.vocab_size, cfg.embed_dim, cfg.mode, cfg.pad_id,
                                 cfg.policy, name="embed")(tokens)

    def _classify(self, features: jax.Array, deterministic: bool) -> jax.Array:
        """features float32 [B, F] -> dropout -> logits float32 [B, num_classes]."""
        cfg = self.config
        features = Dropout(cfg.dropout)(features, deterministic=deterministic)
        # A tiny matmul: computed in float32; LeCun-normal kernel as flax's nn.Dense.
        policy = dataclasses.replace(cfg.policy, compute_dtype=jnp.float32)
        return Dense(cfg.num_classes, policy, kernel_init=nn.initializers.lecun_normal(),
                     name="output", dtype=jnp.float32)(features)


class TextCNN(_SentenceClassifier):
    """Kim's CNN sentence classifier; see ``TextCNNConfig``."""

    config: TextCNNConfig

    @nn.compact
    def __call__(self, tokens: jax.Array, *, deterministic: bool = True) -> jax.Array:
        """tokens int32 [B, T] -> logits float32 [B, num_classes]."""
        cfg = self.config
        x = self._embed(tokens)                                           # [B, T, C*D]
        lengths = jnp.sum(tokens != cfg.pad_id, axis=-1)                  # [B]
        pooled = []
        for w in cfg.windows:
            # Wide convolution (w-1 zeros each side, as Kim's code pads): output j covers
            # positions j-w+1 .. j, and touches a real token iff j < length + w - 1.
            h = WideConv(w, cfg.num_filters, cfg.policy, name=f"conv{w}")(x)  # [B, T+w-1, K]
            h = nn.relu(h)
            touches_real = jnp.arange(h.shape[1])[None, :] < (lengths[:, None] + w - 1)
            # ReLU outputs are >= 0, so filling the other windows with 0 leaves the max over
            # the real windows unchanged, and an empty (dummy) row pools to 0, not -inf.
            h = jnp.where(touches_real[..., None], h, 0.0)
            pooled.append(jnp.max(h, axis=1))                             # [B, K]
        features = jnp.concatenate(pooled, axis=-1)                       # [B, len(windows)*K]
        return self._classify(features, deterministic)


class RNNClassifier(_SentenceClassifier):
    """(Bi)LSTM sentence classifier; see ``RNNClassifierConfig``."""

    config: RNNClassifierConfig

    @nn.compact
    def __call__(self, tokens: jax.Array, *, deterministic: bool = True) -> jax.Array:
        """tokens int32 [B, T] -> logits float32 [B, num_classes]."""
        cfg, policy = self.config, self.config.policy
        x = self._embed(tokens)                                           # [B, T, C*D]
        mask = tokens != cfg.pad_id                                       # [B, T]
        lengths = jnp.sum(mask, axis=-1)                                  # [B]

        # flax's LSTM cell on purpose: its parameter tree (ii, if, ..., hg) is this model's.
        def lstm(name: str) -> nn.RNN:
            cell = nn.OptimizedLSTMCell(cfg.hidden_size, dtype=policy.compute_dtype,
                                        param_dtype=policy.param_dtype, name=name)
            return nn.RNN(cell)

        if cfg.bidirectional:
            rnn = nn.Bidirectional(lstm("lstm_forward"), lstm("lstm_backward"))
        else:
            rnn = lstm("lstm")
        # The backward direction uses seq_lengths to reverse only the real tokens.
        h = rnn(x, seq_lengths=lengths).astype(jnp.float32)               # [B, T, H or 2H]
        if cfg.pooling == "mean":
            total = jnp.sum(jnp.where(mask[..., None], h, 0.0), axis=1)
            pooled = total / jnp.maximum(lengths, 1)[:, None].astype(jnp.float32)
        else:
            pooled = jnp.max(jnp.where(mask[..., None], h, mask_value(jnp.float32)), axis=1)
            pooled = jnp.where((lengths > 0)[:, None], pooled, 0.0)       # empty dummy rows
        return self._classify(pooled, deterministic)


# ------------------------------------------------------------------- params and optimizer
def _is_embedding(path: tuple[Any, ...]) -> bool:
    return bool(path) and getattr(path[-1], "key", None) in (FROZEN, TUNED)


def with_embedding_matrix(params: Any, matrix: np.ndarray | jax.Array) -> Any:
    """Copy of ``params`` with every embedding table (frozen and tuned) set to ``matrix``
    float [vocab_size, embed_dim], cast to the table's dtype. Each table gets its own buffer,
    so a train step that donates ``params`` can donate both multichannel tables."""

    def replace(path, leaf):
        if not _is_embedding(path):
            return leaf
        if matrix.shape != leaf.shape:
            raise ValueError(f"pretrained matrix has shape {tuple(matrix.shape)}, the model's "
                             f"embedding {jax.tree_util.keystr(path)} needs {leaf.shape} "
                             "(vocab_size, embed_dim)")
        return jnp.array(matrix, dtype=leaf.dtype, copy=True)  # never shared

    return jax.tree_util.tree_map_with_path(replace, params)


def init_classifier(model: TextCNN | RNNClassifier, rng: jax.Array,
                    pretrained: np.ndarray | jax.Array | None = None) -> Any:
    """``params`` for ``model``; ``pretrained`` float [vocab_size, embed_dim] (e.g. the matrix
    of ``TokenEmbedding.for_vocab``) is required for every mode except ``rand``, where it is
    refused."""
    mode = model.config.mode
    if (pretrained is None) != (mode == "rand"):
        raise ValueError(f"embedding mode {mode!r} " + (
            "takes no pretrained matrix" if mode == "rand" else "needs a pretrained matrix"))
    tokens = jnp.full((1, max(getattr(model.config, "windows", (1,)))), model.config.pad_id,
                      jnp.int32)
    params = jax.jit(model.init)(rng, tokens)["params"]
    return params if pretrained is None else with_embedding_matrix(params, pretrained)


def trainable_mask(params: Any) -> Any:
    """Pytree of bools like ``params``: False for frozen embedding tables, True elsewhere
    (usable with ``optax.masked``)."""
    return jax.tree_util.tree_map_with_path(
        lambda path, _: not any(getattr(k, "key", None) == FROZEN for k in path), params)


# ----------------------------------------------------------------------------------- presets
# Kim's CNN (windows 3/4/5 x 100 maps, dropout 0.5, 300-d embeddings), a one-direction LSTM
# and a BiLSTM (150 units per direction), mean pooling, dropout 0.5. Pass ``vocab_size``.
register_preset("textcnn", "classification", TextCNN, TextCNNConfig)
register_preset("lstm_classifier", "classification", RNNClassifier, RNNClassifierConfig)
register_preset("bilstm_classifier", "classification", RNNClassifier, RNNClassifierConfig,
                bidirectional=True)
