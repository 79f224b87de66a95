"""Dynamic and static loss scaling as optax transformations."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from textkit.precision import (
    DynamicLossScaleState,
    Policy,
    dynamic_loss_scale,
    loss_scale_of,
    static_loss_scale,
)
from textkit.training import CheckpointManager, create_train_state, cross_entropy, make_train_step


def _params():
    return {"w": jnp.arange(6, dtype=jnp.float32).reshape(2, 3) / 10, "b": jnp.ones(3)}


def _grads(value=1.0):
    return jax.tree_util.tree_map(lambda p: jnp.full_like(p, value), _params())


@jax.jit
def _apply(grads, state, params):
    opt = _OPT
    updates, state = opt.update(grads, state, params)
    return optax.apply_updates(params, updates), state


_OPT = dynamic_loss_scale(
    optax.chain(optax.clip_by_global_norm(10.0), optax.adam(1e-2)),
    initial_scale=1024.0, growth_interval=3)


def test_injected_overflow_skips_update_and_halves_scale():
    params = _params()
    state = _OPT.init(params)
    params, state = _apply(_grads(1024.0), state, params)    # one good step first
    assert float(state.good_steps) == 1.0
    bad = _grads(1024.0)
    bad["w"] = bad["w"].at[1, 2].set(jnp.inf)
    bad["b"] = bad["b"].at[0].set(jnp.nan)
    new_params, new_state = _apply(bad, state, params)
    for old, new in zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(new_params)):
        np.testing.assert_array_equal(old, new)
    for old, new in zip(jax.tree_util.tree_leaves(state.inner_state),
                        jax.tree_util.tree_leaves(new_state.inner_state)):
        np.testing.assert_array_equal(old, new)
    assert float(new_state.scale) == 512.0
    assert float(new_state.good_steps) == 0.0


def test_scale_backs_off_to_min_scale_only():
    opt = dynamic_loss_scale(optax.sgd(0.1), initial_scale=8.0, min_scale=2.0)
    params = _params()
    state = opt.init(params)
    for expected in (4.0, 2.0, 2.0):
        _, state = opt.update(_grads(jnp.nan), state, params)
        assert float(state.scale) == expected


def test_scale_grows_after_growth_interval_finite_steps():
    params = _params()
    state = _OPT.init(params)
    scales = []
    for _ in range(7):
        params, state = _apply(_grads(0.5), state, params)
        scales.append(float(state.scale))
    assert scales == [1024.0, 1024.0, 2048.0, 2048.0, 2048.0, 4096.0, 4096.0]
    assert state.scale.dtype == jnp.float32 and state.good_steps.dtype == jnp.float32


def test_growth_never_reaches_inf():
    opt = dynamic_loss_scale(optax.sgd(0.1), initial_scale=2.0**127, growth_interval=1)
    params = _params()
    state = opt.init(params)
    for _ in range(3):
        _, state = opt.update(_grads(1.0), state, params)
        assert np.isfinite(float(state.scale))
    assert float(state.scale) == float(jnp.finfo(jnp.float32).max)


def test_updates_are_unscaled_before_the_inner_optimizer():
    params = _params()
    scaled = dynamic_loss_scale(optax.sgd(0.1), initial_scale=256.0)
    updates, _ = scaled.update(_grads(256.0 * 3.0), scaled.init(params), params)
    plain, _ = optax.sgd(0.1).update(_grads(3.0), optax.sgd(0.1).init(params), params)
    for a, b in zip(jax.tree_util.tree_leaves(updates), jax.tree_util.tree_leaves(plain)):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_static_loss_scale_unscales_and_keeps_scale():
    params = _params()
    opt = static_loss_scale(optax.sgd(1.0), 128.0)
    state = opt.init(params)
    updates, state = opt.update(_grads(128.0 * 2.0), state, params)
    np.testing.assert_allclose(updates["w"], -2.0 * np.ones((2, 3)))
    assert float(loss_scale_of(state)) == 128.0
    with pytest.raises(ValueError, match="scale must be > 0"):
        static_loss_scale(optax.sgd(1.0), 0.0)


def test_loss_scale_of_finds_scale_in_nested_state():
    params = _params()
    assert float(loss_scale_of(optax.adam(1e-3).init(params))) == 1.0
    chained = optax.chain(optax.add_decayed_weights(1e-4),
                          dynamic_loss_scale(optax.adam(1e-3), initial_scale=64.0))
    assert float(loss_scale_of(chained.init(params))) == 64.0
    twice = optax.chain(static_loss_scale(optax.sgd(1.0), 2.0),
                        static_loss_scale(optax.sgd(1.0), 4.0))
    with pytest.raises(ValueError, match="2 loss-scale states"):
        loss_scale_of(twice.init(params))


def test_invalid_arguments_are_rejected():
    with pytest.raises(ValueError, match="growth_interval"):
        dynamic_loss_scale(optax.sgd(1.0), growth_interval=0)
    with pytest.raises(ValueError, match="backoff_factor"):
        dynamic_loss_scale(optax.sgd(1.0), backoff_factor=1.5)
    with pytest.raises(ValueError, match="min_scale"):
        dynamic_loss_scale(optax.sgd(1.0), initial_scale=1.0, min_scale=2.0)


def test_state_round_trips_through_jit_and_checkpoint(tmp_path):
    params = _params()
    state = _OPT.init(params)
    for _ in range(4):
        params, state = _apply(_grads(2.0), state, params)
    assert (float(state.scale), float(state.good_steps)) == (2048.0, 1.0)
    with CheckpointManager(tmp_path / "ckpt") as manager:
        manager.save(4, {"params": params, "opt_state": state})
        target = {"params": _params(), "opt_state": _OPT.init(_params())}
        restored, _ = manager.restore(4, target)
    assert isinstance(restored["opt_state"], DynamicLossScaleState)
    assert restored["opt_state"].scale.dtype == jnp.float32
    assert float(loss_scale_of(restored["opt_state"])) == 2048.0
    # Continuing from the restored state equals continuing from the live one.
    live = _apply(_grads(2.0), state, params)
    resumed = _apply(_grads(2.0), restored["opt_state"], restored["params"])
    for a, b in zip(jax.tree_util.tree_leaves(live), jax.tree_util.tree_leaves(resumed)):
        np.testing.assert_array_equal(a, b)


class _TinyLM(nn.Module):
    """Embedding + 2-layer MLP next-token model; params float32, matmuls in compute dtype."""

    vocab: int
    policy: Policy

    @nn.compact
    def __call__(self, tokens):                                   # int32 [B, T]
        dtype = self.policy.compute_dtype
        x = nn.Embed(self.vocab, 32, dtype=dtype)(tokens)         # [B, T, 32]
        x = nn.relu(nn.Dense(64, dtype=dtype)(x))                 # [B, T, 64]
        logits = nn.Dense(self.vocab, dtype=dtype)(x)             # [B, T, V]
        return logits.astype(jnp.float32)


def _train(policy: Policy, optimizer, tokens, targets, steps):
    model = _TinyLM(vocab=32, policy=policy)
    params = model.init(jax.random.key(0), tokens[:1])["params"]

    def loss_fn(params, batch, rng):
        logits = model.apply({"params": params}, batch["inputs"])
        assert logits.dtype == jnp.float32
        loss_sum, weight_sum = cross_entropy(logits, batch["targets"], batch["mask"])
        return loss_sum, (weight_sum, None)

    state = create_train_state(params, optimizer, jax.random.key(1))
    step = make_train_step(loss_fn, optimizer)
    rng = np.random.default_rng(0)
    scales, losses = [], []
    for _ in range(steps):
        rows = rng.integers(0, len(tokens), 16)
        batch = {"inputs": tokens[rows], "targets": targets[rows],
                 "mask": np.ones(targets[rows].shape, np.float32)}
        state, metrics = step(state, batch)
        scales.append(float(metrics["loss_scale"]))
        losses.append(float(metrics["loss"]))
    return state, float(np.mean(losses[-20:])), scales


STEPS = 200


def test_mixed_float16_with_dynamic_scaling_matches_float32():
    # Data: next token is a fixed random function of the current token, 10% noise.
    rng = np.random.default_rng(1)
    table = rng.integers(0, 32, 32)
    tokens = rng.integers(0, 32, (256, 16)).astype(np.int32)
    targets = table[tokens].astype(np.int32)
    noise = rng.random(targets.shape) < 0.1
    targets[noise] = rng.integers(0, 32, int(noise.sum()))

    adam = optax.chain(optax.clip_by_global_norm(5.0), optax.adam(1e-2))
    _, loss32, _ = _train(Policy.parse("float32"), adam, tokens, targets, STEPS)
    # A scale of 2**24 overflows float16 gradients, so the run must back off, then regrow.
    scaled = dynamic_loss_scale(adam, initial_scale=2.0**24, growth_interval=50)
    state16, loss16, scales = _train(Policy.parse("mixed_float16"), scaled, tokens, targets, STEPS)

    assert all(leaf.dtype == jnp.float32 for leaf in jax.tree_util.tree_leaves(state16.params))
    assert min(scales) < 2.0**24, "no overflow was seen; the test does not exercise backoff"
    assert any(b > a for a, b in zip(scales, scales[1:])), "the scale never grew"
    print(f"float32 {loss32:.4f}, mixed_float16 {loss16:.4f}, scales {sorted(set(scales))}")
    assert loss32 < 1.5  # it learned (uniform guessing is ln 32 = 3.47)
    assert abs(loss16 - loss32) <= 0.05 * loss32, (loss16, loss32)


def test_skip_is_a_select_not_a_conditional():
    """The step is one straight-line program: no ``cond`` for XLA:GPU to sync the host on."""
    params = _params()
    jaxpr = jax.make_jaxpr(lambda g, s: _OPT.update(g, s, params))(_grads(), _OPT.init(params))
    assert "cond" not in {eqn.primitive.name for eqn in jaxpr.jaxpr.eqns}
