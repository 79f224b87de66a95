"""Transformer encoder-decoder: shapes, masking, causality, incremental decoding, precision."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
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
    print(f"transformer_base (32k shared vocab) parameters: {count:,}")
    assert abs(count - 60.5e6) / 60.5e6 < 0.01


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


def test_dummy_all_padding_row_is_finite():
    model, variables = built()
    src = jnp.full((2, 7), PAD, jnp.int32)
    assert bool(jnp.all(jnp.isfinite(forward(model, variables, src, tokens(3, (2, 6))))))


def test_causality():
    model, variables = built()
    src, tgt = tokens(4, (2, 7)), tokens(5, (2, 6))
    logits = forward(model, variables, src, tgt)
    changed = forward(model, variables, src, tgt.at[:, 3].set(5))
    np.testing.assert_allclose(changed[:, :3], logits[:, :3], atol=1e-6)
    assert not np.allclose(changed[:, 3:], logits[:, 3:])


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


def test_options_change_parameters():
    _, shared = built()
    _, separate = built(share_embeddings=False, tie_output=False, positions="learned")
    _, post = built(pre_norm=False, positions="learned")
    assert set(shared["params"]) >= {"src_embed", "encoder_norm", "decoder_norm"}
    assert {"tgt_embed", "output", "src_positions", "tgt_positions"} <= set(separate["params"])
    assert "decoder_norm" not in post["params"]


def test_dropout_is_active_only_when_not_deterministic():
    model, variables = built(dropout=0.3, attention_dropout=0.2)
    src, tgt = tokens(8, (2, 7)), tokens(9, (2, 6))
    apply = jax.jit(model.apply, static_argnames="deterministic")
    a = apply(variables, src, tgt, deterministic=False, rngs={"dropout": jax.random.PRNGKey(1)})
    b = apply(variables, src, tgt, deterministic=False, rngs={"dropout": jax.random.PRNGKey(2)})
    assert not np.allclose(a, b)
    np.testing.assert_allclose(apply(variables, src, tgt), apply(variables, src, tgt))


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16", "mixed_float16", "bfloat16"])
def test_policy_dtypes(policy):
    policy = Policy.parse(policy)
    model, variables = built(policy=policy)
    params = jax.tree_util.tree_leaves(variables["params"])
    assert all(p.dtype == policy.param_dtype for p in params)
    src, tgt = tokens(10, (2, 7)), tokens(11, (2, 6))
    logits = forward(model, variables, src, tgt)
    assert logits.dtype == jnp.float32 and bool(jnp.all(jnp.isfinite(logits)))
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
