"""Decoder-only Transformer LM: shapes, causality, padding, incremental decoding, precision."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_attention import check_matmul_dtypes, dot_generals

from textkit.models import TransformerLM, TransformerLMConfig, get_model, list_models
from textkit.precision import Policy

PAD = 1
VOCAB = 29


@functools.cache
def built(**overrides):
    fields = dict(vocab_size=VOCAB, d_model=32, num_heads=2, d_ff=64, num_layers=2, dropout=0.0,
                  max_len=16, pad_id=PAD)
    model = TransformerLM(TransformerLMConfig(**{**fields, **overrides}))
    variables = jax.jit(model.init)(jax.random.PRNGKey(0), jnp.ones((2, 8), jnp.int32))
    return model, variables


def tokens(seed, shape):
    return jnp.asarray(np.random.default_rng(seed).integers(4, VOCAB, shape), jnp.int32)


def logits_of(model, variables, x):
    return jax.jit(model.apply)(variables, x)[0]


def test_presets_and_contract():
    assert {"transformer_lm_small", "transformer_lm_tiny"} <= set(list_models("language_model"))
    assert get_model("transformer_lm_tiny", vocab_size=10).config.vocab_size == 10
    model, variables = built()
    logits, state = model.apply(variables, tokens(0, (2, 8)))
    assert logits.shape == (2, 8, VOCAB) and logits.dtype == jnp.float32 and state is None
    with pytest.raises(ValueError, match="no state"):
        model.apply(variables, tokens(0, (2, 8)), state=(1, 2))


def test_causality_and_right_padding():
    model, variables = built()
    x = tokens(1, (2, 8))
    logits = logits_of(model, variables, x)
    changed = logits_of(model, variables, x.at[:, 5].set(4))
    np.testing.assert_allclose(changed[:, :5], logits[:, :5], atol=1e-6)
    assert not np.allclose(changed[:, 5:], logits[:, 5:])
    padded = logits_of(model, variables, x.at[:, 6:].set(PAD))
    np.testing.assert_allclose(padded[:, :6], logits[:, :6], atol=1e-6)


@pytest.mark.parametrize("options", [dict(), dict(pre_norm=False, positions="sinusoidal",
                                                  tie_output=False)])
def test_decode_step_matches_forward(options):
    model, variables = built(**options)
    x = tokens(2, (3, 8))
    expected = jax.nn.log_softmax(logits_of(model, variables, x), axis=-1)
    cache = model.apply(variables, 3, 8, method="init_cache")
    assert all(leaf.shape[0] == 3 for leaf in jax.tree_util.tree_leaves(cache))
    step = jax.jit(functools.partial(model.apply, method="decode_step"))
    got = []
    for t in range(8):
        log_probs, cache = step(variables, cache, x[:, t])
        got.append(log_probs)
    np.testing.assert_allclose(jnp.stack(got, 1), expected, atol=1e-5)
    np.testing.assert_array_equal(cache["position"], [8, 8, 8])


@pytest.mark.parametrize("policy", [
    pytest.param("float32", marks=pytest.mark.slow), "mixed_bfloat16",
    pytest.param("mixed_float16", marks=pytest.mark.slow)])     # 7 s each: bfloat16 is fast
def test_policy_dtypes(policy):
    policy = Policy.parse(policy)
    model, variables = built(policy=policy)
    assert all(p.dtype == policy.param_dtype
               for p in jax.tree_util.tree_leaves(variables["params"]))
    x = tokens(3, (2, 8))
    assert logits_of(model, variables, x).dtype == jnp.float32
    loss = lambda v: jnp.mean(jax.nn.logsumexp(model.apply(v, x)[0], axis=-1))
    check_matmul_dtypes(dot_generals(jax.grad(loss), variables), policy)
    cache = model.apply(variables, 2, 4, method="init_cache")
    assert cache["layers"][0]["key"].dtype == policy.compute_dtype
    log_probs, _ = model.apply(variables, cache, x[:, 0], method="decode_step")
    assert log_probs.dtype == jnp.float32 and bool(jnp.all(jnp.isfinite(log_probs)))
