"""Attention, masks, cache and mixed-precision einsum."""

from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import numpy_transformer
import pytest

from textkit.models import kernels
from textkit.models.attention import (
    MultiHeadAttention,
    causal_mask,
    dot_product_attention,
    padding_mask,
    position_mask,
)
from textkit.models.kernels import mixed_einsum
from textkit.models.layers import Dense, Dropout, dropout, sinusoidal_positions
from textkit.precision import Policy


def dot_generals(fn, *args, native=True):
    """All dot_general equations in the (nested) jaxpr of ``fn(*args)``, traced with native
    low-precision dots (as on an accelerator) unless ``native`` is False (the rounded float32
    way); ``native=None`` leaves ``kernels.native_low_precision_dots`` as it is."""
    found = []

    def visit(jaxpr):
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "dot_general":
                found.append(eqn)
            for value in eqn.params.values():
                for sub in value if isinstance(value, (tuple, list)) else (value,):
                    if isinstance(sub, jax.extend.core.ClosedJaxpr):
                        visit(sub.jaxpr)
                    elif isinstance(sub, jax.extend.core.Jaxpr):
                        visit(sub)

    if native is None:
        visit(jax.make_jaxpr(fn)(*args).jaxpr)
        return found
    with mock.patch.object(kernels, "native_low_precision_dots", lambda dtype: native):
        visit(jax.make_jaxpr(fn)(*args).jaxpr)
    return found


def check_matmul_dtypes(dots, policy):
    """Projection/logit matmuls (forward and backward) take compute-dtype operands; the
    attention score/value products take float32 ones (the 4-D "bqhd"-style einsums); every
    result is float32."""
    compute = np.dtype(policy.compute_dtype)
    projections = attention = 0
    for eqn in dots:
        dtypes = {a.aval.dtype for a in eqn.invars}
        assert eqn.outvars[0].aval.dtype == jnp.float32
        batched = bool(eqn.params["dimension_numbers"][1][0])
        if batched:
            assert dtypes == {np.dtype(np.float32)}
            attention += 1
        else:
            assert dtypes == {compute}, eqn
            projections += 1
    assert projections and attention


def reference_attention(q, k, v, mask):
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    scores = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
    scores = np.where(np.broadcast_to(mask, scores.shape), scores, -np.inf)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    return np.einsum("bhqk,bkhd->bqhd", probs, v)


def test_masks():
    tokens = jnp.array([[5, 6, 1, 1]])
    np.testing.assert_array_equal(padding_mask(tokens, 1)[0, 0, 0], [True, True, False, False])
    np.testing.assert_array_equal(causal_mask(3)[0, 0], np.tril(np.ones((3, 3), bool)))
    np.testing.assert_array_equal(position_mask(jnp.array([0, 2]), 4)[:, 0, 0],
                                  [[1, 0, 0, 0], [1, 1, 1, 0]])


def test_attention_matches_reference_with_padding_and_causal_mask():
    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=(2, 5, 3, 4)).astype(np.float32) for _ in range(3))
    tokens = jnp.array([[7, 7, 7, 1, 1], [7, 7, 7, 7, 7]])
    mask = padding_mask(tokens, 1) & causal_mask(5)
    # dot_product_attention is heads-major: [B, H, L, Dh] in and out.
    out = dot_product_attention(*(np.swapaxes(a, 1, 2) for a in (q, k, v)), mask)
    assert out.dtype == jnp.float32 and out.shape == (2, 3, 5, 4)
    np.testing.assert_allclose(np.swapaxes(out, 1, 2),
                               reference_attention(q, k, v, np.asarray(mask)), atol=1e-5)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.float16])
def test_fully_masked_row_attends_uniformly(dtype):
    rng = np.random.default_rng(1)
    q, k, v = (jnp.asarray(rng.normal(size=(2, 1, 3, 4)), dtype) for _ in range(3))  # [B,H,L,Dh]
    mask = jnp.asarray([[[[True, True, False]] * 3]], bool).repeat(2, 0).at[1].set(False)
    out = dot_product_attention(q, k, v, mask)
    assert out.dtype == jnp.float32
    # batch row 1 has no visible key: the mean of its values, the same for every query
    expected = np.broadcast_to(np.asarray(v[1], np.float32).mean(axis=1, keepdims=True),
                               (1, 3, 4))
    np.testing.assert_allclose(out[1], expected, rtol=1e-6, atol=1e-6)
    # batch row 0 is untouched by row 1 and equals the reference
    qs, ks, vs = (np.swapaxes(np.asarray(a[:1], np.float32), 1, 2) for a in (q, k, v))
    np.testing.assert_allclose(np.swapaxes(out[:1], 1, 2), reference_attention(
        qs, ks, vs, np.asarray(mask[:1])), atol=1e-5)


def test_multi_head_attention_layer_equals_numpy_projections():
    """The layer's q/k/v projections, per-head attention and output projection, against the
    numpy oracle reading the same parameters."""
    attention = MultiHeadAttention(num_heads=2, d_model=8)
    x = jax.random.normal(jax.random.PRNGKey(2), (3, 5, 8))
    mask = padding_mask(jnp.array([[5] * 5, [5, 5, 5, 1, 1], [1] * 5]), 1) & causal_mask(5)
    variables = attention.init(jax.random.PRNGKey(3), x, mask)
    expected = numpy_transformer.self_attention(
        np.asarray(x, np.float64), numpy_transformer.as64(variables["params"]), np.asarray(mask))
    np.testing.assert_allclose(attention.apply(variables, x, mask), expected, atol=1e-5)


def test_sinusoidal_positions():
    table = sinusoidal_positions(10, 8)
    assert table.shape == (10, 8) and table.dtype == np.float32
    np.testing.assert_allclose(table[0], [0, 0, 0, 0, 1, 1, 1, 1])
    with pytest.raises(ValueError, match="even"):
        sinusoidal_positions(4, 3)


@pytest.mark.parametrize("compute", [jnp.bfloat16, jnp.float16])
def test_mixed_einsum_backward_runs_in_compute_dtype(compute):
    x = jax.random.normal(jax.random.PRNGKey(0), (6, 8))
    w = jax.random.normal(jax.random.PRNGKey(1), (8, 4))

    def loss(x, w):
        return jnp.sum(jnp.tanh(mixed_einsum("nd,df->nf", x, w, compute)))

    grads = jax.grad(loss, argnums=(0, 1))(x, w)
    assert [g.dtype for g in grads] == [jnp.float32, jnp.float32]
    exact = jax.grad(lambda x, w: jnp.sum(jnp.tanh(x @ w)), argnums=(0, 1))(x, w)
    for got, want in zip(grads, exact):
        np.testing.assert_allclose(got, want, rtol=0.05, atol=0.05)
    dots = dot_generals(jax.grad(loss, argnums=(0, 1)), x, w)
    assert len(dots) == 3  # forward + two backward products
    for eqn in dots:
        assert [a.aval.dtype for a in eqn.invars] == [compute, compute]
        assert eqn.outvars[0].aval.dtype == jnp.float32


@pytest.mark.parametrize("compute", [jnp.bfloat16, jnp.float16])
def test_emulated_low_precision_dots_multiply_rounded_operands_in_float32(compute):
    """XLA:CPU's way: the three products of forward + backward take float32 copies of
    compute-dtype operands, so the forward equals the exact product of the rounded operands."""
    x = jax.random.normal(jax.random.PRNGKey(0), (6, 64))
    w = jax.random.normal(jax.random.PRNGKey(1), (64, 5))
    loss = lambda x, w: jnp.sum(jnp.tanh(mixed_einsum("nd,df->nf", x, w, compute)))
    dots = dot_generals(jax.grad(loss, argnums=(0, 1)), x, w, native=False)
    assert len(dots) == 3
    assert all([a.aval.dtype for a in eqn.invars] == [jnp.float32] * 2 for eqn in dots)
    with mock.patch.object(kernels, "native_low_precision_dots", lambda dtype: False):
        got = np.asarray(mixed_einsum("nd,df->nf", x, w, compute))
    rounded = [np.asarray(a.astype(compute), np.float64) for a in (x, w)]
    np.testing.assert_allclose(got, rounded[0] @ rounded[1], rtol=1e-5, atol=1e-5)
    # ...which is not the float32 product: the rounding to the compute dtype did happen.
    assert np.abs(got - np.asarray(x, np.float64) @ np.asarray(w, np.float64)).max() > 1e-3


def test_dense_param_dtype_and_fused_init():
    dense = Dense((3, 2, 4), policy=Policy.parse("bfloat16"), batch_axes=(0,))
    params = dense.init(jax.random.PRNGKey(0), jnp.ones((1, 16)))["params"]
    assert params["kernel"].shape == (16, 3, 2, 4) and params["kernel"].dtype == jnp.bfloat16
    # Glorot per projection: fan_in 16, fan_out 8 -> limit sqrt(6 / 24) = 0.5.
    assert float(jnp.max(jnp.abs(params["kernel"].astype(jnp.float32)))) <= 0.5


def test_self_attention_cache_matches_full_causal():
    attention = MultiHeadAttention(num_heads=2, d_model=8)
    x = jax.random.normal(jax.random.PRNGKey(0), (3, 5, 8))
    variables = attention.init(jax.random.PRNGKey(1), x, causal_mask(5))
    full = attention.apply(variables, x, causal_mask(5))
    cache = attention.apply(variables, 3, 6, method="init_cache")
    assert all(leaf.shape[0] == 3 for leaf in jax.tree_util.tree_leaves(cache))
    step = jax.jit(lambda v, x, cache, pos: attention.apply(v, x, cache=cache, positions=pos))
    steps = []
    for t in range(5):
        out, cache = step(variables, x[:, t:t + 1], cache, jnp.full((3,), t, jnp.int32))
        steps.append(out[:, 0])
    np.testing.assert_allclose(jnp.stack(steps, 1), full, atol=1e-5)


def test_bad_head_count_is_reported():
    attention = MultiHeadAttention(num_heads=3, d_model=8)
    with pytest.raises(ValueError, match="not divisible"):
        attention.init(jax.random.PRNGKey(0), jnp.ones((1, 2, 8)))


def test_attention_dropout_needs_rng_and_changes_output():
    attention = MultiHeadAttention(num_heads=2, d_model=8, dropout_rate=0.5)
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 4, 8))
    variables = jax.jit(attention.init)(jax.random.PRNGKey(1), x)
    apply = jax.jit(attention.apply, static_argnames="deterministic")
    a = apply(variables, x, deterministic=False, rngs={"dropout": jax.random.PRNGKey(2)})
    b = apply(variables, x)
    assert not np.allclose(a, b)


@pytest.mark.slow
@pytest.mark.parametrize("compute", [jnp.bfloat16, jnp.float16])
def test_low_precision_attention_layer_gradients_run(compute):
    # Every projection and its transposed backward products run on XLA:CPU and match float32.
    attention = MultiHeadAttention(num_heads=2, d_model=8, policy=Policy(jnp.float32, compute))
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 5, 8))
    variables = attention.init(jax.random.PRNGKey(1), x, causal_mask(5))

    def loss(v):
        return jnp.sum(attention.apply(v, x, causal_mask(5)) ** 2)

    grads = jax.jit(jax.grad(loss))(variables)
    exact = jax.grad(lambda v: jnp.sum(MultiHeadAttention(num_heads=2, d_model=8).apply(
        v, x, causal_mask(5)) ** 2))(variables)
    for got, want in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(exact)):
        assert got.dtype == jnp.float32
        np.testing.assert_allclose(got, want, rtol=0.1, atol=0.1)


@pytest.mark.parametrize("shape", [(64, 125), (7,)])
def test_dropout_rate_scale_and_reproducibility(shape):
    x = jnp.ones(shape, jnp.float32)
    out = np.asarray(dropout(x, 0.1, jax.random.PRNGKey(3)))
    kept = out != 0
    np.testing.assert_allclose(out[kept], 65536 / (65536 - 6554), rtol=1e-6)
    np.testing.assert_array_equal(out, dropout(x, 0.1, jax.random.PRNGKey(3)))
    if x.size > 1000:  # 8,000 draws: the dropped share is within 5 sigma of 0.1
        assert abs(1.0 - kept.mean() - 0.1) < 5 * np.sqrt(0.09 / x.size)
        assert not np.array_equal(out, dropout(x, 0.1, jax.random.PRNGKey(4)))
    with pytest.raises(ValueError, match="rate"):
        dropout(x, 1.0, jax.random.PRNGKey(0))


def test_dropout_module_deterministic_is_identity_and_keeps_dtype():
    x = jnp.full((4, 300), 2.0, jnp.bfloat16)
    module = Dropout(0.5)
    assert module.apply({}, x, deterministic=True) is x
    out = module.apply({}, x, deterministic=False, rngs={"dropout": jax.random.PRNGKey(0)})
    assert out.dtype == jnp.bfloat16
    assert set(np.unique(np.asarray(out, np.float32))) == {0.0, 4.0}


def _mixed_attention_output(mask, fused: bool, monkeypatch):
    """A bf16 self-attention layer's output on fixed inputs, the fused path forced (on CPU it
    runs ``jax.nn.dot_product_attention``'s XLA implementation) or the general one."""
    from textkit.models import attention

    monkeypatch.setattr(attention, "FUSED_BACKENDS", ("cpu",) if fused else ())
    layer = MultiHeadAttention(num_heads=4, d_model=32, policy=Policy.parse("mixed_bfloat16"))
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 6, 32))
    params = layer.init(jax.random.PRNGKey(1), x, mask)
    calls = []
    real = jax.nn.dot_product_attention
    monkeypatch.setattr(jax.nn, "dot_product_attention",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    out = layer.apply(params, x, mask)
    assert bool(calls) == fused
    return np.asarray(out)


@pytest.mark.parametrize("kind", ["padding", "causal", "padding_and_causal"])
def test_fused_attention_equals_the_general_path(kind, monkeypatch):
    tokens = jnp.asarray([[5, 6, 7, 8, 0, 0], [5, 6, 7, 8, 9, 10]])
    pad, causal = padding_mask(tokens, 0), causal_mask(6)
    mask = {"padding": pad, "causal": causal, "padding_and_causal": pad & causal}[kind]
    general = _mixed_attention_output(mask, False, monkeypatch)
    fused = _mixed_attention_output(mask, True, monkeypatch)
    np.testing.assert_allclose(fused, general, atol=3e-2, rtol=3e-2)


def test_fused_attention_rule():
    """Only 16-bit keys on a fused backend, several queries, no bias, no dropout, heads-major
    keys; XLA:CPU (the test machine) keeps the general path."""
    from textkit.models.attention import fused_attention_applies

    q, k = jnp.zeros((1, 2, 4, 8)), jnp.zeros((1, 2, 4, 8), jnp.bfloat16)
    rule = dict(bias=None, depth_major_key=False, dropping=False)
    assert fused_attention_applies(q, k, **rule) is (jax.default_backend() == "gpu")
    with mock.patch("textkit.models.attention.FUSED_BACKENDS", (jax.default_backend(),)):
        assert fused_attention_applies(q, k, **rule)
        assert not fused_attention_applies(q, k.astype(jnp.float32), **rule)
        assert not fused_attention_applies(q[:, :, :1], k, **rule)
        assert not fused_attention_applies(q, k, **{**rule, "dropping": True})
        assert not fused_attention_applies(q, k, **{**rule, "depth_major_key": True})
        assert not fused_attention_applies(q, k, **{**rule, "bias": jnp.zeros((1, 2, 4, 4))})
