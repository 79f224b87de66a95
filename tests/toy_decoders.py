"""A hand-written decoder for decoding tests, and exhaustive search over it.

The "model" is a transition table: log p(next | previous token, position) plus a per-row bias
(standing in for the source sentence), so rows differ and every probability is known.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np

PAD, EOS, BOS = 0, 1, 2


def make_table_model(seed: int, vocab: int, length: int, rows: int, sharpness: float = 2.0):
    """params {"table": float32[L+1, V, V]} and cache {"pos": int32[B], "bias": float32[B, V]}.

    PAD is never produced (log-prob -inf)."""
    rng = np.random.default_rng(seed)
    table = rng.normal(size=(length + 1, vocab, vocab)).astype(np.float32) * sharpness
    table[:, :, PAD] = -np.inf
    bias = rng.normal(size=(rows, vocab)).astype(np.float32)
    params = {"table": jnp.asarray(table)}
    cache = {"pos": jnp.zeros((rows,), jnp.int32), "bias": jnp.asarray(bias)}
    return params, cache


def table_step(params, cache, tokens):
    """step_fn: log_softmax(table[pos, prev] + bias) -> (float32[N, V], cache)."""
    logits = params["table"][cache["pos"], tokens] + cache["bias"]
    return jax.nn.log_softmax(logits, axis=-1), {**cache, "pos": cache["pos"] + 1}


def row_log_probs(params, cache, row: int, start: int, prefix: tuple[int, ...]) -> np.ndarray:
    """log p(. | prefix) float64[V] for one row, recomputed in numpy."""
    table = np.asarray(params["table"], np.float64)
    bias = np.asarray(cache["bias"], np.float64)[row]
    previous = prefix[-1] if prefix else start
    logits = table[len(prefix), previous] + bias
    return logits - np.logaddexp.reduce(logits[np.isfinite(logits)])


def exhaustive(params, cache, row: int, *, start: int, cap: int, alpha: float,
               length_offset: float = 5.0, min_length: int = 0):
    """Every finished hypothesis of ``row`` (ends in EOS, or reaches ``cap`` tokens), as
    (score, tokens) sorted best first, with the GNMT length penalty."""
    vocab = np.asarray(params["table"]).shape[-1]
    hypotheses = []
    for length in range(1, cap + 1):
        for body in itertools.product(range(vocab), repeat=length - 1):
            if EOS in body or PAD in body:
                continue
            endings = [EOS] if length < cap else list(range(vocab))
            for last in endings:
                if last == PAD or (last == EOS and length < min_length):
                    continue
                tokens = (*body, last)
                logp = sum(row_log_probs(params, cache, row, start, tokens[:t])[tokens[t]]
                           for t in range(length))
                score = logp / ((length_offset + length) / (length_offset + 1.0)) ** alpha
                hypotheses.append((score, tokens))
    hypotheses.sort(key=lambda h: -h[0])
    return hypotheses


TRACE_COUNT = {"table_step": 0}


def counting_table_step(params, cache, tokens):
    """``table_step`` that counts how often it is traced (a Python side effect)."""
    TRACE_COUNT["table_step"] += 1
    return table_step(params, cache, tokens)
