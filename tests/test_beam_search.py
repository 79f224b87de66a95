"""Beam search against exhaustive search on a transition-table model, and its contracts."""

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
    exhaustive,
    make_table_model,
    row_log_probs,
    table_step,
)

from textkit.decoding import beam_search, greedy_search, length_penalty, model_step_fn, prefill

# Exhaustive-search tests: 3 real tokens + EOS over 4 steps, 40 EOS-ended + 81 truncated
# hypotheses, all inside a beam of 128.
VOCAB, LENGTH, ROWS, WIDE = 5, 4, 3, 128
# Other tests share one shape so that they share compiled programs.
V, L, B = 10, 8, 6
PAD_ID = 1   # textkit's <pad> for the real models


@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
def test_wide_beam_equals_exhaustive_search(alpha):
    params, cache = make_table_model(seed=1, vocab=VOCAB, length=LENGTH, rows=ROWS,
                                     sharpness=0.7)
    out = beam_search(table_step, params, cache, BOS, beam_size=WIDE, max_length=LENGTH,
                      eos_id=EOS, alpha=alpha, n_best=10, pad_id=PAD,
                      max_lengths=jnp.full((ROWS,), LENGTH, jnp.int32))
    for row in range(ROWS):
        expected = exhaustive(params, cache, row, start=BOS, cap=LENGTH, alpha=alpha)[:10]
        np.testing.assert_allclose(out.scores[row], [s for s, _ in expected], rtol=1e-5)
        for rank, (_, tokens) in enumerate(expected):
            n = len(tokens)
            assert int(out.lengths[row, rank]) == n
            assert tuple(np.asarray(out.tokens[row, rank, :n])) == tokens
            assert np.all(np.asarray(out.tokens[row, rank, n:]) == PAD)


def test_per_row_caps_and_min_length_match_exhaustive_search():
    params, cache = make_table_model(seed=2, vocab=VOCAB, length=LENGTH, rows=ROWS)
    caps = np.array([2, 4, 3], np.int32)
    out = beam_search(table_step, params, cache, BOS, beam_size=WIDE, max_length=LENGTH,
                      eos_id=EOS, alpha=0.6, n_best=10, max_lengths=jnp.asarray(caps),
                      pad_id=PAD, min_length=2)
    for row in range(ROWS):
        expected = exhaustive(params, cache, row, start=BOS, cap=int(caps[row]), alpha=0.6,
                              min_length=2)[:10]
        np.testing.assert_allclose(out.scores[row], [s for s, _ in expected], rtol=1e-5)
        assert [tuple(np.asarray(out.tokens[row, i, :out.lengths[row, i]])) for i in range(10)] \
            == [t for _, t in expected]
        assert int(out.lengths[row].max()) <= caps[row]


def test_small_beam_output_is_consistent():
    """K=4 on a larger table: n-best sorted, scores recomputed from the tokens, nothing after
    EOS, lengths right."""
    vocab, length, rows = V, L, B
    params, cache = make_table_model(seed=3, vocab=vocab, length=length, rows=rows,
                                     sharpness=1.0)
    out = beam_search(table_step, params, cache, jnp.full((rows,), BOS, jnp.int32),
                      beam_size=4, max_length=length, eos_id=EOS, alpha=0.6, n_best=4,
                      pad_id=PAD)
    assert out.tokens.shape == (rows, 4, length) and out.tokens.dtype == jnp.int32
    assert out.scores.shape == (rows, 4) and out.scores.dtype == jnp.float32
    scores = np.asarray(out.scores)
    assert np.all(np.diff(scores, axis=1) <= 0), scores
    for row in range(rows):
        for rank in range(4):
            n = int(out.lengths[row, rank])
            tokens = tuple(int(t) for t in out.tokens[row, rank])
            assert 1 <= n <= length
            assert EOS not in tokens[:n - 1]
            assert tokens[n - 1] == EOS or n == length
            assert all(t == PAD for t in tokens[n:])
            logp = sum(row_log_probs(params, cache, row, BOS, tokens[:t])[tokens[t]]
                       for t in range(n))
            expected = logp / float(length_penalty(n, 0.6))
            assert scores[row, rank] == pytest.approx(expected, rel=1e-5)


def test_length_penalty_formula():
    assert float(length_penalty(1, 0.6)) == pytest.approx(1.0)
    assert float(length_penalty(7, 0.6, length_offset=5.0)) == pytest.approx((12 / 6) ** 0.6)
    assert float(length_penalty(10, 1.0, length_offset=0.0)) == pytest.approx(10.0)
    assert float(length_penalty(9, 0.0)) == 1.0
    np.testing.assert_allclose(length_penalty(jnp.arange(1, 4), 0.5, length_offset=2.0),
                               np.sqrt((2.0 + np.arange(1, 4)) / 3.0), rtol=1e-6)


def test_alpha_changes_preference_towards_longer_hypotheses():
    """Hand-set: 'EOS' has p=0.4, 'a EOS' has p=0.5*0.7=0.35: alpha=0 picks the short one,
    alpha=3 the long one ((7/6)**3 > log 0.35 / log 0.4)."""
    vocab = 4
    a = 3
    table = np.zeros((3, vocab, vocab), np.float32)
    table[:, :, PAD] = table[:, :, BOS] = -np.inf
    table[0, BOS, [EOS, a, 2]] = np.log([0.4, 0.5, 0.1])
    table[1, :, [EOS, a, 2]] = np.log([0.7, 0.2, 0.1])[:, None]
    params = {"table": jnp.asarray(table)}
    cache = {"pos": jnp.zeros((1,), jnp.int32), "bias": jnp.zeros((1, vocab), jnp.float32)}
    short = beam_search(table_step, params, cache, BOS, beam_size=2, max_length=2, eos_id=EOS,
                        alpha=0.0, pad_id=PAD)
    long = beam_search(table_step, params, cache, BOS, beam_size=2, max_length=2, eos_id=EOS,
                       alpha=3.0, pad_id=PAD)
    assert np.asarray(short.tokens[0, 0]).tolist() == [EOS, PAD]
    assert float(short.scores[0, 0]) == pytest.approx(np.log(0.4), rel=1e-5)
    assert np.asarray(long.tokens[0, 0]).tolist() == [a, EOS]
    assert float(long.scores[0, 0]) == pytest.approx(np.log(0.35) / (7 / 6) ** 3.0, rel=1e-5)
    assert np.asarray(long.lengths[0]).tolist() == [2]


def test_beam_one_equals_greedy_when_eos_is_suppressed():
    vocab, length, rows = V, L, B
    params, cache = make_table_model(seed=4, vocab=vocab, length=length, rows=rows)
    beam = beam_search(table_step, params, cache, BOS, beam_size=1, max_length=length,
                       eos_id=EOS, alpha=0.0, pad_id=PAD, min_length=length)
    greedy = greedy_search(table_step, params, cache, BOS, max_length=length, eos_id=EOS,
                           pad_id=PAD, min_length=length)
    np.testing.assert_array_equal(beam.tokens, greedy.tokens)
    np.testing.assert_allclose(beam.scores, greedy.scores, rtol=1e-6)
    np.testing.assert_array_equal(beam.lengths, np.full((rows, 1), length))


def test_beam_one_with_eos_equals_greedy_or_beats_it():
    """With EOS allowed, K=1 returns greedy's hypothesis unless an earlier EOS scored higher."""
    vocab, length, rows = V, L, B
    params, cache = make_table_model(seed=5, vocab=vocab, length=length, rows=rows)
    beam = beam_search(table_step, params, cache, BOS, beam_size=1, max_length=length,
                       eos_id=EOS, alpha=0.0, pad_id=PAD)
    greedy = greedy_search(table_step, params, cache, BOS, max_length=length, eos_id=EOS,
                           pad_id=PAD)
    same = np.all(np.asarray(beam.tokens) == np.asarray(greedy.tokens), axis=(1, 2))
    assert np.all(np.asarray(beam.scores)[:, 0] >= np.asarray(greedy.scores)[:, 0] - 1e-6)
    np.testing.assert_allclose(np.asarray(beam.scores)[same], np.asarray(greedy.scores)[same],
                               rtol=1e-6)
    assert same.sum() >= rows // 2, "expected most rows to agree with greedy"
    assert not np.all(same) or np.all(np.asarray(greedy.lengths) < length), "EOS never chosen"


def test_prefix_start_tokens_and_row_independence():
    """start_tokens int32[B]; a row decoded alone equals the row inside a batch."""
    vocab, length, rows = V, L, B
    params, cache = make_table_model(seed=6, vocab=vocab, length=length, rows=rows)
    starts = jnp.asarray([BOS, 3, 4, 5, 6, 7], jnp.int32)
    batch = beam_search(table_step, params, cache, starts, beam_size=4, max_length=length,
                        eos_id=EOS, alpha=0.6, n_best=4, pad_id=PAD)
    for row in (0, 3):
        alone_cache = jax.tree_util.tree_map(lambda x, r=row: x[r:r + 1], cache)
        alone = beam_search(table_step, params, alone_cache, starts[row:row + 1], beam_size=4,
                            max_length=length, eos_id=EOS, alpha=0.6, n_best=4, pad_id=PAD)
        np.testing.assert_array_equal(alone.tokens[0], batch.tokens[row])
        np.testing.assert_allclose(alone.scores[0], batch.scores[row], rtol=1e-6)


def test_same_shapes_compile_once():
    """New arrays, start tokens given as int or array, alpha, min_length and caps reuse the
    compiled program: the step function is traced once only."""
    params, cache = make_table_model(seed=7, vocab=V, length=L, rows=B)
    kwargs = dict(beam_size=4, max_length=L, eos_id=EOS, pad_id=PAD, n_best=4)
    first = beam_search(counting_table_step, params, cache, BOS, **kwargs)
    traces = TRACE_COUNT["table_step"]
    assert traces >= 1
    other_params, other_cache = make_table_model(seed=8, vocab=V, length=L, rows=B)
    second = beam_search(counting_table_step, other_params, other_cache,
                         jnp.full((B,), 4, jnp.int32), alpha=0.9, min_length=2,
                         max_lengths=jnp.full((B,), 5, jnp.int32), **kwargs)
    assert TRACE_COUNT["table_step"] == traces
    assert not np.array_equal(first.tokens, second.tokens)
    beam_search(counting_table_step, params, cache, BOS, **{**kwargs, "beam_size": 5})
    assert TRACE_COUNT["table_step"] > traces, "a new beam size must compile a new program"


def test_bad_arguments_are_reported():
    params, cache = make_table_model(seed=9, vocab=5, length=3, rows=2)
    with pytest.raises(ValueError, match="n_best"):
        beam_search(table_step, params, cache, BOS, beam_size=2, n_best=3, max_length=3,
                    eos_id=EOS)
    bad_cache = {**cache, "pos": jnp.zeros((3,), jnp.int32)}
    with pytest.raises(ValueError, match="leading"):
        beam_search(table_step, params, bad_cache, BOS, beam_size=2, max_length=3, eos_id=EOS)


@pytest.mark.slow
def test_gnmt_sentence_alone_equals_sentence_in_padded_batch():
    """Real recurrent cache (LSTM state + attention memory) reordered by parent beam."""
    from textkit.models import get_model

    model = get_model("gnmt_tiny", src_vocab_size=20, tgt_vocab_size=20, dropout=0.0,
                      pad_id=PAD_ID)
    rng = np.random.default_rng(0)
    src = np.full((3, 8), PAD_ID, np.int32)
    lengths = [8, 3, 5]
    for row, n in enumerate(lengths):
        src[row, :n] = rng.integers(4, 20, size=n)
    params = model.init(jax.random.key(0), jnp.asarray(src[:1]), jnp.asarray(src[:1]))["params"]

    def decode(source):
        memory = model.apply({"params": params}, source, method="encode")
        cache = model.apply({"params": params}, memory, source, 7, method="init_cache")
        return beam_search(model_step_fn(model), params, cache, 2, beam_size=3, max_length=7,
                           eos_id=3, n_best=3, pad_id=PAD_ID)

    batch = decode(jnp.asarray(src))
    alone = decode(jnp.asarray(src[1:2, :lengths[1]]))
    np.testing.assert_array_equal(alone.tokens[0], batch.tokens[1])
    np.testing.assert_allclose(alone.scores[0], batch.scores[1], rtol=1e-4)
    assert np.all(np.diff(np.asarray(batch.scores), axis=1) <= 0)


@pytest.mark.slow
def test_language_model_prefix_continuation_matches_full_forward():
    """prefill + greedy_search continue a prompt exactly as argmax over the full forward pass."""
    from textkit.models import get_model

    model = get_model("lstm_lm_tiny", vocab_size=30, dropout=0.0, pad_id=PAD_ID)
    prompt = jnp.asarray(np.random.default_rng(1).integers(4, 30, size=(2, 5)), jnp.int32)
    params = model.init(jax.random.key(0), prompt)["params"]
    step_fn = model_step_fn(model)
    cache = model.apply({"params": params}, 2, 16, method="init_cache")
    cache, last = prefill(step_fn, params, cache, prompt)
    out = greedy_search(step_fn, params, cache, last, max_length=6, eos_id=3, pad_id=PAD_ID,
                        min_length=6)
    tokens = prompt
    for _ in range(6):
        logits, _ = model.apply({"params": params}, tokens)
        tokens = jnp.concatenate([tokens, jnp.argmax(logits[:, -1], -1)[:, None]], axis=1)
    np.testing.assert_array_equal(out.tokens[:, 0], tokens[:, 5:])
    beam = beam_search(step_fn, params, cache, last, beam_size=2, max_length=6, eos_id=3,
                       pad_id=PAD_ID, n_best=2)
    assert beam.tokens.shape == (2, 2, 6)
