"""Schedules, the train-step factory and the eval step."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from textkit.precision import dynamic_loss_scale
from textkit.training import (
    TrainState,
    create_train_state,
    cross_entropy,
    inverse_sqrt_schedule,
    make_eval_step,
    make_train_step,
)


def test_inverse_sqrt_schedule_values():
    schedule = inverse_sqrt_schedule(peak_lr=1e-3, warmup_steps=4000, init_lr=1e-7)
    np.testing.assert_allclose(float(schedule(0)), 1e-7, rtol=1e-5)
    np.testing.assert_allclose(float(schedule(2000)), (1e-7 + 1e-3) / 2, rtol=1e-5)
    np.testing.assert_allclose(float(schedule(4000)), 1e-3, rtol=1e-6)
    for step in (4001, 16000, 100000):
        np.testing.assert_allclose(float(schedule(step)), 1e-3 * math.sqrt(4000 / step),
                                   rtol=1e-5)
    assert float(inverse_sqrt_schedule(2.0, 10)(0)) == 0.0
    with pytest.raises(ValueError, match="warmup_steps"):
        inverse_sqrt_schedule(1.0, 0)


def test_inverse_sqrt_schedule_drives_an_optax_optimizer():
    optimizer = optax.adam(inverse_sqrt_schedule(1.0, 2))
    params = {"w": jnp.zeros(())}
    state = optimizer.init(params)
    for _ in range(3):
        updates, state = optimizer.update({"w": jnp.ones(())}, state, params)
    # Adam's first steps move by ~lr: step index 2 has lr 1 (the peak).
    np.testing.assert_allclose(float(updates["w"]), -1.0, rtol=1e-3)


def _linear_loss_fn(params, batch, rng):
    """Softmax regression on one-hot inputs; padding rows have weight 0."""
    logits = batch["inputs"] @ params["w"] + params["b"]           # [N, V]
    loss_sum, weight_sum = cross_entropy(logits, batch["targets"], batch["mask"])
    return loss_sum, (weight_sum, {"max_logit": logits.max()})


def _batch(seed, rows=8, vocab=5):
    rng = np.random.default_rng(seed)
    inputs = np.eye(vocab, dtype=np.float32)[rng.integers(0, vocab, rows)]
    targets = (inputs.argmax(-1) + 1) % vocab
    mask = np.ones(rows, np.float32)
    mask[-2:] = 0.0
    return {"inputs": inputs, "targets": targets.astype(np.int32), "mask": mask}


def _params(vocab=5):
    return {"w": jnp.zeros((vocab, vocab)), "b": jnp.zeros(vocab)}


def test_train_step_is_sgd_on_the_per_token_mean():
    batch = _batch(0)
    step = make_train_step(_linear_loss_fn, optax.sgd(0.5))
    state = create_train_state(_params(), optax.sgd(0.5), jax.random.key(0))
    new_state, metrics = step(state, batch)

    def mean_loss(params):
        loss_sum, (weight_sum, _) = _linear_loss_fn(params, batch, None)
        return loss_sum / weight_sum

    grads = jax.grad(mean_loss)(_params())
    np.testing.assert_allclose(new_state.params["w"], -0.5 * grads["w"], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(float(metrics["loss"]), math.log(5), rtol=1e-6)
    assert float(metrics["tokens"]) == 6.0
    np.testing.assert_allclose(float(metrics["grad_norm"]), float(optax.tree.norm(grads)),
                               rtol=1e-5)
    assert float(metrics["loss_scale"]) == 1.0
    assert "max_logit" in metrics
    assert int(new_state.step) == 1


def test_train_step_lowers_ahead_of_time_to_the_same_program():
    step = make_train_step(_linear_loss_fn, optax.sgd(0.5), donate=False)
    state = create_train_state(_params(), optax.sgd(0.5), jax.random.key(0))
    compiled = step.lower(state, _batch(0)).compile()
    ahead, ahead_metrics = compiled(state, _batch(0))
    called, called_metrics = step(state, _batch(0))
    np.testing.assert_array_equal(ahead.params["w"], called.params["w"])
    assert float(ahead_metrics["loss"]) == float(called_metrics["loss"])


def test_precompile_traces_each_shape_once_and_changes_nothing():
    optimizer = optax.adam(0.1)
    batches = [_batch(0, rows=8), _batch(1, rows=4), _batch(2, rows=6)]
    results = []
    for precompile in (False, True):
        step = make_train_step(_linear_loss_fn, optimizer, donate=False)
        state = create_train_state(_params(), optimizer, jax.random.key(0))
        if precompile:
            step.precompile(state, batches, workers=2)
            assert step.num_traces == 3            # one gradient program per batch shape
        for batch in batches + batches:
            state, metrics = step(state, batch)
        assert step.num_traces == 3                # no shape traced again
        results.append((state, metrics))
    (plain, plain_metrics), (ahead, ahead_metrics) = results
    assert int(ahead.step) == int(plain.step) == 6  # precompiling took no step
    np.testing.assert_array_equal(ahead.params["w"], plain.params["w"])
    assert float(ahead_metrics["loss"]) == float(plain_metrics["loss"])


def test_loss_scaling_is_transparent_to_the_update():
    plain = optax.adam(0.1)
    scaled = dynamic_loss_scale(plain, initial_scale=2.0**12)
    results = []
    for optimizer in (plain, scaled):
        state = create_train_state(_params(), optimizer, jax.random.key(0))
        step = make_train_step(_linear_loss_fn, optimizer)
        for seed in range(3):
            state, metrics = step(state, _batch(seed))
        results.append((state.params, metrics))
    (p_plain, m_plain), (p_scaled, m_scaled) = results
    for a, b in zip(jax.tree_util.tree_leaves(p_plain), jax.tree_util.tree_leaves(p_scaled)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert float(m_scaled["loss_scale"]) == 2.0**12
    np.testing.assert_allclose(float(m_scaled["grad_norm"]), float(m_plain["grad_norm"]),
                               rtol=1e-5)


def test_training_reduces_loss_and_donates_the_state():
    traces = []

    def counting_loss_fn(params, batch, rng):
        traces.append(1)
        return _linear_loss_fn(params, batch, rng)

    optimizer = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(0.1))
    state = create_train_state(_params(), optimizer, jax.random.key(0))
    step = make_train_step(counting_loss_fn, optimizer)
    old_w = state.params["w"]
    state, first = step(state, _batch(0))
    assert old_w.is_deleted()                       # donated
    for seed in range(1, 40):
        state, metrics = step(state, _batch(seed))
    assert float(metrics["loss"]) < 0.2 * float(first["loss"])
    assert len(traces) == 1                         # one shape, one compile


def test_each_step_gets_a_fresh_rng_and_eval_gets_none():
    seen = []

    def loss_fn(params, batch, rng):
        seen.append(rng)
        noise = jax.random.uniform(rng, ()) if rng is not None else jnp.zeros(())
        loss_sum = (params["x"] ** 2).sum() + 0.0 * noise
        return loss_sum, (jnp.asarray(1.0), {"noise": noise})

    optimizer = optax.sgd(0.1)
    state = create_train_state({"x": jnp.ones(2)}, optimizer, jax.random.PRNGKey(3))
    assert isinstance(state, TrainState) and state.rng.dtype == jnp.uint32
    step = make_train_step(loss_fn, optimizer, donate=False)
    state, m1 = step(state, {})
    state, m2 = step(state, {})
    assert float(m1["noise"]) != float(m2["noise"])
    # Same state, same step -> same key (resumable).
    state0 = create_train_state({"x": jnp.ones(2)}, optimizer, jax.random.PRNGKey(3))
    _, again = step(state0, {})
    assert float(again["noise"]) == float(m1["noise"])

    evaluate = make_eval_step(loss_fn)
    metrics = evaluate(state.params, {})
    assert seen[-1] is None
    assert set(metrics) == {"loss_sum", "tokens", "noise"}
    np.testing.assert_allclose(float(metrics["loss_sum"]), float((state.params["x"] ** 2).sum()))


def test_eval_step_returns_sums_for_accumulation():
    evaluate = make_eval_step(_linear_loss_fn)
    totals = [evaluate(_params(), _batch(seed)) for seed in range(3)]
    assert sum(float(m["tokens"]) for m in totals) == 18.0
    np.testing.assert_allclose(sum(float(m["loss_sum"]) for m in totals), 18 * math.log(5),
                               rtol=1e-5)


def test_aux_must_be_a_dict_without_reserved_names():
    def clashing(params, batch, rng):
        return params["x"].sum(), (jnp.asarray(1.0), {"loss": jnp.zeros(())})

    def not_a_dict(params, batch, rng):
        return params["x"].sum(), (jnp.asarray(1.0), jnp.zeros(()))

    state = create_train_state({"x": jnp.ones(2)}, optax.sgd(0.1), jax.random.key(0))
    with pytest.raises(ValueError, match="reserved"):
        make_train_step(clashing, optax.sgd(0.1), donate=False)(state, {})
    with pytest.raises(TypeError, match="dict of metrics"):
        make_train_step(not_a_dict, optax.sgd(0.1), donate=False)(state, {})


def test_shardings_are_passed_to_jit():
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("data",))
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    optimizer = optax.sgd(0.1)
    state = create_train_state(_params(), optimizer, jax.random.key(0))
    step = make_train_step(_linear_loss_fn, optimizer, in_shardings=(replicated, replicated),
                           out_shardings=(replicated, replicated))
    state, metrics = step(state, _batch(0))
    assert state.params["w"].sharding == replicated
    assert metrics["loss"].sharding == replicated
