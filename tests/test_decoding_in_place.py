"""Beam search with the in-place cache (slots + ancestry table, grouped cross-attention over
untiled memory, step 0 on one row per sentence, the cache grown in segments) returns what the
search before it returned: same n-best tokens, scores within rtol 1e-5 (issue 17)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from reference_beam_search import beam_search as reference_beam_search
from toy_decoders import BOS, EOS, PAD, make_table_model, table_step

from textkit.decoding import beam_search, greedy_search, model_step_fn, sample
from textkit.decoding.contract import expand_beams, segment_lengths
from textkit.models import get_model

PAD_ID, BOS_ID, EOS_ID = 1, 2, 3
VOCAB = 24


@dataclasses.dataclass(frozen=True)
class PlainStep:
    """The model's step without the beam hooks: tiled cache, per-step gather, full length."""

    model: object

    def __call__(self, params, cache, tokens):
        return self.model.apply({"params": params}, cache, tokens, method="decode_step")


def _biased_model(eos_bias: float, seed: int):
    """transformer_tiny, untied output (a random tied one repeats its input token), a random
    final logits bias and the EOS logit raised by ``eos_bias``."""
    model = get_model("transformer_tiny", src_vocab_size=VOCAB, tgt_vocab_size=VOCAB,
                      dropout=0.0, pad_id=PAD_ID, final_logits_bias=True, tie_output=False)
    dummy = jnp.full((1, 8), BOS_ID, jnp.int32)
    params = model.init(jax.random.key(seed), dummy, dummy)["params"]
    bias = np.random.default_rng(seed).normal(size=VOCAB).astype(np.float32)
    bias[EOS_ID] += eos_bias
    return model, {**params, "final_logits_bias": jnp.asarray(bias)}


@pytest.fixture(scope="module")
def transformer():
    return _biased_model(eos_bias=1.0, seed=0)


def _sources(rows: int = 5, length: int = 9, seed: int = 0) -> jax.Array:
    rng = np.random.default_rng(seed)
    src = np.full((rows, length), PAD_ID, np.int32)
    for row in range(rows):
        n = rng.integers(2, length + 1)
        src[row, :n] = rng.integers(4, VOCAB, size=n)
    return jnp.asarray(src)


def _cache(model, params, src, max_length):
    encoded = model.apply({"params": params}, src, method="encode")
    return model.apply({"params": params}, encoded, src, max_length, method="init_cache")


def _assert_same(new, old):
    np.testing.assert_array_equal(np.asarray(new.tokens), np.asarray(old.tokens))
    np.testing.assert_array_equal(np.asarray(new.lengths), np.asarray(old.lengths))
    np.testing.assert_allclose(np.asarray(new.scores), np.asarray(old.scores), rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("beam_size", [1, 4, 8])
@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_transformer_beam_search_equals_the_reference(transformer, beam_size, alpha):
    """Random model, EOS wherever the model puts it, per-row caps (some rows stop early)."""
    model, params = transformer
    src = _sources()
    max_length = 20   # segments of 8, 16 and 20 positions
    cache = _cache(model, params, src, max_length)
    caps = jnp.asarray([20, 3, 11, 17, 1], jnp.int32)
    options = dict(beam_size=beam_size, max_length=max_length, eos_id=EOS_ID, pad_id=PAD_ID,
                   alpha=alpha, n_best=min(beam_size, 3), max_lengths=caps)
    old = reference_beam_search(PlainStep(model), params, cache, BOS_ID, **options)
    _assert_same(beam_search(model_step_fn(model), params, cache, BOS_ID, **options), old)
    _assert_same(beam_search(PlainStep(model), params, cache, BOS_ID, **options), old)
    assert np.any(np.asarray(old.lengths) < np.asarray(caps)[:, None]), "no EOS was tried"


@pytest.mark.slow
def test_eos_at_every_step_and_min_length():
    """An EOS-heavy model (EOS logit raised by the final bias): hypotheses end at many steps."""
    model, params = _biased_model(eos_bias=2.0, seed=2)
    src = _sources(seed=3)
    cache = _cache(model, params, src, 12)
    lengths = set()
    for min_length in (0, 4):
        options = dict(beam_size=4, max_length=12, eos_id=EOS_ID, pad_id=PAD_ID, alpha=0.6,
                       n_best=4, min_length=min_length)
        old = reference_beam_search(PlainStep(model), params, cache, BOS_ID, **options)
        _assert_same(beam_search(model_step_fn(model), params, cache, BOS_ID, **options), old)
        lengths |= set(np.asarray(old.lengths).ravel().tolist())
    assert len(lengths) >= 4, f"hypotheses ended at too few lengths: {sorted(lengths)}"


@pytest.mark.slow
def test_ties_are_broken_as_before(transformer):
    """All-zero parameters: every token equally likely at every step (all candidates tie)."""
    model, params = transformer
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    src = _sources(seed=4)
    cache = _cache(model, zeros, src, 6)
    for alpha in (0.0, 0.6):
        options = dict(beam_size=4, max_length=6, eos_id=EOS_ID, pad_id=PAD_ID, alpha=alpha,
                       n_best=4)
        old = reference_beam_search(PlainStep(model), zeros, cache, BOS_ID, **options)
        _assert_same(beam_search(model_step_fn(model), zeros, cache, BOS_ID, **options), old)


@pytest.mark.slow
def test_pretrained_search_options_equal_the_reference(transformer):
    """forced_eos and transformers' finishing rule (hf_finish) with length_offset=0."""
    model, params = transformer
    src = _sources(seed=5)
    cache = _cache(model, params, src, 10)
    options = dict(beam_size=4, max_length=10, eos_id=EOS_ID, pad_id=PAD_ID, alpha=1.0,
                   length_offset=0.0, forced_eos=True, hf_finish=True)
    old = reference_beam_search(PlainStep(model), params, cache, BOS_ID, **options)
    _assert_same(beam_search(model_step_fn(model), params, cache, BOS_ID, **options), old)


def test_table_model_without_hooks_equals_the_reference():
    """A plain step function (no hooks): step 0 unexpanded, then the tiled cache + gather."""
    params, cache = make_table_model(seed=11, vocab=9, length=7, rows=4)
    for beam_size in (1, 3, 8):
        options = dict(beam_size=beam_size, max_length=7, eos_id=EOS, pad_id=PAD, n_best=1)
        _assert_same(beam_search(table_step, params, cache, BOS, **options),
                     reference_beam_search(table_step, params, cache, BOS, **options))


@pytest.mark.slow
def test_language_model_prefix_beam_search_equals_the_reference():
    """Transformer LM continuing a prompt: in-place cache, no segments (cache not fresh)."""
    from textkit.decoding import prefill

    model = get_model("transformer_lm_tiny", vocab_size=VOCAB, dropout=0.0, pad_id=PAD_ID)
    prompt = jnp.asarray(np.random.default_rng(2).integers(4, VOCAB, size=(3, 4)), jnp.int32)
    params = model.init(jax.random.key(1), prompt)["params"]
    cache = model.apply({"params": params}, 3, 14, method="init_cache")
    cache, last = prefill(model_step_fn(model), params, cache, prompt)
    options = dict(beam_size=4, max_length=10, eos_id=EOS_ID, pad_id=PAD_ID, n_best=2)
    old = reference_beam_search(PlainStep(model), params, cache, last, **options)
    _assert_same(beam_search(model_step_fn(model), params, cache, last, **options), old)


@pytest.mark.slow
def test_greedy_and_sampling_with_a_growing_cache_equal_the_full_cache(transformer):
    model, params = transformer
    src = _sources(seed=6)
    cache = _cache(model, params, src, 40)   # segments 16, 32, 40
    options = dict(max_length=40, eos_id=EOS_ID, pad_id=PAD_ID, min_length=40)
    _assert_same(greedy_search(model_step_fn(model), params, cache, BOS_ID, **options),
                 greedy_search(PlainStep(model), params, cache, BOS_ID, **options))
    key = jax.random.key(3)
    _assert_same(sample(model_step_fn(model), params, cache, BOS_ID, key, num_samples=2,
                        top_k=5, **options),
                 sample(PlainStep(model), params, cache, BOS_ID, key, num_samples=2, top_k=5,
                        **options))


@pytest.mark.slow
def test_the_beam_cache_is_in_place_and_untiled(transformer):
    """The beam cache keeps one copy of the memory per sentence and K slots of the self
    cache; beam search never gathers it (only the [B, K, L] ancestry table moves)."""
    model, params = transformer
    src = _sources(rows=2)
    cache = _cache(model, params, src, 8)
    beam_cache, in_place = expand_beams(model_step_fn(model), params, cache, 4)
    assert in_place
    layer = beam_cache["layers"][0]
    assert layer["memory_key"].shape == cache["layers"][0]["memory_key"].shape   # [B, H, S, Dh]
    heads, depth = cache["layers"][0]["self"]["key"].shape[1:3]
    assert layer["self"]["key"].shape == (2, heads, depth, 4, 8)       # depth-major keys
    assert layer["self"]["value"].shape == (2, heads, 4, 8, depth)
    assert beam_cache["ancestry"].shape == (2, 4, 8)
    tiled, in_place = expand_beams(PlainStep(model), params, cache, 4)
    assert not in_place and tiled["layers"][0]["memory_key"].shape[0] == 8
    assert segment_lengths(8) == (8,) and segment_lengths(40) == (16, 32, 40)
    assert segment_lengths(32) == (8, 16, 32) and segment_lengths(106) == (32, 64, 106)

    def search(p, c):
        return beam_search(model_step_fn(model), p, c, BOS_ID, beam_size=4, max_length=8,
                           eos_id=EOS_ID, pad_id=PAD_ID).tokens

    hlo = jax.jit(search).lower(params, cache).as_text()
    # No gather of a [B*K, H, L, Dh] self-attention cache inside the loop.
    assert "tensor<8x4x8x16xf32>" not in hlo


def test_chunked_top_k_equals_lax_top_k_with_ties_and_padding():
    from jax import lax

    from textkit.decoding.top_k import chunk_size, top_k

    assert chunk_size(128000) == 256 and chunk_size(4 * 58101) == 214 and chunk_size(5003) == 256
    rng = np.random.default_rng(7)
    cases = [rng.normal(size=(3, 5003)),                          # 5003 is prime: padded
             rng.normal(size=(2, 4 * 58101)),                     # chunks of 214, no padding
             rng.integers(0, 3, size=(4, 4096)).astype(float),    # many ties
             np.where(np.arange(3000) % 5 == 0, -np.inf, rng.normal(size=(2, 3000))),
             rng.normal(size=(2, 40))]                            # short: the plain kernel
    for x in cases:
        for k in (1, 4, 8):
            x32 = jnp.asarray(x, jnp.float32)
            values, index = jax.jit(top_k, static_argnums=1)(x32, k)
            expected_values, expected_index = lax.top_k(x32, k)
            np.testing.assert_array_equal(values, expected_values)
            np.testing.assert_array_equal(index, expected_index)
