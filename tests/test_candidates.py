"""The candidates hook of the decoding contract: a step reduced to its k best tokens and the
log-probs of a few ids set apart, read from the logits in the [V, N] layout
(``top_k.top_k_log_softmax``, ``Transformer.decode_step_logits_t``), gives what the [N, V]
log-softmax gives, and the searches that use it decode what they decode without it."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from textkit.decoding import ExcludeTokensStep, beam_search, greedy_search, model_step_fn
from textkit.decoding.contract import ModelStep, candidates, step_candidates
from textkit.decoding.top_k import top_k_log_softmax
from textkit.models import get_model
from textkit.models.kernels import quantize_int8

PAD_ID, BOS_ID, EOS_ID = 1, 2, 3


def _reference(logits: np.ndarray, k: int, exclude: tuple[int, ...]):
    """(values, ids, kept) of logits float[N, V] in float64: log-softmax, the k best ids not
    in ``exclude`` (ties: lower id first), the log-probs at ``exclude``."""
    logits = logits.astype(np.float64)
    peak = logits.max(axis=1, keepdims=True)
    log_probs = logits - (peak + np.log(np.exp(logits - peak).sum(axis=1, keepdims=True)))
    kept = log_probs[:, list(exclude)]
    masked = log_probs.copy()
    masked[:, list(exclude)] = -np.inf
    ids = np.argsort(-masked, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(masked, ids, axis=1), ids, kept


def _tied_logits(rows: int, vocab: int, seed: int) -> np.ndarray:
    """Random logits float32[rows, vocab] with ties at the top (the best value of each row
    copied to three other ids, one of them lower) and across rows."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(rows, vocab)).astype(np.float32) * 3
    for row in range(rows):
        best = int(np.argmax(logits[row]))
        for other in rng.choice(vocab, size=3, replace=False):
            logits[row, other] = logits[row, best]
    return logits


@pytest.mark.parametrize("vocab, k, exclude", [
    (1000, 4, (3,)),            # chunks divide V
    (1013, 4, (0, 1012, 500)),  # a prime V: padded chunks; first, last and a middle id apart
    (1000, 1, ()),              # greedy: nothing apart
    (37, 9, (3,)),              # fewer chunks than k
])
def test_top_k_log_softmax_equals_the_log_softmax_reference(vocab, k, exclude):
    logits = _tied_logits(rows=6, vocab=vocab, seed=vocab + k)
    values, ids, kept = top_k_log_softmax(jnp.asarray(logits.T), k, exclude)
    want_values, want_ids, want_kept = _reference(logits, k, exclude)
    np.testing.assert_array_equal(np.asarray(ids), want_ids)
    np.testing.assert_allclose(np.asarray(values), want_values, rtol=0, atol=1e-5)
    np.testing.assert_allclose(np.asarray(kept), want_kept, rtol=0, atol=1e-5)
    assert ids.dtype == jnp.int32 and values.dtype == kept.dtype == jnp.float32
    # The fallback over [N, V] log-probs (steps without the hook) agrees with both.
    fallback = candidates(jax.nn.log_softmax(jnp.asarray(logits), axis=1), k, exclude)
    np.testing.assert_array_equal(np.asarray(fallback.ids), want_ids)
    np.testing.assert_allclose(np.asarray(fallback.values), want_values, rtol=0, atol=1e-5)
    np.testing.assert_allclose(np.asarray(fallback.kept), want_kept, rtol=0, atol=1e-5)


@dataclasses.dataclass(frozen=True)
class HooklessStep(ModelStep):
    """The model's step with every beam hook but the candidates one (the [N, V] path)."""

    def top_k_step(self, params, cache, tokens, k, exclude):
        return None


def _model(tie_output: bool, seed: int):
    model = get_model("transformer_tiny", src_vocab_size=40, tgt_vocab_size=40, dropout=0.0,
                      pad_id=PAD_ID, final_logits_bias=True, tie_output=tie_output)
    dummy = jnp.full((1, 8), BOS_ID, jnp.int32)
    params = model.init(jax.random.key(seed), dummy, dummy)["params"]
    bias = np.random.default_rng(seed).normal(size=40).astype(np.float32)
    bias[EOS_ID] += 5.0     # EOS competes: greedy rows end after 3 to 11 tokens
    return model, {**params, "final_logits_bias": jnp.asarray(bias)}


def _cache(model, params, rows: int, max_length: int):
    src = jnp.asarray(np.random.default_rng(rows).integers(4, 40, size=(rows, 7)), jnp.int32)
    variables = {"params": params}
    encoded = model.apply(variables, src, method="encode")
    return model.apply(variables, encoded, src, max_length, method="init_cache")


@pytest.fixture(scope="module", params=["tied", "untied", "tied-int8"])
def model_and_params(request):
    """Tied and untied output layers; int8 on the tied one (the int8 product is the same
    kernel either way, and every combination doubled this file's compile time)."""
    model, params = _model(tie_output=request.param.startswith("tied"), seed=3)
    if request.param.endswith("int8"):
        params = quantize_int8(model, params)
    return model, params


@pytest.mark.parametrize("rows", [1, 5])
def test_decode_step_logits_t_is_the_decode_step_transposed(model_and_params, rows):
    """One row too: the int8 product pads a single row to two."""
    model, params = model_and_params
    cache = _cache(model, params, rows, max_length=8)
    tokens = jnp.full((rows,), BOS_ID, jnp.int32)
    variables = {"params": params}
    log_probs, cache_a = model.apply(variables, cache, tokens, method="decode_step")
    logits_t, cache_b = model.apply(variables, cache, tokens, method="decode_step_logits_t")
    assert logits_t.shape == (40, rows) and logits_t.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(jax.nn.log_softmax(logits_t.T, axis=1)),
                               np.asarray(log_probs), rtol=0, atol=1e-5)
    for a, b in zip(jax.tree.leaves(cache_a), jax.tree.leaves(cache_b)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    top, _ = step_candidates(model_step_fn(model), params, cache, tokens, 4, (EOS_ID,))
    want = candidates(log_probs, 4, (EOS_ID,))
    np.testing.assert_array_equal(np.asarray(top.ids), np.asarray(want.ids))
    np.testing.assert_allclose(np.asarray(top.values), np.asarray(want.values), atol=1e-5)
    np.testing.assert_allclose(np.asarray(top.kept), np.asarray(want.kept), atol=1e-5)


def _steps(model):
    return {"hook": model_step_fn(model), "no hook": HooklessStep(model)}


@pytest.mark.parametrize("search", ["beam4", "greedy", "beam4 hf", "greedy forced_eos"])
def test_searches_decode_the_same_with_and_without_the_hook(model_and_params, search):
    """Beam search (textkit's and transformers' finishing rules) and greedy search, with EOS
    allowed from step 3 on and a per-row cap: the same tokens and lengths, scores within
    1e-5, whichever way a step's candidates are found."""
    model, params = model_and_params
    cache = _cache(model, params, rows=5, max_length=12)
    caps = jnp.asarray([12, 4, 9, 12, 1], jnp.int32)
    outputs = {}
    for name, step in _steps(model).items():
        options = dict(max_length=12, eos_id=EOS_ID, pad_id=PAD_ID, min_length=3,
                       max_lengths=caps)
        if search.startswith("beam4"):
            outputs[name] = beam_search(step, params, cache, BOS_ID, beam_size=4, n_best=4,
                                        alpha=0.6, hf_finish="hf" in search,
                                        forced_eos="hf" in search, **options)
        else:
            outputs[name] = greedy_search(step, params, cache, BOS_ID,
                                          forced_eos="forced" in search, **options)
    hook, plain = outputs["hook"], outputs["no hook"]
    np.testing.assert_array_equal(np.asarray(hook.tokens), np.asarray(plain.tokens))
    np.testing.assert_array_equal(np.asarray(hook.lengths), np.asarray(plain.lengths))
    np.testing.assert_allclose(np.asarray(hook.scores), np.asarray(plain.scores), rtol=1e-5)
    ended = np.asarray(hook.tokens)[np.arange(5), 0, np.asarray(hook.lengths)[:, 0] - 1]
    assert 0 < np.sum(ended == EOS_ID) and np.any(np.asarray(hook.lengths) > 3)


@pytest.mark.parametrize("renormalize", [True, False])
def test_excluded_tokens_through_the_hook(model_and_params, renormalize):
    """``ExcludeTokensStep`` over the hook: the excluded ids never appear; its candidates are
    ``candidates`` of its own [N, V] log-probs (renormalised or not), ids exactly."""
    model, params = model_and_params
    cache = _cache(model, params, rows=4, max_length=8)
    tokens = jnp.full((4,), BOS_ID, jnp.int32)
    banned = (PAD_ID, 7)
    excluding = ExcludeTokensStep(model_step_fn(model), banned, renormalize=renormalize)
    top, _ = step_candidates(excluding, params, cache, tokens, 4, (EOS_ID, 7))
    log_probs, _ = excluding(params, cache, tokens)
    want = candidates(log_probs, 4, (EOS_ID, 7))
    np.testing.assert_array_equal(np.asarray(top.ids), np.asarray(want.ids))
    np.testing.assert_allclose(np.asarray(top.values), np.asarray(want.values), atol=1e-5)
    np.testing.assert_allclose(np.asarray(top.kept), np.asarray(want.kept), atol=1e-5)
    assert np.all(np.asarray(top.kept)[:, 1] == -np.inf)
    assert not np.isin(np.asarray(top.ids), banned).any()
    output = beam_search(excluding, params, cache, BOS_ID, beam_size=4, max_length=8,
                         eos_id=EOS_ID, pad_id=PAD_ID, n_best=4)
    tokens, lengths = np.asarray(output.tokens), np.asarray(output.lengths)
    chosen = [tokens[b, n, :lengths[b, n]] for b in range(4) for n in range(4)]
    assert not any(np.isin(row, banned).any() for row in chosen)
