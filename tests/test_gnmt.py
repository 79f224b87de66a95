"""GNMT: shapes, padding invariance, causality, decode_step == full forward, policies, presets."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from textkit.models import GNMT, GNMTConfig, get_model, list_models
from textkit.precision import Policy

PAD = 1
TINY = GNMTConfig(src_vocab_size=50, tgt_vocab_size=40, embed_size=16, hidden_size=16,
                  num_encoder_layers=3, num_decoder_layers=3, dropout=0.1, pad_id=PAD)


def _batch(seed=0, batch=3, src_len=7, tgt_len=6):
    rng = np.random.RandomState(seed)
    src = rng.randint(4, 50, (batch, src_len)).astype(np.int32)
    src[0, 4:] = PAD                      # a shorter row
    src[-1, :] = PAD                      # a dummy all-padding row
    tgt = rng.randint(4, 40, (batch, tgt_len)).astype(np.int32)
    tgt[:, 0] = 2
    return jnp.asarray(src), jnp.asarray(tgt)


def _random_params(model, *args):
    """Params of ``model``'s shapes filled with U(-0.3, 0.3) by numpy: no compile of the
    random initializers (which costs seconds per model on CPU); ``init`` itself is tested
    in the copy-task test."""
    shapes = jax.eval_shape(model.init, jax.random.key(0), *args)["params"]
    rng = np.random.RandomState(0)
    return jax.tree.map(lambda s: jnp.asarray(rng.uniform(-0.3, 0.3, s.shape), s.dtype), shapes)


@functools.cache
def _model_and_params(attention):
    """One TINY model and its params per attention kind, shared by the tests."""
    model = GNMT(dataclasses.replace(TINY, attention=attention))
    return model, _random_params(model, *_batch())


@pytest.mark.parametrize("attention", ["scaled_dot", "luong", "bahdanau"])
def test_forward_padding_causality_and_decode_step(attention):
    """One model per attention kind (jitted, few compiles) checked for: shapes, a finite
    all-padding row, source-padding invariance, causality and decode_step == forward."""
    src, tgt = _batch()
    model, params = _model_and_params(attention)

    @jax.jit
    def forward(s, t):
        return (model.apply({"params": params}, s, t),
                model.apply({"params": params}, s, method="encode"))

    logits, memory = forward(src, tgt)
    assert logits.shape == (3, 6, 40) and logits.dtype == jnp.float32
    assert np.isfinite(np.asarray(logits)).all()
    assert memory["memory"].shape == (3, 7, 16)
    np.testing.assert_array_equal(memory["src_mask"], np.asarray(src) != PAD)

    # Extra source padding changes nothing at real positions.
    more_padding = jnp.concatenate([src, jnp.full((3, 5), PAD, jnp.int32)], axis=1)
    logits_long, memory_long = forward(more_padding, tgt)
    np.testing.assert_allclose(logits_long, logits, atol=1e-5)
    memory_long = memory_long["memory"]
    np.testing.assert_allclose(memory_long[0, :4], memory["memory"][0, :4], atol=1e-6)
    np.testing.assert_array_equal(memory_long[0, 4:], 0.0)

    # Causality: a later target token does not change earlier logits.
    changed, _ = forward(src, tgt.at[:, 3].set(7))
    np.testing.assert_allclose(changed[:, :3], logits[:, :3], atol=1e-6)
    assert np.abs(np.asarray(changed[:, 3:] - logits[:, 3:])).max() > 1e-4

    # decode_step token by token equals the full forward pass.
    cache = model.apply({"params": params}, memory, src, tgt.shape[1], method="init_cache")
    assert all(leaf.shape[0] == 3 for leaf in jax.tree.leaves(cache))
    step = jax.jit(lambda c, t: model.apply({"params": params}, c, t, method="decode_step"))
    steps = []
    for t in range(tgt.shape[1]):
        log_probs, cache = step(cache, tgt[:, t])
        assert log_probs.shape == (3, 40) and log_probs.dtype == jnp.float32
        steps.append(log_probs)
    full = jax.nn.log_softmax(logits, axis=-1)
    np.testing.assert_allclose(jnp.stack(steps, axis=1), full, atol=1e-5)


@pytest.mark.slow
def test_shared_and_tied_embeddings_one_table_and_decode_step_equals_forward():
    """share_embeddings + tie_output: one [V,E] table read by both embeddings and the softmax
    layer (no tgt_embedding, no [D,V] kernel), it gets gradient from all three uses, and
    decode_step token by token equals the forward pass."""
    config = dataclasses.replace(TINY, tgt_vocab_size=50, share_embeddings=True, tie_output=True)
    model = GNMT(config)
    src, tgt = _batch()
    params = _random_params(model, src, tgt)
    assert "tgt_embedding" not in params and "output_projection" not in params
    assert params["src_embedding"].shape == (50, 16)
    assert params["output_hidden"]["kernel"].shape[-1] == 16       # [h_top; ctx] -> E

    logits = model.apply({"params": params}, src, tgt)
    assert logits.shape == (3, 6, 50) and np.isfinite(np.asarray(logits)).all()
    memory = model.apply({"params": params}, src, method="encode")
    cache = model.apply({"params": params}, memory, src, tgt.shape[1], method="init_cache")
    steps = []
    for t in range(tgt.shape[1]):
        log_probs, cache = model.apply({"params": params}, cache, tgt[:, t], method="decode_step")
        steps.append(log_probs)
    np.testing.assert_allclose(jnp.stack(steps, axis=1), jax.nn.log_softmax(logits, -1),
                               atol=1e-5)

    # A token in neither input: its row can only get gradient through the tied softmax layer.
    output_id = min(set(range(4, 50)) - set(np.asarray(src).ravel()) - set(np.asarray(tgt).ravel()))
    grads = jax.grad(lambda table: model.apply(
        {"params": {**params, "src_embedding": table}}, src, tgt)[0, -1, output_id])(
        params["src_embedding"])
    grads = np.abs(np.asarray(grads)).max(axis=1)
    assert grads[output_id] > 0                          # the output row read by the softmax
    assert (grads[np.asarray(src[0, :4])] > 0).all()     # source tokens of row 0
    assert (grads[np.asarray(tgt[0, :5])] > 0).all()     # target inputs before the last step

    with pytest.raises(ValueError, match="share_embeddings"):
        GNMTConfig(src_vocab_size=50, tgt_vocab_size=40, share_embeddings=True)


def test_dropout_only_when_not_deterministic():
    src, tgt = _batch()
    model, params = _model_and_params("scaled_dot")

    @jax.jit
    def run(rng):
        rngs = {"dropout": rng}
        return (model.apply({"params": params}, src, tgt),
                model.apply({"params": params}, src, tgt, deterministic=True, rngs=rngs),
                model.apply({"params": params}, src, tgt, deterministic=False, rngs=rngs))

    reference, deterministic, training = run(jax.random.key(3))
    np.testing.assert_array_equal(deterministic, reference)
    assert np.abs(np.asarray(training - reference)).max() > 1e-4


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_dtypes_follow_policy(policy):
    src, tgt = _batch()
    model = GNMT(dataclasses.replace(TINY, policy=policy, attention="bahdanau"))
    expected = Policy.parse(policy)
    shapes = jax.eval_shape(model.init, jax.random.key(0), src, tgt)["params"]
    assert all(p.dtype == expected.param_dtype for p in jax.tree.leaves(shapes))
    params = expected.cast_to_param(_model_and_params("bahdanau")[1])

    @jax.jit
    def run(p):
        memory = model.apply({"params": p}, src, method="encode")
        logits = model.apply({"params": p}, src, tgt)
        cache = model.apply({"params": p}, memory, src, 4, method="init_cache")
        log_probs, cache = model.apply({"params": p}, cache, tgt[:, 0], method="decode_step")
        return memory, logits, log_probs, cache

    memory, logits, log_probs, cache = run(params)
    assert memory["memory"].dtype == expected.compute_dtype
    assert logits.dtype == log_probs.dtype == jnp.float32
    assert np.isfinite(np.asarray(logits)).all()
    assert all(h.dtype == c.dtype == jnp.float32 for h, c in cache["state"]["layers"])
    assert cache["state"]["feed"].dtype == expected.compute_dtype


def test_invalid_config_is_rejected_with_a_clear_message():
    with pytest.raises(ValueError, match="attention"):
        GNMTConfig(attention="dot")
    with pytest.raises(ValueError, match="decoder layers"):
        GNMTConfig(num_decoder_layers=1)


def test_presets_are_registered_with_their_sizes():
    names = list_models("translation")
    for name in ("gnmt_iwslt", "gnmt_4layer", "gnmt_8layer", "gnmt_tiny"):
        assert name in names
    iwslt = get_model("gnmt_iwslt").config
    assert (iwslt.num_encoder_layers, iwslt.hidden_size, iwslt.dropout) == (2, 512, 0.2)
    assert get_model("gnmt_8layer").config.num_decoder_layers == 8
    assert get_model("gnmt_tiny", attention="luong").config.attention == "luong"


def test_iwslt_parameter_count_matches_the_architecture():
    model = get_model("gnmt_iwslt")
    src = jnp.ones((1, 4), jnp.int32)
    shapes = jax.eval_shape(model.init, jax.random.key(0), src, src)["params"]
    count = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(shapes))
    h, vs, vt = 512, 17191, 7709

    def lstm(n_in):
        return n_in * 4 * h + h * 4 * h + 4 * h

    expected = (vs * h + vt * h                    # embeddings
                + 2 * lstm(h) + lstm(2 * h)        # encoder: bidirectional, then 2h -> h
                + lstm(h) + h * 4 * h              # decoder layer 1: embedding + fed context
                + lstm(2 * h)                      # decoder layer 2: [h1; context]
                + 2 * h * h + 1                    # query and key projections, learned scale
                + h * 2 * 2 * h + 2 * 2 * h        # bridge: mean memory -> (h, c) per layer
                + 2 * h * vt + vt)                 # output layer over [h_top; context]
    print(f"gnmt_iwslt parameters: {count:,}")
    assert count == expected


@pytest.mark.slow
def test_init_then_every_parameter_gets_gradient_and_a_copy_task_loss_falls():
    model = GNMT(TINY)
    rng = np.random.RandomState(0)
    src = jnp.asarray(rng.randint(4, 12, (16, 5)), jnp.int32)
    tgt_in = jnp.concatenate([jnp.full((16, 1), 2, jnp.int32), src], axis=1)
    tgt_out = jnp.concatenate([src, jnp.full((16, 1), 3, jnp.int32)], axis=1)
    params = jax.jit(model.init)(jax.random.key(0), src, tgt_in)["params"]
    assert all(np.isfinite(np.asarray(p)).all() for p in jax.tree.leaves(params))
    optimizer = optax.adam(1e-2)

    def loss_fn(p):
        logits = model.apply({"params": p}, src, tgt_in)
        return optax.softmax_cross_entropy_with_integer_labels(logits, tgt_out).mean()

    @jax.jit
    def train_step(p, state):
        loss, grads = jax.value_and_grad(loss_fn)(p)
        updates, state = optimizer.update(grads, state, p)
        return optax.apply_updates(p, updates), state, loss, grads

    state = optimizer.init(params)
    params, state, first, grads = train_step(params, state)
    silent = [jax.tree_util.keystr(path) for path, g in jax.tree_util.tree_leaves_with_path(grads)
              if not np.abs(np.asarray(g)).max() > 0]
    assert not silent, f"parameters without gradient: {silent}"
    for _ in range(60):
        params, state, loss, _ = train_step(params, state)
    assert float(loss) < 0.6 * float(first)


# ------------------------------------------------------------------ the source-aware decoder
OLD_DECODER = dict(bridge=False, input_feeding=False, output_context=False,
                   attention="scaled_dot", init_scale=None)


def _queries(model, params, src, tgt):
    """The bottom decoder layer's outputs (the attention queries) for ``src`` and ``tgt``."""
    def bottom(module, src, tgt):
        encoded = module.encode(src)
        memory, mask = encoded["memory"], encoded["src_mask"]
        keys = module.project_keys(memory)
        x = module._embed(module._target_table(), tgt)
        return module._bottom(x, keys, memory, mask, module._initial_state(memory, mask))[0]
    return model.apply({"params": params}, src, tgt, method=bottom)


@pytest.mark.parametrize("flags,depends", [
    ({}, True),                                 # the fast tier: the default; one compile each
    pytest.param(OLD_DECODER, False, marks=pytest.mark.slow),
    pytest.param({"input_feeding": False}, True, marks=pytest.mark.slow),
    pytest.param({"bridge": False}, True, marks=pytest.mark.slow)])
def test_attention_query_depends_on_the_source(flags, depends):
    model = get_model("gnmt_tiny", src_vocab_size=40, tgt_vocab_size=40, pad_id=0, **flags)
    tgt = jnp.array([[1, 5, 6, 7]] * 2, jnp.int32)
    src_a = jnp.array([[4, 9, 12, 0], [20, 3, 0, 0]], jnp.int32)
    src_b = jnp.array([[30, 31, 2, 0], [11, 19, 7, 0]], jnp.int32)
    params = model.init(jax.random.key(0), src_a, tgt)["params"]
    differ = float(jnp.abs(_queries(model, params, src_a, tgt)
                           - _queries(model, params, src_b, tgt)).max())
    assert (differ > 1e-4) == depends, differ


def test_normalized_attention_does_not_start_uniform():
    from textkit.models.gnmt import RecurrentAttention
    rng = np.random.default_rng(0)
    query = jnp.asarray(rng.normal(size=(2, 3, 64)) * 0.05, jnp.float32)   # small LSTM outputs
    keys = jnp.asarray(rng.normal(size=(2, 7, 64)) * 0.05, jnp.float32)
    memory = jnp.broadcast_to(jnp.eye(7), (2, 7, 7))      # one-hot memory: context == weights
    mask = jnp.ones((2, 7), bool)
    spread = {}
    for kind, k in (("normalized", keys / jnp.linalg.norm(keys, axis=-1, keepdims=True)),
                    ("scaled_dot", keys)):
        attention = RecurrentAttention(kind, 64)
        variables = attention.init(jax.random.key(1), query, k, memory, mask)
        weights = attention.apply(variables, query, k, memory, mask)          # [2, 3, 7]
        spread[kind] = float(weights.std(-1).mean())
    assert spread["normalized"] > 0.05 > 1e-3 > spread["scaled_dot"], spread
