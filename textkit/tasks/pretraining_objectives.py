"""The pretraining objectives of encoders: the networks (``PretrainingModel``) and their loss.

* **Masked LM** (BERT, RoBERTa): the encoder with its family's ``masked_lm`` head (the decoder
  tied to the word embeddings, exported as ``BertForMaskedLM``, ``RobertaForMaskedLM``, ...)
  predicts the original ids of the masked tokens; the loss is the mean negative
  log-likelihood over them. The head runs at the batch's prediction slots only
  (``mlm_positions``, ``mlm_weights``: ``textkit.data.masking``), the last hidden states
  gathered there, so the vocabulary projection and its softmax cost ~30 % of what every
  position would (the full ``logits`` the encoder's forward pass also builds are left unused
  and compiled away).
* **Sentence pairs** (optional, with masked LM): BERT's next-sentence head (``PairHead``: the
  pooler, dense + tanh on the first token, then 2 logits; for NSP and for ALBERT's sentence
  order, SOP), its mean cross-entropy over the pairs added to the MLM loss. The head serves
  pretraining only: the ``...ForMaskedLM`` export leaves it out.
* **ELECTRA** (replaced-token detection): a generator (``generator_config``: the
  discriminator's layers with hidden size, feed-forward size and heads scaled by
  ``generator_size``; ELECTRA-small's is 1/4) shares the discriminator's embeddings (word,
  position, token type and their norm: its params hold only the rest, the shared ones are
  read from the discriminator at every step) and is trained as a masked LM; its samples
  (``jax.random.categorical`` at the prediction slots, no gradient) replace the masked
  tokens, and the discriminator (head ``pretraining``) tells for every real token whether it
  differs from the original (sigmoid cross-entropy). Both train jointly: loss =
  generator MLM mean + ``discriminator_weight`` (50) x discriminator mean.

The loss follows ``textkit.training.train_step``'s contract: ``(loss_sum, (weight_sum,
metrics))`` with ``weight_sum`` the masked tokens and ``loss_sum / weight_sum`` the loss
above; ``metrics`` are sums (``mlm_nll``, ``mlm_correct``, ``masked``, ``input_tokens``, and
``pair_nll`` / ``pair_correct`` / ``pairs`` or ``rtd_bce`` / ``rtd_correct`` / ``rtd_tokens`` /
``replaced``), so they add up over micro-batches and evaluation batches.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from textkit.models import Encoder, EncoderConfig
from textkit.models.layers import Dense, log_softmax
from textkit.precision import Policy

__all__ = ["SHARED_EMBEDDINGS", "PairHead", "PretrainingModel", "generator_config",
           "generator_params", "predict_at", "pretraining_loss", "replaced_tokens"]

SHARED_EMBEDDINGS = ("word_embeddings", "position_embeddings", "token_type_embeddings",
                     "embeddings_norm")
"""The params ELECTRA's generator reads from the discriminator."""

Params = Any


class PairHead(nn.Module):
    """BERT's next-sentence head: first token float[B, D] -> float32 logits [B, 2]."""

    hidden_size: int
    policy: Policy = Policy()

    @nn.compact
    def __call__(self, first: jax.Array) -> jax.Array:
        pooled = jnp.tanh(Dense(self.hidden_size, policy=self.policy, name="pooler")(first))
        return Dense(2, policy=self.policy, name="classifier")(pooled).astype(jnp.float32)


def generator_config(discriminator: EncoderConfig, size: float) -> EncoderConfig:
    """ELECTRA's generator for ``discriminator``: hidden size, heads and feed-forward size
    times ``size``, the same layers, a masked-LM head, embeddings of the discriminator's
    width (projected to its hidden size when they differ)."""
    heads = max(1, round(discriminator.num_heads * size))
    hidden = heads * max(1, round(discriminator.hidden_size * size / heads))
    return dataclasses.replace(
        discriminator, head="masked_lm", hidden_size=hidden, num_heads=heads,
        intermediate_size=max(1, round(discriminator.intermediate_size * size)),
        embedding_size=None if hidden == discriminator.width else discriminator.width,
        labels=None)


@dataclasses.dataclass(frozen=True)
class PretrainingModel:
    """The networks of one objective: ``encoder`` (the model exported: the masked-LM head, or
    ELECTRA's discriminator), ELECTRA's ``generator`` and the optional ``pair_head``. Its
    params are ``{"encoder": ..., "generator": ... (shared embeddings left out),
    "pair_head": ...}``."""

    encoder: Encoder
    generator: Encoder | None = None
    pair_head: PairHead | None = None

    @property
    def config(self) -> EncoderConfig:
        """The exported encoder's config."""
        return self.encoder.config

    def init(self, rng: jax.Array) -> Params:
        """Fresh params of every network."""
        dummy = jnp.zeros((1, 8), jnp.int32)
        keys = jax.random.split(rng, 3)
        params = {"encoder": self.encoder.init(keys[0], dummy)["params"]}
        if self.generator is not None:
            own = self.generator.init(keys[1], dummy)["params"]
            params["generator"] = {k: v for k, v in own.items() if k not in SHARED_EMBEDDINGS}
        if self.pair_head is not None:
            params["pair_head"] = self.pair_head.init(
                keys[2], jnp.zeros((1, self.config.hidden_size)))["params"]
        return params


def generator_params(params: Params) -> Params:
    """The generator's whole params: its own and the discriminator's shared embeddings."""
    shared = {k: v for k, v in params["encoder"].items() if k in SHARED_EMBEDDINGS}
    return {**params["generator"], **shared}


def predict_at(network: Encoder, params: Params, hidden: jax.Array,
               positions: jax.Array) -> jax.Array:
    """The masked-LM head of ``network`` at ``positions`` int[B, P] of its last hidden states
    float[B, T, D]: logits float32 [B, P, V]."""
    gathered = jnp.take_along_axis(hidden, positions[..., None], axis=1)        # [B, P, D]
    return network.apply({"params": params}, gathered, method="_masked_lm")


def _mlm(logits: jax.Array, targets: jax.Array,
         weights: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(summed NLL, correct predictions) at the weighted positions of logits [B, T, V]."""
    nll = -jnp.take_along_axis(log_softmax(logits), targets[..., None], -1)[..., 0]
    correct = (jnp.argmax(logits, -1) == targets).astype(jnp.float32)
    return (nll * weights).sum(), (correct * weights).sum()


def replaced_tokens(logits: jax.Array, targets: jax.Array, positions: jax.Array,
                    weights: jax.Array, real: jax.Array,
                    key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """ELECTRA's discriminator input and labels: at the slots in use (``positions`` int[B, P]
    where ``weights`` float[B, P] > 0) a sample of the generator's ``logits`` float32
    [B, P, V] (no gradient), elsewhere the original ``targets`` int[B, T]; the label
    float32[B, T] is 1 where the input differs from the original (a sample equal to it counts
    as original), at real tokens (``real``) only."""
    sampled = jax.random.categorical(key, jax.lax.stop_gradient(logits))        # [B, P]
    rows = jnp.arange(targets.shape[0])[:, None]
    slots = jnp.where(weights > 0, positions, targets.shape[1])   # unused: out of range
    fake = targets.at[rows, slots].set(sampled.astype(targets.dtype), mode="drop")
    return fake.astype(jnp.int32), (fake != targets).astype(jnp.float32) * real


def pretraining_loss(model: PretrainingModel, *, discriminator_weight: float = 50.0):
    """``loss_fn(params, batch, rng) -> (loss_sum, (masked, metrics))`` of ``model``'s
    objective (module docstring). ``batch``: ``input_ids`` (masked), ``targets``,
    ``mlm_positions``, ``mlm_weights``, ``attention_mask`` (and ``token_type_ids``,
    ``pair_labels``, ``pair_weights``); ``rng`` None evaluates deterministically (ELECTRA
    then samples with a fixed key)."""

    def loss_fn(params: Params, batch: Mapping[str, Any], rng: jax.Array | None):
        deterministic = rng is None
        keys = jax.random.split(jax.random.key(0) if deterministic else rng, 3)
        inputs = {k: batch[k] for k in ("attention_mask", "token_type_ids") if k in batch}
        weights = batch["mlm_weights"]
        real = batch["attention_mask"].astype(jnp.float32)
        masked = weights.sum()

        def run(network: Encoder, network_params: Params, ids: jax.Array, key: jax.Array,
                **options: Any) -> dict[str, Any]:
            return network.apply({"params": network_params}, ids, **inputs,
                                 deterministic=deterministic,
                                 rngs={} if deterministic else {"dropout": key}, **options)

        lm = model.encoder if model.generator is None else model.generator
        lm_params = params["encoder"] if model.generator is None else generator_params(params)
        out = run(lm, lm_params, batch["input_ids"], keys[0], output_hidden_states=True)
        positions = batch["mlm_positions"]
        logits = predict_at(lm, lm_params, out["hidden_states"][-1], positions)  # [B, P, V]
        nll, correct = _mlm(logits, jnp.take_along_axis(batch["targets"], positions, 1),
                            weights)
        metrics = {"mlm_nll": nll, "mlm_correct": correct, "masked": masked,
                   "input_tokens": real.sum()}
        loss = nll
        if model.pair_head is not None:
            pair_logits = model.pair_head.apply({"params": params["pair_head"]},
                                                out["hidden_states"][-1][:, 0])   # [B, 2]
            pair_nll, pair_correct = _mlm(pair_logits[:, None], batch["pair_labels"][:, None],
                                          batch["pair_weights"][:, None])
            pairs = batch["pair_weights"].sum()
            loss = loss + pair_nll * masked / jnp.maximum(pairs, 1.0)
            metrics.update(pair_nll=pair_nll, pair_correct=pair_correct, pairs=pairs)
        if model.generator is not None:
            fake, replaced = replaced_tokens(logits, batch["targets"], positions, weights,
                                             real, keys[1])
            scores = run(model.encoder, params["encoder"], fake, keys[2])["logits"]   # [B, T]
            bce = (optax.sigmoid_binary_cross_entropy(scores, replaced) * real).sum()
            right = ((scores > 0).astype(jnp.float32) == replaced).astype(jnp.float32) * real
            loss = loss + discriminator_weight * bce * masked / jnp.maximum(real.sum(), 1.0)
            metrics.update(rtd_bce=bce, rtd_correct=right.sum(), rtd_tokens=real.sum(),
                           replaced=replaced.sum())
        return loss, (masked, metrics)

    return loss_fn
