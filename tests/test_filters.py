"""Token filters: top-k / top-p candidates and a step function that excludes ids."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from toy_decoders import make_table_model, table_step

from textkit.decoding import ExcludeTokensStep, top_k_top_p


def test_top_k_keeps_the_k_best_sorted():
    logits = jnp.asarray([[0.0, 3.0, 1.0, 2.0, -1.0]])
    values, ids = top_k_top_p(logits, 3, 1.0)
    np.testing.assert_array_equal(ids, [[1, 3, 2]])
    np.testing.assert_array_equal(values, [[3.0, 2.0, 1.0]])


def test_top_p_keeps_the_smallest_prefix_reaching_p():
    logits = jnp.log(jnp.asarray([[0.5, 0.3, 0.15, 0.05], [0.97, 0.01, 0.01, 0.01]]))
    values, ids = top_k_top_p(logits, 0, 0.7)
    kept = np.isfinite(np.asarray(values))
    np.testing.assert_array_equal(ids[0], [0, 1, 2, 3])
    np.testing.assert_array_equal(kept, [[True, True, False, False],
                                         [True, False, False, False]])   # first always kept


def test_exclude_tokens_step_renormalises_without_the_excluded_ids():
    params, cache = make_table_model(seed=0, vocab=6, length=3, rows=2)
    step = ExcludeTokensStep(table_step, (3, 4))
    assert hash(step) == hash(ExcludeTokensStep(table_step, (3, 4)))
    tokens = jnp.asarray([2, 5], jnp.int32)
    log_probs, new_cache = step(params, cache, tokens)
    reference, _ = table_step(params, cache, tokens)
    assert np.all(np.isneginf(np.asarray(log_probs[:, [3, 4]])))
    np.testing.assert_allclose(jax.nn.logsumexp(log_probs, axis=-1), 0.0, atol=1e-6)
    kept = [0, 1, 2, 5]
    np.testing.assert_allclose(log_probs[:, kept],
                               jax.nn.log_softmax(reference[:, kept], axis=-1), atol=1e-6)
    np.testing.assert_array_equal(new_cache["pos"], cache["pos"] + 1)
