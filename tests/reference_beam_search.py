"""The beam search as it was before the in-place cache (issue 17): the exactness oracle of
tests/test_decoding_in_place.py. Frozen: do not change it with the library."""
from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from textkit.decoding.contract import (
    DecodeOutput,
    PyTree,
    StepFn,
    batch_size_of,
    check_decoding,
    check_max_length,
    length_caps,
    length_penalty,
    repeat_cache,
    start_token_array,
)

NEG_INF = float("-inf")


class _BeamState(NamedTuple):
    step: jax.Array              # int32[]: tokens generated so far
    cache: PyTree                # leaves [B*K, ...]
    last_tokens: jax.Array       # int32[B, K]: input of the next step
    alive_tokens: jax.Array      # int32[B, K, L]
    alive_logp: jax.Array        # float32[B, K]: summed log-probs, -inf for an empty slot
    finished_tokens: jax.Array   # int32[B, K, L]
    finished_scores: jax.Array   # float32[B, K]: length-normalised, best first, -inf if empty
    finished_lengths: jax.Array  # int32[B, K]


def _take_beams(x: jax.Array, index: jax.Array) -> jax.Array:
    """x [B, M, ...] indexed along axis 1 by index int32[B, N] -> [B, N, ...]."""
    return jax.vmap(lambda row, idx: row[idx])(x, index)


def _reorder_cache(new_cache: PyTree, old_cache: PyTree, flat_parent: jax.Array) -> PyTree:
    """Gather rows ``flat_parent`` int32[B*K] of every leaf ``step_fn`` changed."""
    new_leaves, treedef = jax.tree_util.tree_flatten(new_cache)
    old_leaves = jax.tree_util.tree_leaves(old_cache)
    if len(new_leaves) != len(old_leaves):
        raise ValueError("step_fn must return a cache with the same structure it was given")
    # Parents are valid rows by construction: no out-of-bounds fill (a select per element).
    moved = [new if new is old else new.at[flat_parent].get(mode="promise_in_bounds")
             for new, old in zip(new_leaves, old_leaves)]
    return jax.tree_util.tree_unflatten(treedef, moved)


def beam_search(step_fn: StepFn, params: PyTree, cache: PyTree, start_tokens: int | jax.Array, *,
                beam_size: int, max_length: int, eos_id: int, alpha: float = 0.6,
                length_offset: float = 5.0, n_best: int = 1, max_lengths: jax.Array | None = None,
                pad_id: int = 0, min_length: int = 0, forced_eos: bool = False,
                hf_finish: bool = False) -> DecodeOutput:
    """Beam search over ``step_fn`` for a batch of B rows (see the module docstring).

    Args:
      step_fn: ``(params, cache, tokens int32[N]) -> (log_probs float32[N, V], cache)``, static
        (hashable; ``model_step_fn(model)`` is).
      params: model parameters, passed through to ``step_fn``.
      cache: decoding state for B rows; every leaf has leading axis B.
      start_tokens: int (bos) or int32[B] (last prefix token, for language models).
      beam_size: K alive and K finished hypotheses per row.
      max_length: L, static size of the token axis and the global cap on generated tokens.
      eos_id / pad_id: end-of-sequence id; id written after EOS and in empty slots.
      alpha, length_offset: GNMT length penalty
        ``((length_offset + n) / (length_offset + 1)) ** alpha``.
      n_best: hypotheses returned per row (<= beam_size).
      Ids (``eos_id``, ``pad_id``, start tokens) must lie in the vocabulary and
      ``max_length`` >= 1, else ``ValueError`` (``contract.check_decoding``).
      max_lengths: optional int32[B] per-row cap (clipped to [1, ``max_length``]).
      min_length: EOS is not allowed before this many tokens (``= max_length`` suppresses it).
      forced_eos / hf_finish: Hugging Face ``generate`` semantics (module docstring).

    Only ``step_fn``, the shapes and the integer/flag options (beam_size, max_length, eos_id,
    n_best, pad_id, forced_eos, hf_finish) select a compiled program; new values of the arrays,
    ``alpha``, ``length_offset``, ``min_length`` or ``max_lengths`` reuse it.

    Returns:
      DecodeOutput(tokens int32[B, n_best, L], scores float32[B, n_best], lengths int32[B, n_best]).
    """
    if not 1 <= n_best <= beam_size:
        raise ValueError(f"need 1 <= n_best <= beam_size; got n_best={n_best}, "
                         f"beam_size={beam_size}")
    check_max_length(max_length)
    batch = batch_size_of(cache)
    start = start_token_array(start_tokens, batch)
    check_decoding(step_fn, params, cache, start_tokens, start, max_length=max_length,
                   eos_id=eos_id, pad_id=pad_id)
    return _beam_search(
        step_fn, params, cache, start,
        length_caps(max_lengths, max_length, batch), jnp.float32(alpha),
        jnp.float32(length_offset),
        jnp.int32(min_length), beam_size=beam_size, max_length=max_length, eos_id=eos_id,
        n_best=n_best, pad_id=pad_id, forced_eos=forced_eos, hf_finish=hf_finish)


def force_eos(log_probs: jax.Array, at_cap: jax.Array, eos_id: int) -> jax.Array:
    """log_probs float32[N, ..., V] with rows where ``at_cap`` bool[N] set to EOS only (0 at
    ``eos_id``, -inf elsewhere), as transformers' ``ForcedEOSTokenLogitsProcessor``."""
    forced = jnp.where(jnp.arange(log_probs.shape[-1]) == eos_id, 0.0, NEG_INF)  # [V]
    at_cap = at_cap.reshape(at_cap.shape + (1,) * (log_probs.ndim - 1))
    return jnp.where(at_cap, forced.astype(log_probs.dtype), log_probs)


def _top_k_only(top_logp: jax.Array, eos_logp: jax.Array,
                truncated: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Finishing candidates float32[B, K] (EOS-ended, truncated) kept only where they rank
    among the K best of all K x V extensions, as transformers' beam search; -inf elsewhere.
    Those K best lie among the K best non-EOS extensions (``top_logp`` [B, K]) and the K EOS
    ones (``eos_logp`` [B, K]), so the K-th is found without a second top-K over K x V."""
    beams = top_logp.shape[1]
    kth = lax.top_k(jnp.concatenate([top_logp, eos_logp], 1), beams)[0][:, -1:]  # [B, 1]
    return (jnp.where(eos_logp >= kth, eos_logp, NEG_INF),
            jnp.where(truncated >= kth, truncated, NEG_INF))


@functools.partial(jax.jit, static_argnames=(
    "step_fn", "beam_size", "max_length", "eos_id", "n_best", "pad_id", "forced_eos",
    "hf_finish"))
def _beam_search(step_fn: StepFn, params: PyTree, cache: PyTree, start: jax.Array, caps: jax.Array,
                 alpha: jax.Array, length_offset: jax.Array, min_length: jax.Array, *,
                 beam_size: int,
                 max_length: int, eos_id: int, n_best: int, pad_id: int, forced_eos: bool,
                 hf_finish: bool) -> DecodeOutput:
    """``beam_search`` with normalised arguments: start int32[B], caps int32[B]."""
    batch = caps.shape[0]
    beams = beam_size
    positions = jnp.arange(max_length, dtype=jnp.int32)                         # [L]
    # Largest length penalty any still-alive hypothesis of a row can end with.
    lp_cap = length_penalty(caps, alpha, length_offset)  # [B]

    def expand(state: _BeamState) -> _BeamState:
        step = state.step
        new_length = step + 1                                                   # []
        lp_now = length_penalty(new_length, alpha, length_offset)  # []
        log_probs, new_cache = step_fn(
            params, state.cache, state.last_tokens.reshape(batch * beams))      # [B*K, V]
        vocab = log_probs.shape[-1]
        log_probs = log_probs.astype(jnp.float32).reshape(batch, beams, vocab)  # [B, K, V]
        if forced_eos:
            log_probs = force_eos(log_probs, new_length >= caps, eos_id)         # [B, K, V]
        # Finishing with EOS: one candidate per alive hypothesis.
        eos_logp = state.alive_logp + log_probs[:, :, eos_id]                   # [B, K]
        eos_logp = jnp.where(new_length >= min_length, eos_logp, NEG_INF)       # [B, K]
        write = positions == step                                               # [L]
        eos_tokens = jnp.where(write, eos_id, state.alive_tokens)               # [B, K, L]
        # Going on: best K extensions by any token but EOS.
        go_on = state.alive_logp[:, :, None] + log_probs.at[:, :, eos_id].set(NEG_INF)
        # The barrier keeps XLA from fusing the consumers into a full sort of K*V candidates
        # (its CPU TopK kernel only replaces a sort whose users are plain slices).
        top_logp, top_index = lax.optimization_barrier(
            lax.top_k(go_on.reshape(batch, beams * vocab), beams))              # [B, K]
        parent = top_index // vocab                                             # [B, K]
        token = (top_index % vocab).astype(jnp.int32)                           # [B, K]
        top_tokens = jnp.where(write, token[:, :, None],
                               _take_beams(state.alive_tokens, parent))         # [B, K, L]
        at_cap = (new_length >= caps)[:, None]                                  # [B, 1]
        truncated = jnp.where(at_cap, top_logp, NEG_INF)                        # [B, K]
        if hf_finish:
            eos_logp, truncated = _top_k_only(top_logp, eos_logp, truncated)
        # Merge old finished, EOS-finished and truncated; keep the best K.
        pool_scores = jnp.concatenate(
            [state.finished_scores, eos_logp / lp_now, truncated / lp_now], 1)  # [B, 3K]
        pool_tokens = jnp.concatenate(
            [state.finished_tokens, eos_tokens, top_tokens], 1)                 # [B, 3K, L]
        pool_lengths = jnp.concatenate(
            [state.finished_lengths,
             jnp.full((batch, 2 * beams), new_length, jnp.int32)], 1)           # [B, 3K]
        finished_scores, keep = lax.top_k(pool_scores, beams)                   # [B, K]
        finished_tokens = _take_beams(pool_tokens, keep)                        # [B, K, L]
        finished_lengths = _take_beams(pool_lengths, keep)                      # [B, K]
        # A row is done at its cap or when no alive hypothesis can beat its n_best-th finished.
        # hf_finish: transformers' heuristic (K finished, the current length's penalty)
        lp_best, bar = (lp_now, beams - 1) if hf_finish else (jnp.maximum(lp_cap, lp_now),
                                                               n_best - 1)
        done = at_cap[:, 0] | (top_logp[:, 0] / lp_best <= finished_scores[:, bar])  # [B]
        alive_logp = jnp.where(done[:, None], NEG_INF, top_logp)                # [B, K]
        flat_parent = (jnp.arange(batch)[:, None] * beams + parent).reshape(-1)  # [B*K]
        return _BeamState(
            step=new_length,
            cache=_reorder_cache(new_cache, state.cache, flat_parent),
            last_tokens=token,
            alive_tokens=top_tokens,
            alive_logp=alive_logp,
            finished_tokens=finished_tokens,
            finished_scores=finished_scores,
            finished_lengths=finished_lengths,
        )

    def running(state: _BeamState) -> jax.Array:
        return (state.step < max_length) & jnp.any(state.alive_logp > NEG_INF)

    first_beam_only = jnp.where(jnp.arange(beams) == 0, 0.0, NEG_INF)           # [K]
    initial = _BeamState(
        step=jnp.zeros((), jnp.int32),
        cache=repeat_cache(cache, beams),                                       # [B*K, ...]
        last_tokens=jnp.repeat(start[:, None], beams, axis=1),                  # [B, K]
        alive_tokens=jnp.full((batch, beams, max_length), pad_id, jnp.int32),   # [B, K, L]
        alive_logp=jnp.tile(first_beam_only, (batch, 1)).astype(jnp.float32),  # [B, K]
        finished_tokens=jnp.full((batch, beams, max_length), pad_id, jnp.int32),
        finished_scores=jnp.full((batch, beams), NEG_INF, jnp.float32),         # [B, K]
        finished_lengths=jnp.zeros((batch, beams), jnp.int32),                  # [B, K]
    )
    final = lax.while_loop(running, expand, initial)
    empty = final.finished_scores[:, :n_best] == NEG_INF                        # [B, n]
    return DecodeOutput(
        tokens=final.finished_tokens[:, :n_best],                               # [B, n, L]
        scores=final.finished_scores[:, :n_best],                               # [B, n]
        lengths=jnp.where(empty, 0, final.finished_lengths[:, :n_best]),        # [B, n]
    )
