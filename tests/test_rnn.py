"""LSTM building blocks: cell math, padding masks, reversal of padded rows, weight-drop, dtypes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from textkit.models.rnn import LSTM, BidirectionalLSTM, reverse_padded, zero_state
from textkit.precision import Policy


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _numpy_lstm(params, x, h, c):
    """Reference LSTM, one step at a time, gate order (i, f, g, o). x [B,T,D]."""
    outputs = []
    for t in range(x.shape[1]):
        gates = x[:, t] @ params["w_ih"] + h @ params["w_hh"] + params["bias"]
        i, f, g, o = np.split(gates, 4, axis=-1)
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        h = _sigmoid(o) * np.tanh(c)
        outputs.append(h)
    return np.stack(outputs, 1), h, c


def _init_lstm(hidden, x, **kwargs):
    layer = LSTM(hidden, **kwargs)
    return layer, jax.jit(layer.init)(jax.random.key(0), x)["params"]


def test_reverse_padded_reverses_only_real_steps_and_is_an_involution():
    x = jnp.arange(10).reshape(2, 5)[..., None]
    lengths = jnp.array([3, 5])
    reversed_x = reverse_padded(x, lengths)
    np.testing.assert_array_equal(reversed_x[..., 0], [[2, 1, 0, 3, 4], [9, 8, 7, 6, 5]])
    np.testing.assert_array_equal(reverse_padded(reversed_x, lengths), x)


def test_lstm_matches_numpy_reference_from_a_given_carry():
    rng = np.random.RandomState(0)
    x = rng.randn(2, 6, 5).astype(np.float32)
    layer, params = _init_lstm(7, x)
    h0 = rng.randn(2, 7).astype(np.float32)
    c0 = rng.randn(2, 7).astype(np.float32)
    out, (h, c) = jax.jit(layer.apply)({"params": params}, x, (h0, c0))
    ref_out, ref_h, ref_c = _numpy_lstm(jax.tree.map(np.asarray, params), x, h0, c0)
    np.testing.assert_allclose(out, ref_out, atol=1e-5)
    np.testing.assert_allclose(h, ref_h, atol=1e-5)
    np.testing.assert_allclose(c, ref_c, atol=1e-5)


def test_forget_gate_bias_starts_at_one():
    _, params = _init_lstm(4, jnp.zeros((1, 2, 3)))
    np.testing.assert_array_equal(params["bias"], [0] * 4 + [1] * 4 + [0] * 8)


def test_mask_freezes_carry_and_zeroes_padded_outputs():
    rng = np.random.RandomState(1)
    x = rng.randn(1, 8, 4).astype(np.float32)
    layer, params = _init_lstm(6, x)
    mask = jnp.array([[True] * 5 + [False] * 3])
    apply = jax.jit(layer.apply)
    out, carry = apply({"params": params}, x, mask=mask)
    short_out, short_carry = apply({"params": params}, x[:, :5])
    np.testing.assert_allclose(out[:, :5], short_out, atol=1e-6)
    np.testing.assert_array_equal(out[:, 5:], 0.0)
    for a, b in zip(carry, short_carry):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_bidirectional_outputs_ignore_padding_length():
    rng = np.random.RandomState(2)
    real = rng.randn(1, 4, 3).astype(np.float32)
    module = BidirectionalLSTM(5)
    padded = np.concatenate([real, rng.randn(1, 6, 3).astype(np.float32)], axis=1)  # junk pad
    params = jax.jit(module.init)(jax.random.key(0), padded, jnp.ones((1, 10), bool))["params"]
    apply = jax.jit(module.apply)
    out_short = apply({"params": params}, real, jnp.ones((1, 4), bool))
    out_long = apply({"params": params}, padded, jnp.arange(10)[None] < 4)
    assert out_long.shape == (1, 10, 10)
    np.testing.assert_allclose(out_long[:, :4], out_short, atol=1e-6)
    np.testing.assert_array_equal(out_long[:, 4:], 0.0)


def test_bidirectional_backward_half_reads_from_the_last_real_token():
    rng = np.random.RandomState(3)
    x = rng.randn(1, 4, 3).astype(np.float32)
    module = BidirectionalLSTM(5)
    params = jax.jit(module.init)(jax.random.key(0), x, jnp.ones((1, 4), bool))["params"]
    out = jax.jit(module.apply)({"params": params}, x, jnp.ones((1, 4), bool))
    backward = jax.tree.map(np.asarray, params["backward"])
    ref, _, _ = _numpy_lstm(backward, x[:, ::-1], np.zeros((1, 5)), np.zeros((1, 5)))
    np.testing.assert_allclose(out[:, :, 5:], ref[:, ::-1], atol=1e-5)


def test_weight_drop_only_when_not_deterministic():
    x = jnp.asarray(np.random.RandomState(4).randn(2, 5, 3), jnp.float32)
    layer, params = _init_lstm(8, x, weight_drop=0.5)

    @jax.jit
    def run(rng):
        rngs = {"dropout": rng}
        return (LSTM(8).apply({"params": params}, x)[0],
                layer.apply({"params": params}, x, deterministic=True, rngs=rngs)[0],
                layer.apply({"params": params}, x, deterministic=False, rngs=rngs)[0])

    plain, deterministic, dropped = run(jax.random.key(1))
    np.testing.assert_array_equal(deterministic, plain)
    assert np.abs(np.asarray(dropped) - np.asarray(plain)).max() > 1e-3


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16", "mixed_float16"])
def test_dtypes_follow_policy_forward_and_backward(policy):
    policy = Policy.parse(policy)
    x = jnp.asarray(np.random.RandomState(5).randn(2, 3, 4), jnp.float32)
    layer, params = _init_lstm(6, x, policy=policy)
    assert all(p.dtype == policy.param_dtype for p in jax.tree.leaves(params))

    def loss(p):
        out, (h, c) = layer.apply({"params": p}, x, mask=jnp.ones((2, 3), bool))
        return out.astype(jnp.float32).sum() + h.sum() + c.sum(), (out, h, c)

    grads, (out, h, c) = jax.jit(jax.grad(loss, has_aux=True))(params)
    assert out.dtype == policy.compute_dtype
    assert h.dtype == c.dtype == zero_state(2, 6)[0].dtype == jnp.float32
    for name, grad in grads.items():
        assert grad.dtype == policy.param_dtype, name
        assert np.isfinite(np.asarray(grad)).all() and np.abs(np.asarray(grad)).max() > 0, name
