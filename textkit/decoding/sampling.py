"""Greedy decoding and ancestral sampling (temperature, top-k, top-p): a ``lax.while_loop`` per
cache segment (one, unless the cache grows; see ``beam_search``).

Both extend one hypothesis per row, token by token, until it emits ``eos_id`` (allowed from
``min_length`` tokens on) or reaches its length cap; the loop ends when every row has. The output
has the beam-search layout (``DecodeOutput`` with n = 1, or n = ``num_samples``); ``scores`` are
the summed log-probabilities of the chosen tokens under the model (no temperature, no filtering,
no length penalty).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from textkit.decoding.beam_search import force_eos, step_candidates_without_repeats
from textkit.decoding.contract import (
    DecodeOutput,
    PyTree,
    StepFn,
    batch_size_of,
    check_decoding,
    check_max_length,
    grown_cache,
    length_caps,
    may_grow,
    repeat_cache,
    segment_lengths,
    start_token_array,
)
from textkit.decoding.filters import NEG_INF, top_k_top_p

ChooseFn = Callable[[jax.Array, jax.Array], jax.Array]   # (log_probs [N, V], key) -> int32[N]


class _RowState(NamedTuple):
    step: jax.Array        # int32[]
    cache: PyTree          # leaves [N, ...]
    last_tokens: jax.Array  # int32[N]
    tokens: jax.Array      # int32[N, L]
    logp: jax.Array        # float32[N]
    lengths: jax.Array     # int32[N]
    running: jax.Array     # bool[N]


def _decode_rows(step_fn: StepFn, params: PyTree, cache: PyTree, start: jax.Array, caps: jax.Array,
                 choose: ChooseFn | None, key: jax.Array, *, max_length: int, eos_id: int,
                 pad_id: int, min_length: jax.Array, forced_eos: bool = False,
                 forced_bos: int | None = None, no_repeat_ngram: int = 0,
                 fresh: bool = False) -> _RowState:
    """Extend N rows with ``choose(log_probs, key_of_step)`` (None: the argmax, read from the
    step's candidates) until EOS or their cap (with ``forced_eos`` the token at the cap is EOS,
    see ``beam_search``; ``forced_bos``: the first token, log-prob 0; ``no_repeat_ngram``: the
    argmax never repeats an n-gram of the row, see ``beam_search``; ``fresh``: an empty cache
    that may grow in segments, see ``beam_search``)."""
    rows = start.shape[0]
    positions = jnp.arange(max_length, dtype=jnp.int32)                         # [L]

    def argmax_step(state: _RowState, new_length: jax.Array):
        """(token int32[N], its log-prob float32[N], cache): the first largest log-prob,
        from the step's best non-EOS candidate and the EOS log-prob (``step_candidates``)."""
        history = jnp.concatenate([start[:, None], jnp.where(
            positions < state.step, state.tokens, -1)], 1)                      # [N, 1+L]
        top, cache = step_candidates_without_repeats(
            step_fn, params, state.cache, state.last_tokens, 1, (eos_id,), history,
            no_repeat_ngram)
        best, best_id, eos_lp = top.values[:, 0], top.ids[:, 0], top.kept[:, 0]  # [N] each
        eos_lp = jnp.where(new_length >= min_length, eos_lp, NEG_INF)
        if forced_eos:   # at the cap only EOS (log-prob 0), as ``force_eos``
            at_cap = new_length >= caps                                         # [N]
            best, eos_lp = jnp.where(at_cap, NEG_INF, best), jnp.where(at_cap, 0.0, eos_lp)
        take_eos = (eos_lp > best) | ((eos_lp == best) & (eos_id < best_id))   # [N]
        return (jnp.where(take_eos, eos_id, best_id), jnp.where(take_eos, eos_lp, best),
                cache)

    def sample_step(state: _RowState, new_length: jax.Array):
        """(token int32[N], its log-prob float32[N], cache) drawn by ``choose``."""
        log_probs, cache = step_fn(params, state.cache, state.last_tokens)      # [N, V]
        log_probs = log_probs.astype(jnp.float32)
        log_probs = jnp.where(new_length >= min_length, log_probs,
                              log_probs.at[:, eos_id].set(NEG_INF))             # [N, V]
        if forced_eos:
            log_probs = force_eos(log_probs, new_length >= caps, eos_id)         # [N, V]
        token = choose(log_probs, jax.random.fold_in(key, state.step))          # [N]
        return token, jnp.take_along_axis(log_probs, token[:, None], 1)[:, 0], cache

    def extend(state: _RowState) -> _RowState:
        new_length = state.step + 1                                             # []
        token, token_logp, cache = (argmax_step if choose is None else sample_step)(
            state, new_length)                                                  # [N], [N]
        if forced_bos is not None:
            token = jnp.where(new_length == 1, forced_bos, token)               # [N]
            token_logp = jnp.where(new_length == 1, 0.0, token_logp)            # [N]
        token = jnp.where(state.running, token, pad_id).astype(jnp.int32)       # [N]
        return _RowState(
            step=new_length,
            cache=cache,
            last_tokens=token,
            tokens=jnp.where(positions == state.step, token[:, None], state.tokens),  # [N, L]
            logp=state.logp + jnp.where(state.running, token_logp, 0.0),        # [N]
            lengths=jnp.where(state.running, new_length, state.lengths),        # [N]
            running=state.running & (token != eos_id) & (new_length < caps),   # [N]
        )

    lengths = segment_lengths(max_length) if fresh else (max_length,)
    first_cache = grown_cache(step_fn, params, cache, lengths[0]) if fresh else None
    if first_cache is None:   # not fresh, or a step function whose model cannot resize
        lengths, first_cache = (max_length,), cache
    state = _RowState(
        step=jnp.zeros((), jnp.int32),
        cache=first_cache,
        last_tokens=start,
        tokens=jnp.full((rows, max_length), pad_id, jnp.int32),
        logp=jnp.zeros((rows,), jnp.float32),
        lengths=jnp.zeros((rows,), jnp.int32),
        running=jnp.ones((rows,), bool),
    )
    for index, length in enumerate(lengths):
        if index:
            state = state._replace(cache=grown_cache(step_fn, params, state.cache, length))
        state = lax.while_loop(
            lambda s, length=length: (s.step < length) & jnp.any(s.running), extend, state)
    return state


def _checked_start(step_fn: StepFn, params: PyTree, cache: PyTree,
                   start_tokens: int | jax.Array, max_length: int, eos_id: int,
                   pad_id: int) -> jax.Array:
    """Start tokens as int32[B], after ``check_decoding`` (the same checks as beam search)."""
    check_max_length(max_length)
    start = start_token_array(start_tokens, batch_size_of(cache))
    check_decoding(step_fn, params, cache, start_tokens, start, max_length=max_length,
                   eos_id=eos_id, pad_id=pad_id)
    return start


def greedy_search(step_fn: StepFn, params: PyTree, cache: PyTree, start_tokens: int | jax.Array, *,
                  max_length: int, eos_id: int, max_lengths: jax.Array | None = None,
                  pad_id: int = 0, min_length: int | jax.Array = 0,
                  forced_eos: bool = False, forced_bos: int | None = None,
                  no_repeat_ngram: int = 0) -> DecodeOutput:
    """Argmax decoding of B rows (arguments as ``beam_search``; ``forced_eos``: the token at
    a row's cap is EOS, as transformers' ``forced_eos_token_id``; ``forced_bos``: the first
    token, as its ``forced_bos_token_id``; ``no_repeat_ngram``: its
    ``no_repeat_ngram_size``).

    Ids and ``max_length`` are checked as in ``beam_search`` (``ValueError``).

    Returns DecodeOutput(tokens int32[B, 1, L], scores float32[B, 1], lengths int32[B, 1]).
    """
    start = _checked_start(step_fn, params, cache, start_tokens, max_length, eos_id, pad_id)
    batch = start.shape[0]
    return _decode(step_fn, params, cache, start,
                   length_caps(max_lengths, max_length, batch), jnp.int32(min_length),
                   jax.random.key(0), sampling=None, num_samples=1, max_length=max_length,
                   eos_id=eos_id, pad_id=pad_id, forced_eos=forced_eos, forced_bos=forced_bos,
                   no_repeat_ngram=int(no_repeat_ngram), fresh=may_grow(step_fn, start_tokens))


def _sampler(temperature: float, top_k: int, top_p: float) -> ChooseFn:
    """Draw one token per row from log-probs scaled by 1/temperature, restricted by
    ``top_k_top_p``."""

    def choose(log_probs: jax.Array, key: jax.Array) -> jax.Array:
        logits = log_probs / temperature                                        # [N, V]
        if top_k == 0 and top_p >= 1.0:
            return jax.random.categorical(key, logits, axis=-1)
        values, ids = top_k_top_p(logits, top_k, top_p)                         # [N, K]
        choice = jax.random.categorical(key, values, axis=-1)                   # [N]
        return jnp.take_along_axis(ids, choice[:, None], 1)[:, 0]

    return choose


def sample(step_fn: StepFn, params: PyTree, cache: PyTree, start_tokens: int | jax.Array,
           rng: jax.Array, *, max_length: int, eos_id: int, temperature: float = 1.0,
           top_k: int = 0, top_p: float = 1.0, num_samples: int = 1,
           max_lengths: jax.Array | None = None, pad_id: int = 0,
           min_length: int = 0) -> DecodeOutput:
    """Sample ``num_samples`` continuations per row (other arguments as ``beam_search``).

    ``temperature`` > 0 divides the log-probs; ``top_k`` > 0 keeps the k most likely tokens;
    ``top_p`` < 1 keeps the most likely tokens up to that cumulative probability (nucleus). The
    same ``rng`` key (``jax.random.key``) gives the same samples. ``top_k=1`` is greedy decoding.

    Returns DecodeOutput(tokens int32[B, n, L], scores float32[B, n], lengths int32[B, n]) with
    n = num_samples, in drawing order (not sorted).
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 (use greedy_search for argmax); "
                         f"got {temperature}")
    if top_k < 0 or not 0.0 < top_p <= 1.0:
        raise ValueError(f"need top_k >= 0 and 0 < top_p <= 1; got top_k={top_k}, top_p={top_p}")
    if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
        raise ValueError(f"num_samples must be an int >= 1; got {num_samples!r}")
    start = _checked_start(step_fn, params, cache, start_tokens, max_length, eos_id, pad_id)
    batch = start.shape[0]
    return _decode(step_fn, params, cache, start,
                   length_caps(max_lengths, max_length, batch), jnp.int32(min_length), rng,
                   sampling=(float(temperature), int(top_k), float(top_p)),
                   num_samples=num_samples, max_length=max_length, eos_id=eos_id,
                   pad_id=pad_id, fresh=may_grow(step_fn, start_tokens))


@functools.partial(jax.jit, static_argnames=(
    "step_fn", "sampling", "num_samples", "max_length", "eos_id", "pad_id", "forced_eos",
    "forced_bos", "no_repeat_ngram", "fresh"))
def _decode(step_fn: StepFn, params: PyTree, cache: PyTree, start: jax.Array, caps: jax.Array,
            min_length: jax.Array, rng: jax.Array, *,
            sampling: tuple[float, int, float] | None, num_samples: int, max_length: int,
            eos_id: int, pad_id: int, forced_eos: bool = False,
            forced_bos: int | None = None, no_repeat_ngram: int = 0,
            fresh: bool = False) -> DecodeOutput:
    """Greedy (``sampling=None``) or sampled with (temperature, top_k, top_p) decoding of
    ``num_samples`` copies of each row: start int32[B], caps int32[B]; ``fresh``: an empty
    cache (it may grow in segments)."""
    batch = caps.shape[0]
    choose = None if sampling is None else _sampler(*sampling)
    final = _decode_rows(
        step_fn, params, repeat_cache(cache, num_samples), jnp.repeat(start, num_samples),
        jnp.repeat(caps, num_samples), choose, rng,
        max_length=max_length, eos_id=eos_id, pad_id=pad_id, min_length=min_length,
        forced_eos=forced_eos, forced_bos=forced_bos, no_repeat_ngram=no_repeat_ngram,
        fresh=fresh)
    return DecodeOutput(
        final.tokens.reshape(batch, num_samples, max_length),                   # [B, n, L]
        final.logp.reshape(batch, num_samples),                                 # [B, n]
        final.lengths.reshape(batch, num_samples),                              # [B, n]
    )
