"""Batched beam search: one jit-compiled program of fixed shapes (a first step, then one
``lax.while_loop`` per cache segment).

Semantics, for each batch row b with beam size K and length cap ``cap[b] = min(max_lengths[b],
max_length)``:

* A hypothesis is a sequence of generated tokens y_1..y_n. Its score is
  ``sum(log p(y_t | y_<t)) / ((c + n) / (c + 1)) ** alpha`` (GNMT length penalty, c the
  ``length_offset``), where n counts the final EOS.
* It is *finished* when it ends with ``eos_id`` (allowed from length ``min_length`` on) or when it
  reaches ``cap[b]`` tokens without EOS (truncated). Only finished hypotheses are returned.
* Finished and alive hypotheses are kept apart: K alive hypotheses (best summed log-probability,
  none ending in EOS) and the K best finished ones so far. Each step every alive hypothesis is
  offered as finished with EOS appended (K candidates) and the K best non-EOS extensions become
  the new alive set. This is what taking the top 2K candidates of all K x V extensions achieves
  (at most K of those end in EOS, so K always stay alive), except that no EOS extension is
  lost to the cut: the finished set is exact for each step.
* Early stop: log-probabilities never rise, so an alive hypothesis can at best score
  ``logp / max_n lp(n)`` over the lengths still reachable. A row stops when that bound is no
  better than its ``n_best``-th finished score; the loop stops when every row has stopped or
  ``max_length`` tokens were generated.
* The first step runs on the B rows of the cache as given (every hypothesis starts from the
  same prefix); the cache is then expanded to the K hypotheses of each row. A step function
  with the beam hooks of the decoding contract (``beam_cache``/``reorder_beams``: a Transformer
  through ``model_step_fn``) keeps its cache in place and reorders only a small ancestry table;
  any other cache is tiled to B*K rows and its rows gathered by parent beam each step (leaves
  that ``step_fn`` returns unchanged, e.g. the encoder memory, are not gathered). With K = 1
  nothing is reordered.
* With an int start token (a fresh cache: nothing decoded yet) and a step function with the
  ``resize_cache`` hook, the loop runs in at most three segments of rising cache length
  (``contract.segment_lengths``) and the cache grows between them, so attention reads
  mostly filled positions.

With a beam as wide as every hypothesis this is exhaustive search (tested). With ``K=1`` it is not
always greedy decoding: the best EOS-ending prefix along the way is kept even when the argmax
path goes on (with ``min_length = max_length`` EOS is suppressed and they coincide).

Two options reproduce Hugging Face ``generate`` (transformers 5) for pretrained checkpoints:

* ``forced_eos``: the token that reaches a row's cap is EOS (all other log-probs -inf, EOS 0),
  as ``forced_eos_token_id`` does at ``max_length``.
* ``hf_finish``: a candidate (EOS-ended, or truncated at the cap) joins the finished set only if
  it ranks among the K best of all K x V candidates of its step, and a row stops once K
  hypotheses have finished and the best alive one, normalised by the *current* length, scores no
  better than the worst finished one (``early_stopping=False``'s heuristic; ``True``: once K
  hypotheses finished; ``"never"``: the best alive one scored at the cap's length). With
  ``length_offset=0`` the penalty is transformers' ``n ** alpha`` (``length_penalty=alpha``);
  with ``alpha=0`` both forms are 1 and the stopping rule is exact.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from textkit.decoding.contract import (
    Candidates,
    DecodeOutput,
    PyTree,
    StepFn,
    batch_size_of,
    candidates,
    check_decoding,
    check_max_length,
    expand_beams,
    grown_cache,
    length_caps,
    length_penalty,
    may_grow,
    reorder_beams,
    segment_lengths,
    start_token_array,
    step_candidates,
)
from textkit.decoding.filters import NEG_INF, banned_ngrams


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


def beam_search(step_fn: StepFn, params: PyTree, cache: PyTree, start_tokens: int | jax.Array, *,
                beam_size: int, max_length: int, eos_id: int | tuple[int, ...],
                alpha: float = 0.6,
                length_offset: float = 5.0, n_best: int = 1,
                max_lengths: jax.Array | None = None,
                pad_id: int = 0, min_length: int | jax.Array = 0, forced_eos: bool = False,
                forced_bos: int | None = None, no_repeat_ngram: int = 0,
                hf_finish: bool = False, early_stopping: bool | str = False) -> DecodeOutput:
    """Beam search over ``step_fn`` for a batch of B rows (see the module docstring).

    Args:
      step_fn: ``(params, cache, tokens int32[N]) -> (log_probs float32[N, V], cache)``, static
        (hashable; ``model_step_fn(model)`` is).
      params: model parameters, passed through to ``step_fn``.
      cache: decoding state for B rows; every leaf has leading axis B.
      start_tokens: int (bos: ``cache`` holds nothing decoded yet) or int32[B] (the last
        token of a prefix already fed to ``cache``, see ``prefill``).
      beam_size: K alive and K finished hypotheses per row.
      max_length: L, static size of the token axis and the global cap on generated tokens.
      eos_id / pad_id: end-of-sequence id (or a tuple of ids, each ending a hypothesis; the
        first is the one ``forced_eos`` forces); id written after EOS and in empty slots.
      alpha, length_offset: GNMT length penalty
        ``((length_offset + n) / (length_offset + 1)) ** alpha``.
      n_best: hypotheses returned per row (<= beam_size).
      Ids (``eos_id``, ``pad_id``, start tokens) must lie in the vocabulary and
      ``max_length`` >= 1, else ``ValueError`` (``contract.check_decoding``).
      max_lengths: optional int32[B] per-row cap (clipped to [1, ``max_length``]).
      min_length: EOS is not allowed before this many tokens (``= max_length`` suppresses it);
        an int or int32[B] per row.
      forced_eos / hf_finish: Hugging Face ``generate`` semantics (module docstring).
      forced_bos: the first token of every hypothesis (log-prob 0, counted in the length
        penalty), as transformers' ``forced_bos_token_id`` (a target language); not an EOS
        id.
      no_repeat_ngram: n > 0: a hypothesis never repeats one of its own n-grams of the start
        token and the generated ones (transformers' ``no_repeat_ngram_size``; each step then
        reads the whole log-probs instead of the step function's candidates hook).
      early_stopping: with ``hf_finish``, transformers' finishing rule (False, True or
        "never"; ``textkit.decoding.generation_config``).

    Only ``step_fn``, the shapes and the integer/flag options (beam_size, max_length, eos_id,
    n_best, pad_id, forced_eos, forced_bos, hf_finish, early_stopping) select a compiled
    program; new
    values of the arrays, ``alpha``, ``length_offset``, ``min_length`` or ``max_lengths``
    reuse it.

    Returns:
      DecodeOutput(tokens int32[B, n_best, L], scores float32[B, n_best], lengths int32[B, n_best]).
    """
    if not 1 <= n_best <= beam_size:
        raise ValueError(f"need 1 <= n_best <= beam_size; got n_best={n_best}, "
                         f"beam_size={beam_size}")
    check_max_length(max_length)
    batch = batch_size_of(cache)
    start = start_token_array(start_tokens, batch)
    eos_ids = (eos_id,) if isinstance(eos_id, int | np.integer) else tuple(eos_id)
    if forced_bos is not None and int(forced_bos) in eos_ids:
        raise ValueError(f"forced_bos={forced_bos} is an EOS id: nothing would be generated")
    vocab = 0
    for eos in eos_ids:
        vocab = check_decoding(step_fn, params, cache, start_tokens, start,
                               max_length=max_length, eos_id=eos, pad_id=pad_id)
    return _beam_search(
        step_fn, params, cache, start,
        length_caps(max_lengths, max_length, batch), jnp.float32(alpha),
        jnp.float32(length_offset),
        jnp.broadcast_to(jnp.asarray(min_length, jnp.int32), (batch,)), beam_size=beam_size,
        width=min(beam_size, vocab), max_length=max_length,
        eos_id=tuple(int(e) for e in eos_ids), n_best=n_best, pad_id=pad_id,
        forced_eos=forced_eos, forced_bos=None if forced_bos is None else int(forced_bos),
        no_repeat_ngram=int(no_repeat_ngram), hf_finish=hf_finish,
        early_stopping=early_stopping,
        fresh=may_grow(step_fn, start_tokens))


def step_candidates_without_repeats(step_fn: StepFn, params: PyTree, cache: PyTree,
                                    tokens: jax.Array, k: int, exclude: tuple[int, ...],
                                    history: jax.Array, n: int) -> tuple[Candidates, PyTree]:
    """``step_candidates`` of tokens int32[N] with the ids that would repeat an n-gram of
    ``history`` int32[N, H] (the start token and the generated ids, -1 after them, as
    transformers counts the decoder's input ids) at -inf first (``n`` 0: none)."""
    if not n:
        return step_candidates(step_fn, params, cache, tokens, k, exclude)
    log_probs, cache = step_fn(params, cache, tokens)                           # [N, V]
    banned = banned_ngrams(history, n, log_probs.shape[-1])                     # [N, V]
    return candidates(jnp.where(banned, NEG_INF, log_probs.astype(jnp.float32)), k,
                      exclude), cache


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


class _Search(NamedTuple):
    """What one search holds constant: per-row caps int32[B], float32 alpha / length_offset /
    min_length int32[B], the largest length penalty per row float32[B], and the static
    options."""

    caps: jax.Array
    alpha: jax.Array
    length_offset: jax.Array
    min_length: jax.Array
    lp_cap: jax.Array
    beams: int
    max_length: int
    eos_ids: tuple[int, ...]
    n_best: int
    forced_eos: bool
    hf_finish: bool
    early_stopping: bool | str


def _select(search: _Search, state: _BeamState,
            top: Candidates) -> tuple[_BeamState, jax.Array]:
    """The search after one step: ``top`` holds each alive hypothesis' W best extensions by a
    token other than EOS (values / ids [B, K, W], W = min(K, V)) and its log-probs of the E EOS
    ids (kept [B, K, E]). Returns the new state (its cache not yet moved) and the parent beam
    int32[B, K] of each new alive hypothesis."""
    batch, beams, width = top.values.shape
    eos_ids, caps = search.eos_ids, search.caps
    ends = len(eos_ids)
    positions = jnp.arange(search.max_length, dtype=jnp.int32)                  # [L]
    new_length = state.step + 1                                                 # []
    lp_now = length_penalty(new_length, search.alpha, search.length_offset)  # []
    values, eos_lp = top.values, top.kept                                       # [B,K,W], [B,K,E]
    if search.forced_eos:   # at the cap only the first EOS (log-prob 0), as ``force_eos``
        forced = (new_length >= caps)[:, None, None]                            # [B, 1, 1]
        values = jnp.where(forced, NEG_INF, values)
        first = jnp.where(jnp.arange(ends) == 0, 0.0, NEG_INF)                  # [E]
        eos_lp = jnp.where(forced, first, eos_lp)
    # Finishing with EOS: one candidate per alive hypothesis and EOS id.
    eos_logp = state.alive_logp[:, :, None] + eos_lp                            # [B, K, E]
    eos_logp = jnp.where((new_length >= search.min_length)[:, None, None], eos_logp,
                         NEG_INF).reshape(batch, beams * ends)                  # [B, K*E]
    write = positions == state.step                                             # [L]
    eos_tokens = jnp.where(write, jnp.asarray(eos_ids, jnp.int32)[:, None],
                           state.alive_tokens[:, :, None, :])                   # [B, K, E, L]
    eos_tokens = eos_tokens.reshape(batch, beams * ends, -1)                    # [B, K*E, L]
    # Going on: the K best of the K x W extensions by any token but EOS. They are the K best
    # of all K x V (each lies among its own hypothesis' W best); ties keep the lower
    # hypothesis, then the lower token, as a top-K over the flat K x V does.
    go_on = (state.alive_logp[:, :, None] + values).reshape(batch, beams * width)
    top_logp, choice = lax.top_k(go_on, beams)                                  # [B, K]
    parent = choice // width                                                    # [B, K]
    token = jnp.take_along_axis(top.ids.reshape(batch, beams * width), choice, axis=1)
    top_tokens = jnp.where(write, token[:, :, None],
                           _take_beams(state.alive_tokens, parent))             # [B, K, L]
    at_cap = (new_length >= caps)[:, None]                                      # [B, 1]
    truncated = jnp.where(at_cap, top_logp, NEG_INF)                            # [B, K]
    if search.hf_finish:
        eos_logp, truncated = _top_k_only(top_logp, eos_logp, truncated)
    # Merge old finished, EOS-finished and truncated; keep the best K.
    pool_scores = jnp.concatenate(
        [state.finished_scores, eos_logp / lp_now, truncated / lp_now], 1)      # [B, 3K]
    pool_tokens = jnp.concatenate(
        [state.finished_tokens, eos_tokens, top_tokens], 1)                     # [B, 3K, L]
    pool_lengths = jnp.concatenate(
        [state.finished_lengths, jnp.full((batch, beams * ends + beams), new_length,
                                          jnp.int32)], 1)
    finished_scores, keep = lax.top_k(pool_scores, beams)                       # [B, K]
    # A row is done at its cap or when no alive hypothesis can beat its n_best-th finished.
    # hf_finish: transformers' rules (K finished; early_stopping: the current length's
    # penalty, K finished at all, or the cap's penalty when alpha > 0)
    if not search.hf_finish:
        lp_best, bar = jnp.maximum(search.lp_cap, lp_now), search.n_best - 1
    elif search.early_stopping == "never":
        lp_best, bar = jnp.where(search.alpha > 0, search.lp_cap, lp_now), beams - 1
    else:
        lp_best, bar = lp_now, beams - 1
    done = at_cap[:, 0] | (top_logp[:, 0] / lp_best <= finished_scores[:, bar])  # [B]
    if search.hf_finish and search.early_stopping is True:
        done = at_cap[:, 0] | (finished_scores[:, bar] > NEG_INF)                # [B]
    return _BeamState(
        step=new_length,
        cache=state.cache,
        last_tokens=token,
        alive_tokens=top_tokens,
        alive_logp=jnp.where(done[:, None], NEG_INF, top_logp),                 # [B, K]
        finished_tokens=_take_beams(pool_tokens, keep),                         # [B, K, L]
        finished_scores=finished_scores,
        finished_lengths=_take_beams(pool_lengths, keep),                       # [B, K]
    ), parent


@functools.partial(jax.jit, static_argnames=(
    "step_fn", "beam_size", "width", "max_length", "eos_id", "n_best", "pad_id", "forced_eos",
    "forced_bos", "no_repeat_ngram", "hf_finish", "early_stopping", "fresh"))
def _beam_search(step_fn: StepFn, params: PyTree, cache: PyTree, start: jax.Array, caps: jax.Array,
                 alpha: jax.Array, length_offset: jax.Array, min_length: jax.Array, *,
                 beam_size: int, width: int,
                 max_length: int, eos_id: tuple[int, ...], n_best: int, pad_id: int,
                 forced_eos: bool, forced_bos: int | None, no_repeat_ngram: int,
                 hf_finish: bool, early_stopping: bool | str, fresh: bool) -> DecodeOutput:
    """``beam_search`` with normalised arguments: start int32[B], caps int32[B]; ``width``:
    the candidates kept per hypothesis and step, min(K, V); ``fresh``: the cache holds nothing
    decoded yet (it grows in segments)."""
    batch, beams = caps.shape[0], beam_size
    # lp_cap: the largest length penalty any still-alive hypothesis of a row can end with.
    search = _Search(caps, alpha, length_offset, min_length,
                     length_penalty(caps, alpha, length_offset), beams,
                     max_length, eos_id, n_best, forced_eos, hf_finish, early_stopping)

    def expand(state: _BeamState) -> _BeamState:
        generated = jnp.where(jnp.arange(max_length) < state.step, state.alive_tokens,
                              -1).reshape(batch * beams, max_length)            # [B*K, L]
        history = jnp.concatenate([jnp.repeat(start, beams)[:, None], generated],
                                  1)                                            # [B*K, 1+L]
        top, new_cache = step_candidates_without_repeats(
            step_fn, params, state.cache, state.last_tokens.reshape(batch * beams), width,
            eos_id, history, no_repeat_ngram)                                   # [B*K, W]
        new_state, parent = _select(search, state, Candidates(
            *(x.reshape(batch, beams, -1) for x in top)))                       # [B, K, W]
        return new_state._replace(cache=reorder_beams(
            step_fn, params, new_cache, state.cache, parent, in_place))

    lengths = segment_lengths(max_length) if fresh else (max_length,)
    first_cache = grown_cache(step_fn, params, cache, lengths[0]) if fresh else None
    if first_cache is None:   # not fresh, or a step function whose model cannot resize
        lengths, first_cache = (max_length,), cache
    # Step 0 on the B rows: every hypothesis of a row starts from the same prefix.
    top, first_cache = step_candidates_without_repeats(
        step_fn, params, first_cache, start, width, eos_id, start[:, None],
        no_repeat_ngram)                                                        # [B, W]
    if forced_bos is not None:   # the one candidate: the forced token, log-prob 0
        only = jnp.arange(width) == 0                                           # [W]
        top = Candidates(
            values=jnp.where(only, 0.0, NEG_INF) + jnp.zeros_like(top.values),  # [B, W]
            ids=jnp.where(only, forced_bos, top.ids).astype(top.ids.dtype),     # [B, W]
            kept=jnp.full_like(top.kept, NEG_INF))                              # [B, E]
    first_beam_only = jnp.where(jnp.arange(beams) == 0, 0.0, NEG_INF)           # [K]
    state, _ = _select(search, _BeamState(
        step=jnp.zeros((), jnp.int32),
        cache=None,
        last_tokens=jnp.zeros((batch, beams), jnp.int32),
        alive_tokens=jnp.full((batch, beams, max_length), pad_id, jnp.int32),   # [B, K, L]
        alive_logp=jnp.tile(first_beam_only, (batch, 1)).astype(jnp.float32),  # [B, K]
        finished_tokens=jnp.full((batch, beams, max_length), pad_id, jnp.int32),
        finished_scores=jnp.full((batch, beams), NEG_INF, jnp.float32),         # [B, K]
        finished_lengths=jnp.zeros((batch, beams), jnp.int32),                  # [B, K]
    ), Candidates(*(jnp.broadcast_to(x[:, None], (batch, beams, x.shape[-1])) for x in top)))
    # The K copies of a row are identical, so the first step's parents need no reordering.
    beam_cache, in_place = expand_beams(step_fn, params, first_cache, beams)     # B*K hyps
    state = state._replace(cache=beam_cache)
    for index, length in enumerate(lengths):
        if index:
            state = state._replace(cache=grown_cache(step_fn, params, state.cache, length))
        state = lax.while_loop(
            lambda s, length=length: (s.step < length) & jnp.any(s.alive_logp > NEG_INF),
            expand, state)
    empty = state.finished_scores[:, :n_best] == NEG_INF                        # [B, n]
    return DecodeOutput(
        tokens=state.finished_tokens[:, :n_best],                               # [B, n, L]
        scores=state.finished_scores[:, :n_best],                               # [B, n]
        lengths=jnp.where(empty, 0, state.finished_lengths[:, :n_best]),        # [B, n]
    )
