"""Masked, label-smoothed cross-entropy."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from textkit.training import cross_entropy, smoothing_entropy


def test_hand_computed_smoothing_case():
    # p = [0.25, 0.5, 0.25]; target 1; eps = 0.2 -> target 0.8, the two others 0.1 each.
    logits = jnp.log(jnp.array([[1.0, 2.0, 1.0]]))
    loss_sum, weight_sum = cross_entropy(logits, jnp.array([1]), label_smoothing=0.2)
    expected = 0.8 * math.log(2) + 2 * 0.1 * math.log(4)   # = 1.2 ln 2
    np.testing.assert_allclose(float(loss_sum), expected, rtol=1e-6)
    assert float(weight_sum) == 1.0


def test_without_smoothing_is_negative_log_likelihood():
    logits = jnp.log(jnp.array([[0.1, 0.2, 0.7], [0.5, 0.25, 0.25]]))
    loss_sum, weight_sum = cross_entropy(logits, jnp.array([2, 0]))
    np.testing.assert_allclose(float(loss_sum), -math.log(0.7) - math.log(0.5), rtol=1e-6)
    assert float(weight_sum) == 2.0


def test_matches_optax_with_explicit_soft_targets():
    rng = np.random.default_rng(0)
    logits = jnp.asarray(rng.normal(size=(3, 5, 11)), jnp.float32)
    targets = jnp.asarray(rng.integers(0, 11, (3, 5)))
    eps = 0.1
    soft = jax.nn.one_hot(targets, 11) * (1 - eps) + (1 - jax.nn.one_hot(targets, 11)) * eps / 10
    expected = optax.softmax_cross_entropy(logits, soft).sum()
    loss_sum, _ = cross_entropy(logits, targets, label_smoothing=eps)
    np.testing.assert_allclose(float(loss_sum), float(expected), rtol=1e-5)


def test_masked_positions_do_not_contribute():
    rng = np.random.default_rng(1)
    logits = jnp.asarray(rng.normal(size=(2, 4, 7)), jnp.float32)
    targets = jnp.array([[3, 4, 1, 1], [5, 1, 1, 1]])      # 1 is <pad>
    weights = targets != 1                                    # bool weights
    loss_sum, weight_sum = cross_entropy(logits, targets, weights, label_smoothing=0.1)
    assert float(weight_sum) == 3.0
    # Changing logits at padded positions changes nothing.
    noisy = logits.at[0, 2:].set(100.0).at[1, 1:].set(-50.0)
    loss_noisy, _ = cross_entropy(noisy, targets, weights, label_smoothing=0.1)
    assert float(loss_noisy) == float(loss_sum)
    real = [cross_entropy(logits[b, t][None], targets[b, t][None], label_smoothing=0.1)[0]
            for b, t in ((0, 0), (0, 1), (1, 0))]
    np.testing.assert_allclose(float(loss_sum), float(sum(real)), rtol=1e-6)
    # Float weights scale each token's loss.
    half, total = cross_entropy(logits, targets, weights.astype(jnp.float32) * 0.5, 0.1)
    np.testing.assert_allclose(float(half), 0.5 * float(loss_sum), rtol=1e-6)
    assert float(total) == 1.5


def test_float16_logits_are_computed_in_float32():
    logits = jnp.array([[60000.0, 0.0, -60000.0]], jnp.float16)
    loss_sum, weight_sum = cross_entropy(logits, jnp.array([2]), label_smoothing=0.1)
    assert loss_sum.dtype == jnp.float32 and weight_sum.dtype == jnp.float32
    assert np.isfinite(float(loss_sum))
    np.testing.assert_allclose(float(loss_sum), 0.9 * 120000 + 0.05 * 60000, rtol=1e-5)


def test_smoothing_entropy_is_the_loss_at_the_optimum():
    vocab, eps = 6, 0.1
    best = jnp.log(jnp.array([[1 - eps] + [eps / (vocab - 1)] * (vocab - 1)]))
    loss_sum, _ = cross_entropy(best, jnp.array([0]), label_smoothing=eps)
    np.testing.assert_allclose(float(loss_sum), smoothing_entropy(vocab, eps), rtol=1e-6)
    # Any other prediction is worse.
    worse, _ = cross_entropy(best + jnp.array([[0.3, 0, 0, 0, 0, 0]]), jnp.array([0]), None, eps)
    assert float(worse) > smoothing_entropy(vocab, eps)
    assert smoothing_entropy(vocab, 0.0) == 0.0


def test_bad_arguments_are_rejected():
    logits = jnp.zeros((2, 3, 5))
    with pytest.raises(ValueError, match="vocabulary axis"):
        cross_entropy(logits, jnp.zeros((2, 4), jnp.int32))
    with pytest.raises(ValueError, match="weights"):
        cross_entropy(logits, jnp.zeros((2, 3), jnp.int32), jnp.ones((2,)))
    with pytest.raises(ValueError, match="label_smoothing"):
        cross_entropy(logits, jnp.zeros((2, 3), jnp.int32), label_smoothing=1.0)
