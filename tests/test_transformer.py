"""Transformer encoder-decoder: shapes, masking, causality, incremental decoding, precision."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpy_transformer import transformer_logits
from test_attention import check_matmul_dtypes, dot_generals

from textkit.models import Transformer, TransformerConfig, get_model, list_models
from textkit.precision import Policy

PAD = 1
VOCAB = 37


def tiny(**overrides):
    fields = dict(src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, d_model=32, num_heads=4, d_ff=64,
                  num_encoder_layers=1, num_decoder_layers=2, dropout=0.0, max_len=32,
                  pad_id=PAD)
    return Transformer(TransformerConfig(**{**fields, **overrides}))


def tokens(seed, shape):
    return jnp.asarray(np.random.default_rng(seed).integers(4, VOCAB, shape), jnp.int32)


@functools.cache
def built(**overrides):
    model = tiny(**overrides)
    variables = jax.jit(model.init)(jax.random.PRNGKey(0), tokens(0, (2, 7)), tokens(1, (2, 6)))
    return model, variables


def forward(model, variables, src, tgt):
    return jax.jit(model.apply)(variables, src, tgt)


def decode_all(model, variables, src, tgt):
    """Log-probs of feeding ``tgt`` token by token through decode_step: f32 [B, T, V]."""
    memory = jax.jit(functools.partial(model.apply, method="encode"))(variables, src)
    cache = jax.jit(functools.partial(model.apply, method="init_cache"), static_argnums=3)(
        variables, memory, src, tgt.shape[1])
    step = jax.jit(functools.partial(model.apply, method="decode_step"))
    out = []
    for t in range(tgt.shape[1]):
        log_probs, cache = step(variables, cache, tgt[:, t])
        out.append(log_probs)
    return jnp.stack(out, axis=1), cache


def test_presets_registered_and_overridable():
    assert {"transformer_base", "transformer_big", "transformer_small",
            "transformer_tiny"} <= set(list_models("translation"))
    model = get_model("transformer_small", src_vocab_size=100, tgt_vocab_size=100,
                      policy="mixed_bfloat16")
    c = model.config
    assert (c.d_model, c.num_heads, c.d_ff, c.num_encoder_layers) == (256, 4, 1024, 3)
    assert c.src_vocab_size == 100 and c.policy == Policy.parse("mixed_bfloat16")
    big = get_model("transformer_big").config
    assert (big.d_model, big.num_heads, big.d_ff, big.num_decoder_layers) == (1024, 16, 4096, 6)


def test_config_errors():
    with pytest.raises(ValueError, match="share_embeddings"):
        TransformerConfig(src_vocab_size=10, tgt_vocab_size=11)
    with pytest.raises(ValueError, match="positions"):
        TransformerConfig(positions="rotary")


def test_transformer_base_parameter_count():
    model = get_model("transformer_base", src_vocab_size=32000, tgt_vocab_size=32000)
    shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0),
                            jnp.ones((1, 8), jnp.int32), jnp.ones((1, 8), jnp.int32))
    count = sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(shapes))
    # counted from the architecture: a shared 32k x 512 table (tied output, no output bias);
    # per encoder layer a self-attention (q, k, v, out: 4 x (512² + 512)), a feed-forward
    # (512 x 2048 + 2048 + 2048 x 512 + 512) and 2 layer norms (2 x 2 x 512); per decoder layer
    # a cross-attention and a third layer norm more; final encoder and decoder norms
    d, ff, vocab = 512, 2048, 32000
    attention, feed_forward, norm = 4 * (d * d + d), 2 * d * ff + ff + d, 2 * d
    encoder_layer = attention + feed_forward + 2 * norm
    decoder_layer = 2 * attention + feed_forward + 3 * norm
    assert count == vocab * d + 6 * encoder_layer + 6 * decoder_layer + 2 * norm == 60_524_544


@pytest.mark.slow
def test_shapes_and_padding_invariance():
    model, variables = built()
    src, tgt = tokens(2, (2, 7)), tokens(3, (2, 6))
    src = src.at[1, 5:].set(PAD)  # second source has 5 real tokens
    logits = forward(model, variables, src, tgt)
    assert logits.shape == (2, 6, VOCAB) and logits.dtype == jnp.float32
    padded_src = jnp.pad(src, ((0, 0), (0, 4)), constant_values=PAD)
    padded_tgt = jnp.pad(tgt, ((0, 0), (0, 3)), constant_values=PAD)
    padded = forward(model, variables, padded_src, padded_tgt)
    np.testing.assert_allclose(padded[:, :6], logits, atol=1e-5)


def reference(variables, src, tgt):
    """The independent float64 numpy forward of ``tiny``'s architecture."""
    return transformer_logits(variables["params"], src, tgt, pad_id=PAD, num_encoder_layers=1,
                              num_decoder_layers=2)


def test_forward_equals_an_independent_numpy_transformer():
    model, variables = built()
    src, tgt = tokens(12, (3, 7)), tokens(13, (3, 6))
    src = src.at[1, 4:].set(PAD)
    np.testing.assert_allclose(forward(model, variables, src, tgt),
                               reference(variables, src, tgt), rtol=0, atol=1e-4)


def test_dummy_all_padding_row_attends_uniformly_and_leaves_other_rows_alone():
    model, variables = built()
    src, tgt = tokens(2, (2, 7)).at[1].set(PAD), tokens(3, (2, 6))
    logits = forward(model, variables, src, tgt)
    # a source of padding only: every masked score is the same fill, so attention is uniform
    np.testing.assert_allclose(logits, reference(variables, src, tgt), rtol=0, atol=1e-4)
    np.testing.assert_allclose(logits[:1], forward(model, variables, src[:1], tgt[:1]),
                               atol=1e-5)


def test_causality():
    model, variables = built()
    src, tgt = tokens(4, (2, 7)), tokens(5, (2, 6))
    logits = forward(model, variables, src, tgt)
    changed = forward(model, variables, src, tgt.at[:, 3].set(5))
    np.testing.assert_allclose(changed[:, :3], logits[:, :3], atol=1e-6)
    assert not np.allclose(changed[:, 3:], logits[:, 3:])


@pytest.mark.slow
@pytest.mark.parametrize("options", [
    dict(),
    dict(pre_norm=False, positions="learned"),
    dict(share_embeddings=False, tie_output=False, tgt_vocab_size=23, positions="learned"),
])
def test_decode_step_matches_forward(options):
    model, variables = built(**options)
    src = tokens(6, (2, 7)).at[0, 4:].set(PAD)
    tgt = tokens(7, (2, 6)) % model.config.tgt_vocab_size
    expected = jax.nn.log_softmax(forward(model, variables, src, tgt), axis=-1)
    got, cache = decode_all(model, variables, src, tgt)
    assert got.dtype == jnp.float32
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert all(leaf.shape[0] == 2 for leaf in jax.tree_util.tree_leaves(cache))
    np.testing.assert_array_equal(cache["position"], [6, 6])
    assert cache["position"].dtype == jnp.int32


@pytest.mark.slow
def test_options_change_parameters():
    _, shared = built()
    _, separate = built(share_embeddings=False, tie_output=False, positions="learned")
    _, post = built(pre_norm=False, positions="learned")
    assert set(shared["params"]) >= {"src_embed", "encoder_norm", "decoder_norm"}
    assert {"tgt_embed", "output", "src_positions", "tgt_positions"} <= set(separate["params"])
    assert "decoder_norm" not in post["params"]


@pytest.mark.slow
def test_dropout_is_active_only_when_not_deterministic():
    model, variables = built(dropout=0.3, attention_dropout=0.2)
    src, tgt = tokens(8, (2, 7)), tokens(9, (2, 6))
    apply = jax.jit(model.apply, static_argnames="deterministic")
    a = apply(variables, src, tgt, deterministic=False, rngs={"dropout": jax.random.PRNGKey(1)})
    b = apply(variables, src, tgt, deterministic=False, rngs={"dropout": jax.random.PRNGKey(2)})
    assert not np.allclose(a, b)
    np.testing.assert_allclose(apply(variables, src, tgt), apply(variables, src, tgt))


POLICY_ATOL = {"float32": 1e-4, "bfloat16": 0.06, "float16": 0.01}


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16", "mixed_float16", "bfloat16"])
def test_policy_dtypes(policy):
    policy = Policy.parse(policy)
    model, variables = built(policy=policy)
    params = jax.tree_util.tree_leaves(variables["params"])
    assert all(p.dtype == policy.param_dtype for p in params)
    src, tgt = tokens(10, (2, 7)), tokens(11, (2, 6))
    logits = forward(model, variables, src, tgt)
    assert logits.dtype == jnp.float32
    # against float64 numpy on the same (policy-dtype) parameters: only the compute rounding
    # differs (about a third of each bound here; bfloat16 keeps 8 bits, float16 11)
    np.testing.assert_allclose(logits, reference(variables, src, tgt), rtol=0,
                               atol=POLICY_ATOL[np.dtype(policy.compute_dtype).name])
    # jitted: op-by-op (eager) execution of the whole model costs far more compile time
    memory = jax.jit(functools.partial(model.apply, method="encode"))(variables, src)
    assert memory["memory"].dtype == policy.output_dtype
    loss = lambda v: jnp.mean(jax.nn.logsumexp(model.apply(v, src, tgt), axis=-1))
    check_matmul_dtypes(dot_generals(jax.grad(loss), variables), policy)
    grads = jax.jit(jax.grad(loss))(variables)
    assert all(g.dtype == policy.param_dtype for g in jax.tree_util.tree_leaves(grads))
    cache = jax.jit(functools.partial(model.apply, method="init_cache"), static_argnums=3)(
        variables, memory, src, 4)
    assert cache["layers"][0]["self"]["key"].dtype == policy.compute_dtype
    log_probs, _ = jax.jit(functools.partial(model.apply, method="decode_step"))(
        variables, cache, tgt[:, 0])
    assert log_probs.dtype == jnp.float32
