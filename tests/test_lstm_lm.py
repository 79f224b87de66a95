"""LSTM LM and AWD-LSTM LM: shapes, BPTT state carry, decode_step, padding, dropout, policies."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from textkit.models import (
    AWDLSTMLM,
    LSTMLM,
    AWDLSTMLMConfig,
    LSTMLMConfig,
    get_model,
    list_models,
)
from textkit.precision import Policy

PAD = 1
VOCAB = 60
CONFIGS = {
    "tied": LSTMLMConfig(vocab_size=VOCAB, embed_size=12, hidden_size=12, dropout=0.3),
    "tied_projected": LSTMLMConfig(vocab_size=VOCAB, embed_size=12, hidden_size=20, dropout=0.3),
    "untied": LSTMLMConfig(vocab_size=VOCAB, embed_size=12, hidden_size=20, tie_weights=False),
    "awd": AWDLSTMLMConfig(vocab_size=VOCAB, embed_size=8, hidden_size=24),
}


def _model(config):
    return AWDLSTMLM(config) if isinstance(config, AWDLSTMLMConfig) else LSTMLM(config)


def _tokens(seed=0, batch=3, length=10):
    rng = np.random.RandomState(seed)
    return jnp.asarray(rng.randint(4, VOCAB, (batch, length)), jnp.int32)


def _random_params(model, *args):
    """Params of ``model``'s shapes filled with U(-0.3, 0.3) by numpy: no compile of the
    random initializers (which costs seconds per model on CPU); ``init`` itself is tested
    in test_init_of_a_preset."""
    shapes = jax.eval_shape(model.init, jax.random.key(0), *args)["params"]
    rng = np.random.RandomState(0)
    return jax.tree.map(lambda s: jnp.asarray(rng.uniform(-0.3, 0.3, s.shape), s.dtype), shapes)


@functools.cache
def _model_and_params(name):
    """One model and its params per entry of CONFIGS, shared by the tests."""
    model = _model(CONFIGS[name])
    return model, _random_params(model, _tokens())


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_shapes_bptt_carry_causality_and_decode_step(name):
    config = CONFIGS[name]
    tokens = _tokens()
    model, params = _model_and_params(name)
    forward = jax.jit(lambda x, s: model.apply({"params": params}, x, s))

    logits, state = forward(tokens, None)
    assert logits.shape == (3, 10, VOCAB) and logits.dtype == jnp.float32
    sizes = config.layer_sizes
    assert [h.shape for h, _ in state] == [(3, size) for size in sizes]
    initial = model.initial_state(3)
    assert all(float(jnp.abs(h).max()) == 0 for h, _ in initial)
    np.testing.assert_array_equal(forward(tokens, initial)[0], logits)

    # BPTT: two consecutive windows with the carried state equal one long window.
    first_logits, carried = forward(tokens[:, :5], None)
    second_logits, final = forward(tokens[:, 5:], carried)
    np.testing.assert_allclose(jnp.concatenate([first_logits, second_logits], 1), logits,
                               atol=1e-5)
    for (h, c), (h_ref, c_ref) in zip(final, state):
        np.testing.assert_allclose(h, h_ref, atol=1e-5)
        np.testing.assert_allclose(c, c_ref, atol=1e-5)

    # Causality.
    changed = forward(tokens.at[:, 6].set(5), None)[0]
    np.testing.assert_allclose(changed[:, :6], logits[:, :6], atol=1e-6)
    assert np.abs(np.asarray(changed[:, 6:] - logits[:, 6:])).max() > 1e-5

    # decode_step token by token equals the full forward pass.
    cache = model.apply({"params": params}, 3, 10, method="init_cache")
    assert all(leaf.shape[0] == 3 for leaf in jax.tree.leaves(cache))
    step = jax.jit(lambda c, t: model.apply({"params": params}, c, t, method="decode_step"))
    steps = []
    for t in range(tokens.shape[1]):
        log_probs, cache = step(cache, tokens[:, t])
        steps.append(log_probs)
    assert steps[0].shape == (3, VOCAB) and steps[0].dtype == jnp.float32
    np.testing.assert_allclose(jnp.stack(steps, 1), jax.nn.log_softmax(logits, -1), atol=1e-5)


def test_padding_keeps_the_state_of_the_last_real_token():
    tokens = _tokens(length=6)
    model, params = _model_and_params("tied")
    padded = jnp.concatenate([tokens, jnp.full((3, 4), PAD, jnp.int32)], axis=1)
    forward = jax.jit(lambda x: model.apply({"params": params}, x))
    logits_short, state_short = forward(tokens)
    logits_long, state_long = forward(padded)
    np.testing.assert_allclose(logits_long[:, :6], logits_short, atol=1e-6)
    for (h, c), (h_ref, c_ref) in zip(state_long, state_short):
        np.testing.assert_allclose(h, h_ref, atol=1e-6)
        np.testing.assert_allclose(c, c_ref, atol=1e-6)


def _reference_and_runs(model, params, seed, *runs):
    """Logits of ``model`` without rngs, then of each ``(model, deterministic)`` run, all on
    ``_tokens()`` with one dropout key (jitted)."""
    tokens = _tokens()

    @jax.jit
    def run(rng):
        reference = model.apply({"params": params}, tokens)[0]
        return reference, *(m.apply({"params": params}, tokens, deterministic=deterministic,
                                    rngs={"dropout": rng})[0] for m, deterministic in runs)

    return run(jax.random.key(seed))


@pytest.mark.parametrize("name", ["tied", "awd"])
def test_dropout_and_weight_drop_only_when_not_deterministic(name):
    model, params = _model_and_params(name)
    reference, deterministic, training = _reference_and_runs(
        model, params, 5, (model, True), (model, False))
    np.testing.assert_array_equal(deterministic, reference)
    assert np.abs(np.asarray(training - reference)).max() > 1e-4


def test_awd_weight_drop_alone_changes_training_outputs():
    config = dataclasses.replace(CONFIGS["awd"], embedding_dropout=0.0, input_dropout=0.0,
                                 hidden_dropout=0.0, output_dropout=0.0)
    model = _model(config)
    params = _model_and_params("awd")[1]
    no_drop = _model(dataclasses.replace(config, weight_drop=0.0))
    reference, without_weight_drop, with_weight_drop = _reference_and_runs(
        model, params, 6, (no_drop, False), (model, False))
    np.testing.assert_allclose(without_weight_drop, reference, atol=1e-6)
    assert np.abs(np.asarray(with_weight_drop - reference)).max() > 1e-4


def test_awd_embedding_dropout_drops_whole_word_types():
    config = dataclasses.replace(CONFIGS["awd"], embedding_dropout=0.5)
    tokens = jnp.asarray(np.tile(np.arange(4, 24), (2, 3)), jnp.int32)   # each type 6 times
    model = _model(config)
    params = _model_and_params("awd")[1]
    embedded = model.apply({"params": params}, params["embedding"], tokens, False,
                           method=AWDLSTMLM._dropped_embedding, rngs={"dropout": jax.random.key(2)})
    table = np.asarray(params["embedding"])[np.asarray(tokens)]
    ratio = np.asarray(embedded)[..., 0] / table[..., 0]
    assert set(np.round(np.unique(ratio), 5)) == {0.0, 2.0}
    for token in range(4, 24):
        assert len(np.unique(ratio[np.asarray(tokens) == token])) == 1


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_dtypes_follow_policy(policy):
    expected = Policy.parse(policy)
    tokens = _tokens()
    for name in ("tied_projected", "awd"):
        model = _model(dataclasses.replace(CONFIGS[name], policy=policy))
        shapes = jax.eval_shape(model.init, jax.random.key(0), tokens)["params"]
        assert all(p.dtype == expected.param_dtype for p in jax.tree.leaves(shapes))
        params = expected.cast_to_param(_model_and_params(name)[1])
        logits, state = jax.jit(lambda p, m=model: m.apply({"params": p}, tokens))(params)
        assert logits.dtype == jnp.float32 and np.isfinite(np.asarray(logits)).all()
        assert all(h.dtype == c.dtype == jnp.float32 for h, c in state)


def test_invalid_config_is_rejected_with_a_clear_message():
    with pytest.raises(ValueError, match="dropout"):
        LSTMLMConfig(dropout=1.0)
    with pytest.raises(ValueError, match="weight_drop"):
        AWDLSTMLMConfig(weight_drop=-0.1)


def test_presets_are_registered_with_their_sizes():
    names = list_models("language_model")
    for name in ("lstm_lm_200", "lstm_lm_650", "lstm_lm_1500", "lstm_lm_tiny", "awd_lstm_lm",
                 "awd_lstm_lm_tiny"):
        assert name in names
    assert get_model("lstm_lm_650").config.layer_sizes == (650, 650)
    assert get_model("lstm_lm_1500", tie_weights=False).config.tie_weights is False
    awd = get_model("awd_lstm_lm")
    assert awd.config.layer_sizes == (1150, 1150, 400)
    shapes = jax.eval_shape(awd.init, jax.random.key(0), jnp.ones((1, 4), jnp.int32))["params"]
    assert shapes["lstm_2"]["w_hh"].shape == (400, 1600)
    assert "output" not in shapes and shapes["embedding"].shape == (10000, 400)


def test_init_of_a_preset():
    model = get_model("lstm_lm_tiny", hidden_size=24)
    params = jax.jit(model.init)(jax.random.key(0), _tokens())["params"]
    assert params["embedding"].shape == (1000, 32)
    assert params["tied_projection"]["kernel"].shape == (24, 32)
    np.testing.assert_array_equal(params["output_bias"], 0.0)
    np.testing.assert_array_equal(params["lstm_0"]["bias"][24:48], 1.0)   # forget gate
    assert 0 < float(jnp.abs(params["embedding"]).max()) <= 0.1
