"""Per-row sampling: each row's own key, the set of tokens it may draw from, the draw, and the
log-probabilities a result reports. The ``Generator`` and the serving engine
(``textkit.serve.engine``) draw through these functions, so the same request sampled with the
same seed gives the same tokens in either, whatever else shares its batch.

* A row's key is ``fold_in(fold_in(key(seed), prompt index), sequence index)`` (``row_keys``);
  step t draws with ``fold_in(row key, t)``. Nothing about the row's place in a batch enters.
* The draw is ``jax.random.categorical`` over the whole vocabulary (tokens outside the kept
  set at -inf), one row at a time (``draw``), so a row's noise depends only on its key.
* The kept set follows transformers' warpers: temperature, then top-k, top-p and min-p.
  ``kept`` takes the options as Python numbers (one set for the batch: ``lax.top_k`` of
  ``top_k`` candidates); ``kept_rows`` takes them as arrays (a value per row: one sort of the
  vocabulary). Both give the same set.
* Log-probabilities are the raw ``log_softmax`` of the model's logits, before any processor
  or warper (repetition penalty, temperature, top-k, top-p), as vLLM reports them by default
  (``chosen_logprobs``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from textkit.decoding.filters import NEG_INF, top_k_top_p

__all__ = ["chosen_logprobs", "draw", "kept", "kept_rows", "row_keys", "seed_value",
           "step_keys"]


def seed_value(seed: int) -> np.uint32:
    """A seed of any size as the uint32 a key is made from (``seed`` mod 2**32)."""
    return np.uint32(int(seed) % 2**32)


def row_keys(seeds: jax.Array, pairs: jax.Array) -> jax.Array:
    """Keys key[N] of rows ``pairs`` int32[N, 2] (prompt index, sequence index) under
    ``seeds`` uint32[] (one for every row) or uint32[N]."""
    seeds = jnp.broadcast_to(jnp.asarray(seeds, jnp.uint32), pairs.shape[:1])

    def one(seed: jax.Array, pair: jax.Array) -> jax.Array:
        return jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), pair[0]), pair[1])

    return jax.vmap(one)(seeds, pairs)


def step_keys(keys: jax.Array, steps: jax.Array) -> jax.Array:
    """The keys key[N] of each row's next draw: its key folded with its step int32[N] (or one
    step int32[] for every row)."""
    return jax.vmap(jax.random.fold_in)(keys, jnp.broadcast_to(steps, keys.shape))


def kept(logits: jax.Array, top_k: int, top_p: float, min_p: float) -> jax.Array:
    """bool[N, V]: the tokens each row may draw, one setting for every row, from logits
    float32[N, V] already divided by the temperature (``top_k`` 0: no top-k)."""
    values, ids = top_k_top_p(logits, top_k, top_p)                            # [N, K]
    if min_p:
        values = jnp.where(values >= values[:, :1] + np.float32(np.log(min_p)), values,
                           NEG_INF)
    rows = jnp.arange(logits.shape[0])[:, None]
    return jnp.zeros(logits.shape, bool).at[rows, ids].set(values > NEG_INF)


def kept_rows(logits: jax.Array, top_k: jax.Array, top_p: jax.Array) -> jax.Array:
    """bool[N, V]: as ``kept`` with a setting per row, top_k int32[N] (0: none) and top_p
    float32[N], from logits float32[N, V] already divided by each row's temperature."""
    order = jnp.argsort(-logits, axis=-1, stable=True)                           # [N, V]
    ranked = jnp.take_along_axis(logits, order, axis=-1)                        # best first
    rank = jnp.arange(logits.shape[-1])
    keep = (top_k[:, None] <= 0) | (rank < top_k[:, None])
    probs = jax.nn.softmax(jnp.where(keep, ranked, NEG_INF), axis=-1)
    before = jnp.cumsum(probs, axis=-1) - probs
    keep &= (top_p[:, None] >= 1.0) | (before < top_p[:, None])
    rows = jnp.arange(logits.shape[0])[:, None]
    return jnp.zeros(logits.shape, bool).at[rows, order].set(keep)


def draw(keys: jax.Array, logits: jax.Array, keep: jax.Array) -> jax.Array:
    """One token int32[N] per row from logits float32[N, V] restricted to ``keep`` bool[N, V],
    row n with ``keys[n]`` alone."""
    masked = jnp.where(keep, logits, NEG_INF)
    return jax.vmap(jax.random.categorical)(keys, masked).astype(jnp.int32)


def chosen_logprobs(logits: jax.Array, token: jax.Array, top: int
                    ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The raw log-softmax of logits float32[N, V] at token int32[N] and its ``top`` best
    alternatives: (float32[N], ids int32[N, top], float32[N, top]), best first."""
    log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    chosen = jnp.take_along_axis(log_probs, token[:, None], axis=1)[:, 0]
    if not top:
        rows = log_probs.shape[0]
        return chosen, jnp.zeros((rows, 0), jnp.int32), jnp.zeros((rows, 0), jnp.float32)
    values, ids = lax.top_k(log_probs, top)
    return chosen, ids.astype(jnp.int32), values
