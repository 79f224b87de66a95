"""The fine-tuning optimizer (``textkit.tasks.encoder_task.adamw``): warm-up then linear decay, no
weight decay on biases and norm scales, layer-wise learning-rate decay by depth."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from textkit.tasks.encoder_task import adamw, layer_depths
from textkit.training import learning_rate_of

PARAMS = {"word_embeddings": {"embedding": jnp.ones((4, 2))},
          "layer_0": {"wi": {"kernel": jnp.ones((2, 2)), "bias": jnp.ones(2)},
                      "norm": {"scale": jnp.ones(2)}},
          "layer_1": {"wi": {"kernel": jnp.ones((2, 2)), "bias": jnp.ones(2)}},
          "classifier": {"kernel": jnp.ones((2, 3)), "bias": jnp.ones(3)}}


def test_layer_depths():
    depths = layer_depths(PARAMS, num_layers=2)
    assert depths["word_embeddings"]["embedding"] == 0
    assert depths["layer_0"]["wi"]["kernel"] == 1 and depths["layer_1"]["wi"]["bias"] == 2
    assert depths["classifier"]["kernel"] == 3


def _update(tx, grads):
    state = tx.init(PARAMS)
    updates, _ = tx.update(grads, state, PARAMS)
    return updates


def test_schedule_rises_then_falls_to_zero():
    """The rate of update s: warm-up over 10% of the steps, then linear decay to 0 at the end
    (the shared budget schedule, whose end ``fit`` moves under a time budget)."""
    tx, _ = adamw(PARAMS, learning_rate=1e-3, total_steps=100, warmup=0.1, weight_decay=0.0,
                  num_layers=2, max_grad_norm=None)
    state, rates = tx.init(PARAMS), []
    zero = jax.tree_util.tree_map(jnp.zeros_like, PARAMS)
    for _ in range(101):
        _, state = tx.update(zero, state, PARAMS)
        rates.append(learning_rate_of(state))
    assert [rates[s] for s in (0, 5, 10, 55, 100)] == pytest.approx(
        [0.0, 5e-4, 1e-3, 5e-4, 0.0])


def test_weight_decay_skips_biases_and_norms():
    tx, _ = adamw(PARAMS, learning_rate=1.0, total_steps=10, warmup=0.0, weight_decay=0.1,
                  num_layers=2, max_grad_norm=None)
    zero = jax.tree_util.tree_map(jnp.zeros_like, PARAMS)
    updates = _update(tx, zero)               # zero gradients: only the decay moves a weight
    assert float(jnp.abs(updates["layer_0"]["wi"]["kernel"]).max()) == pytest.approx(0.1)
    assert float(jnp.abs(updates["word_embeddings"]["embedding"]).max()) == pytest.approx(0.1)
    for leaf in (updates["layer_0"]["wi"]["bias"], updates["layer_0"]["norm"]["scale"],
                 updates["classifier"]["bias"]):
        assert float(jnp.abs(leaf).max()) == 0.0


def test_layer_decay_scales_updates_by_depth():
    tx, _ = adamw(PARAMS, learning_rate=1.0, total_steps=10, warmup=0.0, weight_decay=0.0,
                  num_layers=2, layer_decay=0.5, max_grad_norm=None)
    ones = jax.tree_util.tree_map(jnp.ones_like, PARAMS)
    updates = _update(tx, ones)               # Adam's first step: -lr * sign(grad) per entry
    size = {path: float(np.abs(np.asarray(leaf)).max()) for path, leaf in [
        ("embed", updates["word_embeddings"]["embedding"]),
        ("layer0", updates["layer_0"]["wi"]["kernel"]),
        ("layer1", updates["layer_1"]["wi"]["kernel"]),
        ("head", updates["classifier"]["kernel"])]}
    assert size["head"] == pytest.approx(1.0, rel=1e-4)
    assert size["layer1"] == pytest.approx(0.5, rel=1e-4)
    assert size["layer0"] == pytest.approx(0.25, rel=1e-4)
    assert size["embed"] == pytest.approx(0.125, rel=1e-4)


@pytest.mark.parametrize("scale", [0.0, 0.1, 10.0])
def test_clip_by_global_norm_equals_optax_and_fuses_into_one_multiply(scale):
    import optax

    from textkit.training.optim import clip_by_global_norm

    grads = {"a": jnp.arange(12.0).reshape(3, 4) * scale, "b": jnp.full((5,), -2.0) * scale}
    want, _ = optax.clip_by_global_norm(1.5).update(grads, optax.EmptyState())
    got, _ = clip_by_global_norm(1.5).update(grads, optax.EmptyState())
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=0)
    hlo = jax.jit(lambda g: clip_by_global_norm(1.5).update(g, optax.EmptyState())[0]).lower(
        grads).as_text()
    assert "select" not in hlo                      # no clipped-or-not copy of each gradient
    bad = {"a": grads["a"].at[0, 0].set(jnp.nan), "b": grads["b"]}
    assert not np.isfinite(np.asarray(clip_by_global_norm(1.5).update(
        bad, optax.EmptyState())[0]["b"])).all()
    with pytest.raises(ValueError, match="max_norm"):
        clip_by_global_norm(0.0)
