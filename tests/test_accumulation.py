"""Gradient accumulation in the one train step: N micro-batches == one batch of N * B rows."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from textkit.models import get_model
from textkit.precision import dynamic_loss_scale
from textkit.precision.loss_scale import loss_scale_of
from textkit.tasks import translation
from textkit.training import create_train_state, make_train_step

ROWS, N = 8, 4


def seq2seq_batch(rows: int, seed: int = 0) -> dict[str, np.ndarray]:
    """A seq2seq batch with uneven lengths and a few dummy rows (length 0)."""
    rng = np.random.default_rng(seed)
    src_len, tgt_len = rng.integers(1, 9, rows), rng.integers(1, 7, rows)
    src_len[-2:] = tgt_len[-2:] = 0                         # dummy rows, as the sampler pads
    src = rng.integers(4, 49, (rows, 8)) * (np.arange(8) < src_len[:, None])
    tgt = rng.integers(4, 49, (rows, 7)) * (np.arange(7) < tgt_len[:, None])
    return {"src_tokens": src.astype(np.int32), "src_lengths": src_len.astype(np.int32),
            "tgt_input": np.roll(tgt, 1, axis=1).astype(np.int32),
            "tgt_output": tgt.astype(np.int32), "tgt_lengths": tgt_len.astype(np.int32)}


def model_and_params(policy: str = "float32"):
    model = get_model("transformer_tiny", src_vocab_size=50, tgt_vocab_size=50, dropout=0.0,
                      pad_id=0, policy=policy)
    params = translation.init_seq2seq_params(model, jax.random.PRNGKey(0))
    return model, params


def run_steps(model, params, optimizer, batch, accum_steps: int, steps: int = 2):
    loss_fn = translation.seq2seq_loss_fn(model, label_smoothing=0.1)
    step = make_train_step(loss_fn, optimizer, accum_steps=accum_steps, donate=False)
    state = create_train_state(params, optimizer, jax.random.PRNGKey(1))
    history = []
    for _ in range(steps):
        state, metrics = step(state, batch)
        history.append(jax.device_get(metrics))
    return state, history


@pytest.mark.slow
def test_accumulated_step_equals_one_large_batch_float32():
    model, params = model_and_params()
    batch = seq2seq_batch(ROWS * N)
    # SGD: the parameter change is the gradient itself (Adam would blow float noise in a
    # gradient that is zero in exact arithmetic up to a full learning-rate step)
    optimizer = optax.sgd(0.5)
    big, big_metrics = run_steps(model, params, optimizer, batch, accum_steps=1)
    acc, acc_metrics = run_steps(model, params, optimizer, batch, accum_steps=N)
    for key in ("loss", "tokens", "src_tokens", "grad_norm"):
        np.testing.assert_allclose(acc_metrics[-1][key], big_metrics[-1][key], rtol=1e-5)
    for a, b in zip(jax.tree_util.tree_leaves(acc.params), jax.tree_util.tree_leaves(big.params)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    assert acc_metrics[0]["tokens"] == batch["tgt_lengths"].sum()


@pytest.mark.slow
def test_accumulation_under_mixed_float16_skips_the_whole_update_on_one_overflow():
    model, params = model_and_params("mixed_float16")
    optimizer = dynamic_loss_scale(optax.adam(1e-3), initial_scale=2.0**10)
    batch = seq2seq_batch(ROWS * N, seed=1)
    _, (first, _) = run_steps(model, params, optimizer, batch, accum_steps=N)
    assert np.isfinite(first["grad_norm"]), "the clean batch overflowed: nothing is tested"
    _, big_metrics = run_steps(model, params, optimizer, batch, accum_steps=1)
    np.testing.assert_allclose(first["loss"], big_metrics[0]["loss"], rtol=1e-3)

    # an inf in one micro-batch's embedding row: only micro-batch 1 (rows 1, 1+N, ...) sees it
    poisoned = jax.tree_util.tree_map(np.asarray, params)
    vocab_row = 49
    table = poisoned["src_embed"]["embedding"].copy()
    table[vocab_row] = np.float32(7e4)            # above float16's max: inf once cast
    poisoned["src_embed"]["embedding"] = table
    batch["src_tokens"][1::N] = np.where(batch["src_tokens"][1::N] > 0, 4, 0)
    batch["src_tokens"][1, 0] = vocab_row
    assert not np.isin(vocab_row, np.delete(batch["src_tokens"], np.s_[1::N], axis=0))
    loss_fn = translation.seq2seq_loss_fn(model)
    step = make_train_step(loss_fn, optimizer, accum_steps=N, donate=False)
    state = create_train_state(poisoned, optimizer, jax.random.PRNGKey(1))
    new_state, metrics = step(state, batch)
    assert not np.isfinite(float(metrics["grad_norm"]))
    assert float(loss_scale_of(new_state.opt_state)) == 2.0**9        # halved
    for a, b in zip(jax.tree_util.tree_leaves(new_state.params),
                    jax.tree_util.tree_leaves(state.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))    # update skipped


@pytest.mark.slow
def test_accumulation_rejects_bad_settings():
    model, params = model_and_params()
    loss_fn = translation.seq2seq_loss_fn(model)
    with pytest.raises(ValueError, match="accum_steps must be >= 1"):
        make_train_step(loss_fn, optax.sgd(0.1), accum_steps=0)
    with pytest.raises(ValueError, match="carry"):
        make_train_step(loss_fn, optax.sgd(0.1), accum_steps=2, carry=True)
    step = make_train_step(loss_fn, optax.sgd(0.1), accum_steps=3, donate=False)
    state = create_train_state(params, optax.sgd(0.1), jax.random.PRNGKey(1))
    with pytest.raises(ValueError, match="multiple of it"):
        step(state, seq2seq_batch(8))


def test_loader_batches_hold_accum_steps_micro_batches():
    samples = [([5] * (1 + i % 7), [6] * (1 + i % 5)) for i in range(400)]
    plain = translation.seq2seq_loader(samples, 64, pad_id=0, bos_id=1, eos_id=2, shuffle=False,
                                    batch_rows_multiple=2)
    grouped = translation.seq2seq_loader(samples, 64, pad_id=0, bos_id=1, eos_id=2, shuffle=False,
                                      batch_rows_multiple=2, accum_steps=N)
    for shape in grouped.batch_sampler.bucket_shapes:
        assert shape.rows % (2 * N) == 0
    plain_rows = {s.lengths: s.rows for s in plain.batch_sampler.bucket_shapes}
    for shape in grouped.batch_sampler.bucket_shapes:
        assert shape.rows // N <= plain_rows[shape.lengths] + 1
    batch = next(iter(grouped))
    assert batch["src_tokens"].shape[0] % N == 0
    assert jnp.asarray(batch["tgt_lengths"]).sum() > 0
