"""Last-layer pruning: where the head reads only the first token, the encoder's last layer
computes that row alone, with the logits of the full computation (``output_hidden_states=True``
keeps every row); the attention's query subset under it (``queries``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from textkit.models import EncoderConfig, get_model
from textkit.models.attention import Disentangled, MultiHeadAttention, take_rows
from textkit.models.layers import Dense
from textkit.pretrained import load_pretrained

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "encoders"
SEQCLS = ["bert_seqcls", "roberta_seqcls", "xlm_roberta_seqcls", "electra_seqcls",
          "distilbert_seqcls", "deberta_v2_seqcls", "deberta_v3_seqcls", "modernbert_seqcls"]
FAST = {"bert_seqcls", "deberta_v3_seqcls", "modernbert_seqcls"}


def padded_batch(config: EncoderConfig, rows: int = 8, length: int = 24) -> dict[str, jax.Array]:
    """Random ids with random lengths from 2 to ``length`` (padding in most rows)."""
    rng = np.random.default_rng(0)
    ids = rng.integers(5, config.vocab_size, (rows, length))
    lengths = rng.integers(2, length + 1, rows)
    mask = (np.arange(length)[None] < lengths[:, None]).astype(np.int32)
    return {"input_ids": jnp.asarray(np.where(mask == 1, ids, config.pad_id), jnp.int32),
            "attention_mask": jnp.asarray(mask)}


def pruned_and_full(model, params, batch, **kwargs) -> tuple[np.ndarray, np.ndarray]:
    apply = lambda hidden: model.apply({"params": params}, **batch, **kwargs,  # noqa: E731
                                       output_hidden_states=hidden)["logits"]
    return np.asarray(apply(False)), np.asarray(apply(True))


def assert_exact(pruned: np.ndarray, full: np.ndarray) -> None:
    """Equal within float32 rounding: a few units in the last place of the largest logit."""
    assert pruned.shape == full.shape and pruned.dtype == np.float32
    np.testing.assert_allclose(pruned, full, rtol=0, atol=1e-6 * np.abs(full).max())


def with_config(model, **fields):
    return type(model)(dataclasses.replace(model.config, **fields))


@pytest.mark.parametrize("name", [n if n in FAST else pytest.param(n, marks=pytest.mark.slow)
                                  for n in SEQCLS])
def test_pruned_logits_equal_the_full_computation(name):
    pretrained = load_pretrained(FIXTURES / name)
    model, params = pretrained.model, pretrained.params
    if model.config.architecture == "modernbert":      # the fixture pools the mean
        model = with_config(model, classifier_pooling="cls")
    assert model.config.first_token_head
    batch = padded_batch(model.config)
    assert_exact(*pruned_and_full(model, params, batch))


@pytest.mark.parametrize("every", [2, 3])
def test_modernbert_pruned_last_layer_global_and_local(every):
    """The fixture's last layer is global with every 2nd layer global, local (window 4) with
    every 3rd; rotary positions offset by 5 are gathered for the query row too."""
    pretrained = load_pretrained(FIXTURES / "modernbert_seqcls")
    model = with_config(pretrained.model, classifier_pooling="cls",
                        global_attn_every_n_layers=every)
    assert (model.config.layer_options(model.config.num_layers - 1)["window"] is None) == (
        every == 2)
    batch = padded_batch(model.config)
    positions = jnp.broadcast_to(jnp.arange(24) + 5, batch["input_ids"].shape)
    assert_exact(*pruned_and_full(model, pretrained.params, batch, position_ids=positions))


def test_first_token_head_rule():
    def rule(**fields):
        return EncoderConfig(**{**EncoderConfig.tiny, **fields}).first_token_head

    for family in ("bert", "roberta", "xlm-roberta", "electra", "distilbert"):
        types = 0 if family == "distilbert" else 2
        assert rule(architecture=family, head="sequence_classification", type_vocab_size=types)
    assert rule(architecture="deberta-v2", head="sequence_classification", type_vocab_size=0,
                absolute_positions=False, relative_attention=("c2p", "p2c"))
    modern = dict(architecture="modernbert", head="sequence_classification",
                  type_vocab_size=0, absolute_positions=False)
    assert rule(**modern, classifier_pooling="cls")
    assert not rule(**modern, classifier_pooling="mean")
    for head in ("model", "masked_lm", "token_classification", "question_answering"):
        assert not rule(head=head)
    assert not rule(architecture="electra", head="pretraining")


def test_pruning_keeps_the_parameter_tree_and_computes_less():
    model = get_model("bert_tiny", head="sequence_classification", num_labels=3,
                      **{**EncoderConfig.tiny, "num_layers": 2})
    ids = jnp.ones((2, 32), jnp.int32)
    init = lambda hidden: jax.eval_shape(  # noqa: E731
        lambda k: model.init(k, ids, output_hidden_states=hidden), jax.random.PRNGKey(0))
    assert init(False) == init(True)
    params = model.init(jax.random.PRNGKey(0), ids)["params"]

    def flops(hidden):
        run = jax.jit(lambda p: model.apply({"params": p}, ids, output_hidden_states=hidden))
        cost = run.lower(params).compile().cost_analysis()
        return (cost[0] if isinstance(cost, list) else cost)["flops"]

    assert flops(False) < 0.8 * flops(True)


@pytest.mark.parametrize("name", ["bert_seqcls", "deberta_v3_seqcls", "modernbert_seqcls"])
def test_pruned_training_step_runs_with_finite_grads(name):
    pretrained = load_pretrained(FIXTURES / name)
    model, params = pretrained.model, pretrained.params
    if model.config.architecture == "modernbert":
        model = with_config(model, classifier_pooling="cls", dropout=0.1,
                            attention_dropout=0.1)
    batch = padded_batch(model.config, rows=4, length=16)

    def loss(p):
        logits = model.apply({"params": p}, **batch, deterministic=False,
                             rngs={"dropout": jax.random.PRNGKey(1)})["logits"]
        return jax.nn.logsumexp(logits, -1).sum() - logits[:, 0].sum()

    value, grads = jax.jit(jax.value_and_grad(loss))(params)
    assert np.isfinite(value)
    assert all(np.isfinite(g).all() for g in jax.tree_util.tree_leaves(grads))
    assert any(np.abs(g).max() > 0 for g in jax.tree_util.tree_leaves(grads))


OPTIONS = {"plain": {}, "rotary_window": dict(rotary_theta=10_000.0, window=3),
           "relative": dict(relative=Disentangled(buckets=4, max_distance=16)),
           "relative_unshared": dict(relative=Disentangled(kinds=("c2p", "p2c"), buckets=-1,
                                                           max_distance=6, share_key=False))}


@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_attention_queries_are_the_rows_of_the_full_attention(option):
    """Any query rows (not only the first), with a padding mask over the keys."""
    layer = MultiHeadAttention(num_heads=2, d_model=8, **OPTIONS[option])
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(3, 12, 8)), jnp.float32)
    mask = jnp.asarray(np.arange(12)[None] < np.array([12, 9, 4])[:, None])[:, None, None]
    relative = jnp.asarray(rng.normal(size=(2 * 16, 8)), jnp.float32)
    kwargs = {"relative_embeddings": relative} if "relative" in option else {}
    positions = jnp.broadcast_to(jnp.arange(12) + 2, (3, 12))
    if option == "rotary_window":
        kwargs["rotary_positions"] = positions
    params = layer.init(jax.random.PRNGKey(0), x, mask, **kwargs)
    full = layer.apply(params, x, mask, **kwargs)
    queries = jnp.asarray([[0, 5, 11], [3, 3, 8], [0, 1, 2]], jnp.int32)
    part = layer.apply(params, x, mask, queries=queries, **kwargs)
    np.testing.assert_allclose(part, take_rows(full, queries), rtol=0, atol=1e-6)


def test_dense_part_is_the_slice_of_the_full_projection():
    dense = Dense((3, 2, 4), batch_axes=(0,))
    x = jnp.asarray(np.random.default_rng(0).normal(size=(5, 6)), jnp.float32)
    params = dense.init(jax.random.PRNGKey(0), x)
    params = jax.tree_util.tree_map(lambda w: w + 0.5, params)          # a nonzero bias
    full = dense.apply(params, x)
    np.testing.assert_allclose(dense.apply(params, x, part=slice(1, 3)), full[:, 1:3],
                               rtol=0, atol=1e-6)
    assert dense.apply(params, x, part=slice(0, 1)).shape == (5, 1, 2, 4)
