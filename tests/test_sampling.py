"""Greedy decoding and sampling on a transition-table model."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from toy_decoders import (
    BOS,
    EOS,
    PAD,
    TRACE_COUNT,
    counting_table_step,
    make_table_model,
    row_log_probs,
    table_step,
)

from textkit.decoding import greedy_search, sample

V, L, B = 10, 8, 6


def _check_rows(out, params, cache, start=BOS):
    """Nothing after EOS, lengths right, scores = summed log-probs of the tokens."""
    all_tokens, scores, lengths = (np.asarray(x) for x in out)
    rows, n, length = all_tokens.shape
    for row in range(rows):
        for i in range(n):
            tokens = all_tokens[row, i].tolist()
            size = int(lengths[row, i])
            assert 1 <= size <= length
            assert EOS not in tokens[:size - 1]
            assert tokens[size - 1] == EOS or size == length
            assert all(t == PAD for t in tokens[size:])
            logp = sum(row_log_probs(params, cache, row, start, tuple(tokens[:t]))[tokens[t]]
                       for t in range(size))
            assert scores[row, i] == pytest.approx(logp, rel=1e-5, abs=1e-5)


def test_greedy_follows_the_argmax_and_stops_at_eos():
    params, cache = make_table_model(seed=11, vocab=V, length=L, rows=B)
    out = greedy_search(table_step, params, cache, BOS, max_length=L, eos_id=EOS, pad_id=PAD)
    assert out.tokens.shape == (B, 1, L) and out.lengths.shape == (B, 1)
    _check_rows(out, params, cache)
    for row in range(B):
        prefix: tuple[int, ...] = ()
        while len(prefix) < L and (not prefix or prefix[-1] != EOS):
            prefix += (int(np.argmax(row_log_probs(params, cache, row, BOS, prefix))),)
        assert tuple(int(t) for t in out.tokens[row, 0, :len(prefix)]) == prefix
    assert np.any(np.asarray(out.lengths) < L), "test model should end some rows early"


def test_top_k_one_equals_greedy():
    params, cache = make_table_model(seed=12, vocab=V, length=L, rows=B)
    greedy = greedy_search(table_step, params, cache, BOS, max_length=L, eos_id=EOS, pad_id=PAD)
    sampled = sample(table_step, params, cache, BOS, jax.random.key(3), max_length=L,
                     eos_id=EOS, pad_id=PAD, top_k=1, temperature=0.7)
    np.testing.assert_array_equal(sampled.tokens, greedy.tokens)
    np.testing.assert_array_equal(sampled.lengths, greedy.lengths)
    np.testing.assert_allclose(sampled.scores, greedy.scores, rtol=1e-6)


def test_same_seed_same_samples():
    params, cache = make_table_model(seed=13, vocab=V, length=L, rows=B, sharpness=0.5)
    run = lambda seed: sample(table_step, params, cache, BOS, jax.random.key(seed),
                              max_length=L, eos_id=EOS, pad_id=PAD, num_samples=3, top_k=6,
                              top_p=0.9, temperature=1.5)
    first, again, other = run(0), run(0), run(1)
    np.testing.assert_array_equal(first.tokens, again.tokens)
    np.testing.assert_array_equal(first.scores, again.scores)
    assert not np.array_equal(first.tokens, other.tokens)
    assert first.tokens.shape == (B, 3, L)
    _check_rows(first, params, cache)


def _first_token_counts(probabilities_row, draws, **options):
    """Draw the first token ``draws`` times from a one-step model; counts float[V]."""
    params, cache = make_table_model(seed=14, vocab=V, length=1, rows=1)
    out = sample(table_step, params, cache, BOS, jax.random.key(5), max_length=1, eos_id=EOS,
                 pad_id=PAD, num_samples=draws, **options)
    probabilities_row[:] = np.exp(row_log_probs(params, cache, 0, BOS, ()))
    return np.bincount(np.asarray(out.tokens[0, :, 0]), minlength=V).astype(float)


def test_samples_follow_the_filtered_distribution():
    draws = 4000
    p = np.zeros(V)
    counts = _first_token_counts(p, draws)
    assert np.abs(counts / draws - p).max() < 0.03

    counts = _first_token_counts(p, draws, temperature=2.0, top_k=3)
    top3 = np.argsort(-p)[:3]
    assert set(np.flatnonzero(counts)) == set(top3.tolist())
    expected = np.zeros(V)
    expected[top3] = np.sqrt(p[top3]) / np.sqrt(p[top3]).sum()
    assert np.abs(counts / draws - expected).max() < 0.03

    order = np.argsort(-p)
    nucleus_size = int(np.searchsorted(np.cumsum(p[order]), 0.6)) + 1
    counts = _first_token_counts(p, draws, top_p=0.6)
    assert set(np.flatnonzero(counts)) == set(order[:nucleus_size].tolist())


def test_min_length_and_caps():
    params, cache = make_table_model(seed=15, vocab=V, length=L, rows=B)
    caps = jnp.asarray([1, 2, 3, 8, 8, 8], jnp.int32)
    out = greedy_search(table_step, params, cache, BOS, max_length=L, eos_id=EOS, pad_id=PAD,
                        max_lengths=caps, min_length=3)
    lengths = np.asarray(out.lengths[:, 0])
    assert np.all(lengths <= np.asarray(caps))
    assert np.all(lengths[3:] >= 3)
    assert np.all(np.asarray(out.tokens[:, 0, :2]) != EOS)


def test_new_batch_of_same_shape_does_not_retrace():
    params, cache = make_table_model(seed=16, vocab=V, length=L, rows=B)
    sample(counting_table_step, params, cache, BOS, jax.random.key(0), max_length=L,
           eos_id=EOS, pad_id=PAD, top_k=2)
    traces = TRACE_COUNT["table_step"]
    other_params, other_cache = make_table_model(seed=17, vocab=V, length=L, rows=B)
    sample(counting_table_step, other_params, other_cache, jnp.full((B,), 4, jnp.int32),
           jax.random.key(1), max_length=L, eos_id=EOS, pad_id=PAD, top_k=2, min_length=2)
    assert TRACE_COUNT["table_step"] == traces


def test_bad_sampling_options_are_reported():
    params, cache = make_table_model(seed=18, vocab=V, length=L, rows=B)
    with pytest.raises(ValueError, match="temperature"):
        sample(table_step, params, cache, BOS, jax.random.key(0), max_length=L, eos_id=EOS,
               temperature=0.0)
    with pytest.raises(ValueError, match="top_p"):
        sample(table_step, params, cache, BOS, jax.random.key(0), max_length=L, eos_id=EOS,
               top_p=1.5)
