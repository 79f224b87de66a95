"""TextCNN / (Bi)LSTM classifiers: padding invariance, frozen embeddings, learning the toy
sentiment corpus, presets."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from textkit.data.toy import toy_sentiment
from textkit.models import get_model, list_models
from textkit.models.classifier import (
    RNNClassifier,
    RNNClassifierConfig,
    TextCNN,
    TextCNNConfig,
    WideConv,
    init_classifier,
    trainable_mask,
    with_embedding_matrix,
)
from textkit.precision import Policy
from textkit.tasks.word_vector_classification import classifier_loss_fn
from textkit.training import create_train_state, freeze, make_train_step, max_norm

V, D, PAD = 40, 8, 1


def key(seed):
    # rbg keys: XLA's CPU compiler builds their programs ~3x faster than threefry's, and
    # compile time dominates these small tests; the models do not depend on the key type.
    return jax.random.key(seed, impl="rbg")


def _pretrained():
    return np.random.default_rng(0).normal(size=(V, D)).astype(np.float32)


# One model per embedding mode, covering both architectures, both poolings, one and two
# directions, a window longer than the shortest input, and a mixed-precision policy.
MODELS = {
    "cnn-multichannel-bf16": TextCNN(TextCNNConfig(
        V, embed_dim=D, num_filters=6, windows=(1, 3, 6), mode="multichannel",
        policy=Policy.parse("mixed_bfloat16"))),
    "lstm-static-max": RNNClassifier(RNNClassifierConfig(
        V, embed_dim=D, hidden_size=5, mode="static", pooling="max")),
    "bilstm-nonstatic-mean": RNNClassifier(RNNClassifierConfig(
        V, embed_dim=D, hidden_size=5, mode="non-static", bidirectional=True)),
}


@functools.cache
def _params(name):
    return init_classifier(MODELS[name], key(0), _pretrained())


TOKENS = np.array([[5, 6, 7, 8, 9, 10, 11], [12, 13, PAD, PAD, PAD, PAD, PAD],
                   [14, 15, 16, 17, PAD, PAD, PAD], [PAD] * 7], np.int32)


@pytest.mark.parametrize("name", MODELS)
def test_padding_does_not_change_output(name):
    model, params = MODELS[name], _params(name)
    apply = jax.jit(lambda p, tokens: model.apply({"params": p}, tokens))
    logits = apply(params, TOKENS)
    assert logits.shape == (4, 2) and logits.dtype == jnp.float32
    assert np.all(np.isfinite(logits))
    padded = np.pad(TOKENS, ((0, 0), (0, 9)), constant_values=PAD)
    np.testing.assert_allclose(apply(params, padded), logits, atol=1e-5)
    # a row alone (trimmed to its length) gives the same logits as inside the batch
    np.testing.assert_allclose(apply(params, TOKENS[2:3, :4]), logits[2:3], atol=1e-5)
    # the padding embedding is not read: changing it changes nothing
    changed = jax.tree_util.tree_map_with_path(
        lambda p, x: x.at[PAD].add(3.0) if "embedding" in jax.tree_util.keystr(p) else x, params)
    np.testing.assert_allclose(apply(changed, TOKENS), logits, atol=1e-5)


@pytest.mark.parametrize("name,frozen,tuned", [
    ("cnn-multichannel-bf16", True, True), ("lstm-static-max", True, False),
    ("bilstm-nonstatic-mean", False, True)])
def test_frozen_and_tuned_embeddings_after_one_step(name, frozen, tuned):
    model, params, pre = MODELS[name], _params(name), _pretrained()
    embed = params["embed"]
    assert set(embed) == ({"frozen_embedding"} if frozen else set()) | (
        {"embedding"} if tuned else set())
    for table in embed.values():  # every copy starts from the pretrained matrix
        np.testing.assert_array_equal(table, pre)
    # weight decay would move a frozen table if the optimizer did not mask it
    tx = freeze(optax.adamw(1e-2, weight_decay=0.1), trainable_mask)
    labels = jnp.array([0, 1, 1, 0])

    @jax.jit
    def step(params):
        def loss_fn(p):
            logits = model.apply({"params": p}, TOKENS, deterministic=False,
                                 rngs={"dropout": key(1)})
            return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
        grads = jax.grad(loss_fn)(params)
        updates, _ = tx.update(grads, tx.init(params), params)
        return grads, optax.apply_updates(params, updates)

    grads, new = step(params)
    if frozen:
        assert not np.any(grads["embed"]["frozen_embedding"])
        np.testing.assert_array_equal(new["embed"]["frozen_embedding"], pre)
    if tuned:
        assert np.abs(new["embed"]["embedding"] - pre).max() > 1e-3
    assert np.abs(new["output"]["kernel"] - params["output"]["kernel"]).max() > 1e-3
    mask = trainable_mask(params)
    assert mask["embed"].get("frozen_embedding", False) is False
    assert all(jax.tree.leaves({k: v for k, v in mask.items() if k != "embed"}))


@pytest.mark.parametrize("window", [1, 3, 5])
def test_wide_conv_matches_lax_conv(window):
    # Kim's wide convolution (window - 1 zeros each side), value and gradients
    x = jnp.asarray(np.random.default_rng(1).normal(size=(3, 4, 6)), jnp.float32)
    conv = WideConv(window, 5)
    params = conv.init(key(0), x)["params"]
    params["bias"] = jnp.arange(5, dtype=jnp.float32)

    def reference(p, x):
        out = jax.lax.conv_general_dilated(x, p["kernel"], (1,), [(window - 1, window - 1)],
                                           dimension_numbers=("NWC", "WIO", "NWC"))
        return out + p["bias"]

    def ours(p, x):
        return conv.apply({"params": p}, x)

    assert ours(params, x).shape == (3, 4 + window - 1, 5)
    np.testing.assert_allclose(ours(params, x), reference(params, x), atol=1e-5)
    cotangent = jnp.asarray(np.random.default_rng(2).normal(size=(3, 4 + window - 1, 5)))
    grads = [jax.vjp(f, params, x)[1](cotangent) for f in (ours, reference)]
    for a, b in zip(jax.tree.leaves(grads[0]), jax.tree.leaves(grads[1])):
        np.testing.assert_allclose(a, b, atol=1e-4)


def test_multichannel_tables_survive_a_donating_train_step():
    # both tables come from one matrix; donating the state must not see one buffer twice
    model = MODELS["cnn-multichannel-bf16"]
    params = init_classifier(model, key(0), _pretrained())  # fresh: the step donates them
    embed = params["embed"]
    assert (embed["frozen_embedding"].unsafe_buffer_pointer()
            != embed["embedding"].unsafe_buffer_pointer())
    tx = freeze(optax.adam(1e-2), trainable_mask)
    step = make_train_step(classifier_loss_fn(model), tx)  # donates the state
    state = create_train_state(params, tx, jax.random.key(3))  # the step wraps threefry data
    batch = {"tokens": TOKENS, "labels": np.array([0, 1, 1, 0], np.int32),
             "weights": np.array([1, 1, 1, 0], np.float32)}
    for _ in range(2):
        state, metrics = step(state, batch)
    assert np.isfinite(metrics["loss"])
    np.testing.assert_array_equal(state.params["embed"]["frozen_embedding"], _pretrained())
    assert np.abs(state.params["embed"]["embedding"] - _pretrained()).max() > 1e-3


def test_max_norm_rescales_long_output_columns_only():
    params = {"output": {"kernel": jnp.array([[3.0, 0.1], [4.0, 0.2]]), "bias": jnp.ones(2)},
              "conv3": {"kernel": jnp.full((2, 2), 10.0)}}
    grads = jax.tree.map(lambda p: jnp.full_like(p, -0.5), params)
    tx = optax.chain(optax.sgd(1.0), max_norm(3.0))
    updates, _ = tx.update(grads, tx.init(params), params)
    new = optax.apply_updates(params, updates)
    stepped = params["output"]["kernel"] + 0.5                  # columns [3.5, 4.5], [0.6, 0.7]
    long_column = stepped[:, 0] * 3.0 / np.linalg.norm(stepped[:, 0])  # rescaled to norm 3
    np.testing.assert_allclose(new["output"]["kernel"][:, 0], long_column, rtol=1e-6)
    np.testing.assert_allclose(new["output"]["kernel"][:, 1], stepped[:, 1], rtol=1e-6)
    np.testing.assert_allclose(new["output"]["bias"], 1.5)      # only the kernel is constrained
    np.testing.assert_allclose(new["conv3"]["kernel"], 10.5)
    with pytest.raises(ValueError, match="needs params"):
        tx.update(grads, tx.init(params))
    with pytest.raises(ValueError, match="> 0"):
        max_norm(0.0)


def test_pretrained_matrix_is_checked():
    cnn = TextCNN(TextCNNConfig(V, embed_dim=D, mode="static"))
    with pytest.raises(ValueError, match="needs a pretrained matrix"):
        init_classifier(cnn, key(0))
    with pytest.raises(ValueError, match="takes no pretrained matrix"):
        init_classifier(TextCNN(TextCNNConfig(V)), key(0), _pretrained())
    with pytest.raises(ValueError, match=r"shape \(40, 9\).*needs \(40, 8\)"):
        with_embedding_matrix(_params("lstm-static-max"), np.zeros((V, 9), np.float32))
    with pytest.raises(ValueError, match="mode='frozen'; expected one of"):
        TextCNNConfig(V, mode="frozen")
    with pytest.raises(ValueError, match="pooling"):
        RNNClassifierConfig(V, pooling="last")


def test_presets_are_registered():
    assert {"textcnn", "lstm_classifier", "bilstm_classifier"} <= set(
        list_models("classification"))
    cnn = get_model("textcnn", vocab_size=100)
    assert (cnn.config.windows, cnn.config.num_filters, cnn.config.dropout) == ((3, 4, 5), 100,
                                                                                0.5)
    assert get_model("bilstm_classifier", vocab_size=100, mode="static").config.bidirectional
    assert not get_model("lstm_classifier", vocab_size=100).config.bidirectional


def _encode(data, vocab, length):
    tokens = np.full((len(data), length), PAD, np.int32)
    for i, (sentence, _) in enumerate(data):
        ids = [vocab.get(w, 0) for w in sentence.split()][:length]
        tokens[i, :len(ids)] = ids
    return tokens, np.array([label for _, label in data], np.int32)


@pytest.mark.slow
@pytest.mark.parametrize("make", [
    lambda v: TextCNN(TextCNNConfig(v, embed_dim=32, num_filters=32)),
    lambda v: RNNClassifier(RNNClassifierConfig(v, embed_dim=32, hidden_size=32,
                                                bidirectional=True, pooling="max",
                                                dropout=0.2)),
], ids=["textcnn", "bilstm"])
def test_learns_toy_sentiment(make):
    train, test = toy_sentiment("train", 2000), toy_sentiment("test", 300)
    words = sorted({w for s, _ in train for w in s.split()})
    vocab = {w: i + 4 for i, w in enumerate(words)}  # 0 <unk>, 1 <pad>, 2 <bos>, 3 <eos>
    x, y = _encode(train, vocab, 24)
    x_test, y_test = _encode(test, vocab, 24)
    model = make(len(vocab) + 4)
    params = init_classifier(model, key(0))
    tx = freeze(optax.adam(3e-3), trainable_mask)
    state = tx.init(params)

    @jax.jit
    def step(params, state, xb, yb, dropout):
        def loss_fn(p):
            logits = model.apply({"params": p}, xb, deterministic=False, rngs={"dropout": dropout})
            return optax.softmax_cross_entropy_with_integer_labels(logits, yb).mean()
        grads = jax.grad(loss_fn)(params)
        updates, state = tx.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    rng = np.random.default_rng(0)
    dropout_key = key(1)
    for _epoch in range(5):
        for batch in rng.permutation(len(x)).reshape(-1, 50):
            dropout_key, sub = jax.random.split(dropout_key)
            params, state = step(params, state, x[batch], y[batch], sub)
    predicted = np.argmax(jax.jit(model.apply)({"params": params}, x_test), axis=-1)
    accuracy = float(np.mean(predicted == y_test))
    assert accuracy >= 0.8, accuracy
