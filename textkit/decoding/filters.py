"""Token filters: which tokens a decoder may choose, and with what mass.

``top_k_top_p`` restricts a sampling step to the most likely tokens; ``ExcludeTokensStep`` wraps
a ``StepFn`` so that some ids (e.g. ``<pad>``) are never generated.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from textkit.decoding.contract import Candidates, PyTree, StepWrapper

NEG_INF = float("-inf")


def top_k_top_p(logits: jax.Array, top_k: int, top_p: float) -> tuple[jax.Array, jax.Array]:
    """Candidates of each row: logits float32[N, V] -> (values float32[N, K], ids int32[N, K]).

    The ``top_k`` most likely tokens (0: all V), best first; with ``top_p`` < 1 every candidate
    after the smallest prefix whose probability (renormalised over the K) reaches ``top_p`` gets
    value -inf (the first candidate is always kept). Sample with
    ``jax.random.categorical(key, values)`` and map back through ``ids``.
    """
    # lax.top_k returns candidates sorted best first; only top_p without top_k sorts all V.
    kept = top_k if top_k > 0 else logits.shape[-1]
    # Barrier: see beam_search (keeps XLA's TopK kernel instead of a full sort).
    values, ids = lax.optimization_barrier(
        lax.top_k(logits, min(kept, logits.shape[-1])))                     # [N, K]
    if top_p < 1.0:
        probs = jax.nn.softmax(values, axis=-1)                             # [N, K]
        mass_before = jnp.cumsum(probs, axis=-1) - probs                    # [N, K]
        values = jnp.where(mass_before < top_p, values, NEG_INF)
    return values, ids


@dataclasses.dataclass(frozen=True)
class ExcludeTokensStep(StepWrapper):
    """A ``StepFn`` whose log-probs give no mass to ``excluded_ids`` (renormalised, matching
    ``lm_loss_fn(..., excluded_ids)``; with ``renormalize=False`` they are only set to -inf,
    as transformers' ``bad_words_ids`` does); hashable, so usable as a static jit argument.
    The beam and resize hooks pass through (``StepWrapper``); the candidates hook sets the
    excluded ids apart."""

    excluded_ids: tuple[int, ...]
    renormalize: bool = True

    def __call__(self, params: PyTree, cache: PyTree,
                 tokens: jax.Array) -> tuple[jax.Array, PyTree]:
        log_probs, cache = self.step_fn(params, cache, tokens)                  # [N, V]
        penalty = np.zeros(log_probs.shape[-1], np.float32)
        penalty[list(self.excluded_ids)] = -np.inf
        log_probs = log_probs.astype(jnp.float32) + penalty
        if not self.renormalize:
            return log_probs, cache
        return jax.nn.log_softmax(log_probs, axis=-1), cache

    def top_k_step(self, params: PyTree, cache: PyTree, tokens: jax.Array, k: int,
                   exclude: tuple[int, ...]) -> tuple[Candidates, PyTree] | None:
        """The wrapped step function's candidates hook with ``excluded_ids`` set apart too
        (None when it has none): their log-probs -inf, the others renormalised over what is
        left unless ``renormalize=False``."""
        found = super().top_k_step(params, cache, tokens, k, (*exclude, *self.excluded_ids))
        if found is None:
            return None
        (values, ids, kept), cache = found
        kept, own = kept[:, :len(exclude)], kept[:, len(exclude):]             # [N, E], [N, X]
        if self.renormalize:   # log(1 - mass of the excluded ids), subtracted from the rest
            rest = jnp.log1p(-jnp.exp(jax.nn.logsumexp(own, axis=1, keepdims=True)))  # [N, 1]
            values, kept = values - rest, kept - rest
        banned = np.isin(np.asarray(exclude, np.int64), self.excluded_ids)
        kept = jnp.where(banned, NEG_INF, kept)
        return Candidates(values, ids, kept), cache


def banned_ngrams(history: jax.Array, n: int, vocab: int) -> jax.Array:
    """bool[N, V]: ids that would repeat an n-gram of ``history`` int32[N, H] (each row's
    prompt then its generated ids, -1 after them), as transformers' ``no_repeat_ngram_size``
    bans them."""
    rows, width = history.shape
    filled = filled_length(history)                                                   # int32[N]
    index = jnp.arange(width)
    if n == 1:
        valid = history >= 0
        return jnp.zeros((rows, vocab), bool).at[
            jnp.arange(rows)[:, None], jnp.where(valid, history, 0)].max(valid)
    # the last n - 1 ids of each row, then every earlier window of n - 1 that equals them
    tail = jnp.take_along_axis(history, (filled[:, None] - (n - 1) + jnp.arange(n - 1)) % width,
                               axis=1)                                          # [N, n-1]
    starts = index[: width - n + 1]                                             # [J]
    windows = jnp.stack([history[:, starts + i] for i in range(n - 1)], -1)     # [N, J, n-1]
    match = jnp.all(windows == tail[:, None, :], -1)                            # [N, J]
    match &= (starts[None, :] + n - 1 < filled[:, None]) & (filled[:, None] >= n - 1)
    match &= jnp.all(windows >= 0, -1)
    following = history[:, starts + n - 1]                                      # [N, J]
    return jnp.zeros((rows, vocab), bool).at[
        jnp.arange(rows)[:, None], jnp.where(match, following, 0)].max(match)


def filled_length(history: jax.Array) -> jax.Array:
    """Columns of ``history`` int32[N, H] in use per row (ids >= 0)."""
    return (history >= 0).sum(axis=1).astype(jnp.int32)
