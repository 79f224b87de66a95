"""Packing for encoder fine-tuning: the packer (``textkit.data.packing``), its batchify, the
encoder's packed rows (block-diagonal attention, per-example positions, one logits row per
example) against each example run alone, the loss and gradient of a packed batch against the
same examples unpacked, and ``classify.py --pack`` end to end."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from textkit.batchify import EncoderBatchify, PackedBatchify
from textkit.data import DataLoader, PackedSampler, pack_rows
from textkit.models import EncoderConfig, get_model
from textkit.models.encoder import segment_positions
from textkit.tasks.sequence_classification import (
    SequenceClassificationConfig,
    SequenceClassificationTask,
)

ROOT = Path(__file__).resolve().parents[1]
MAX_LENGTH, PER_ROW = 32, 4

PRESETS = {"bert": ("bert_base_uncased", {}),
           "roberta": ("roberta_base", {}),
           "electra": ("electra_base_discriminator", {"embedding_size": 8}),
           "distilbert": ("distilbert_base_uncased", {}),
           "deberta": ("deberta_v3_small", {}),
           "modernbert": ("modernbert_base", {"num_layers": 3, "global_attn_every_n_layers": 2,
                                              "local_attention": 6, "pad_id": 1})}


def tiny_model(family: str):
    name, extra = PRESETS[family]
    return get_model(name, **{**EncoderConfig.tiny, "vocab_size": 97, "num_layers": 2,
                              "max_position_embeddings": 64 + 2 * (family == "roberta"),
                              "head": "sequence_classification", "num_labels": 3, **extra})


def examples(config: EncoderConfig, n: int = 13, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        length = int(rng.integers(2, 15))
        ids = rng.integers(config.pad_id + 3, config.vocab_size, length).astype(np.int32)
        types = (np.arange(length) >= length // 2).astype(np.int32) * (
            config.type_vocab_size > 1)
        out.append({"input_ids": ids, "token_type_ids": types,
                    "labels": np.int32(rng.integers(0, 3)), "index": np.int32(i)})
    return out


def packed_batches(model, samples, rows: int = 3) -> list[dict]:
    c = model.config
    offset = c.pad_id + 1 if c.offset_positions else 0
    sampler = PackedSampler([len(s["input_ids"]) for s in samples], MAX_LENGTH, PER_ROW, rows)
    batchify = PackedBatchify(c.pad_id, PER_ROW, with_token_types=c.type_vocab_size > 0,
                              first_position=offset, pad_position=c.pad_id if offset else 0)
    return list(DataLoader(samples, sampler, batchify))


def unpacked_batch(model, samples) -> dict:
    c = model.config
    return EncoderBatchify(c.pad_id, with_token_types=c.type_vocab_size > 0)(samples)


def inputs(batch: dict) -> dict:
    names = ("input_ids", "attention_mask", "token_type_ids", "position_ids", "segment_ids",
             "example_starts")
    return {k: jnp.asarray(batch[k]) for k in names if k in batch}


# --------------------------------------------------------------------------------- packer
def test_pack_rows_never_splits_and_respects_the_limits():
    rng = np.random.default_rng(1)
    lengths = rng.integers(1, 30, 500)
    rows = pack_rows(lengths, 32, 3)
    flat = sorted(i for r in rows for i in r)
    assert flat == list(range(500))                              # each example once, whole
    assert all(len(r) <= 3 and lengths[r].sum() <= 32 for r in rows)
    assert len(rows) < 500                                       # it did pack
    with pytest.raises(ValueError, match="example 1 has 40 tokens"):
        pack_rows([3, 40], 32, 3)


def test_sampler_batches_have_one_shape_and_the_same_steps_every_epoch():
    lengths = np.random.default_rng(2).integers(2, 20, 200)
    sampler = PackedSampler(lengths, 32, 4, 8, shuffle=True, seed=3)
    epochs = [list(sampler), list(sampler)]
    assert len(epochs[0]) == len(epochs[1]) == len(sampler)
    for batches in epochs:
        assert {b.shape for b in batches} == {sampler.shape}
        assert sorted(np.concatenate([b.indices for b in batches]).tolist()) == list(range(200))
    assert not all(np.array_equal(a.indices, b.indices) for a, b in zip(*epochs))
    cells = len(sampler) * 8 * 32
    assert sampler.padding_fraction() == pytest.approx(1 - lengths.sum() / cells)


def test_sampler_resumes_mid_epoch():
    lengths = np.random.default_rng(5).integers(2, 20, 100)
    sampler = PackedSampler(lengths, 32, 4, 4, shuffle=True, seed=1)
    full = [b.indices.tolist() for b in sampler]
    resumed = PackedSampler(lengths, 32, 4, 4, shuffle=True, seed=1)
    resumed.load_state_dict({"epoch": 0, "position": 3, "seed": 1, "num_steps": len(sampler)})
    assert [b.indices.tolist() for b in resumed] == full[3:]


def test_batchify_segments_positions_starts_and_targets():
    samples = [{"input_ids": np.array([5, 6, 7], np.int32), "labels": np.int32(1),
                "index": np.int32(0)},
               {"input_ids": np.array([8, 9], np.int32), "labels": np.int32(2),
                "index": np.int32(1)}]
    batch = PackedBatchify(1, 3, with_token_types=False, first_position=2, pad_position=1)(
        samples, PackedSampler([3, 2], 8, 3, 2).shape, [0, 0])
    np.testing.assert_array_equal(batch["input_ids"][0], [5, 6, 7, 8, 9, 1, 1, 1])
    np.testing.assert_array_equal(batch["segment_ids"][0], [1, 1, 1, 2, 2, 0, 0, 0])
    np.testing.assert_array_equal(batch["position_ids"][0], [2, 3, 4, 2, 3, 1, 1, 1])
    np.testing.assert_array_equal(batch["example_starts"], [[0, 3, 0], [0, 0, 0]])
    np.testing.assert_array_equal(batch["labels"], [[1, 2, 0], [0, 0, 0]])
    np.testing.assert_array_equal(batch["weights"], [[1, 1, 0], [0, 0, 0]])
    assert batch["attention_mask"].sum() == 5 and not batch["segment_ids"][1].any()
    np.testing.assert_array_equal(
        segment_positions(jnp.asarray(batch["segment_ids"]), 2, 1), batch["position_ids"])
    with pytest.raises(ValueError, match="token-level targets"):
        PackedBatchify(0, 2, with_token_types=False)(
            [{"input_ids": np.ones(2, np.int32), "labels": np.zeros(2, np.int32)}],
            PackedSampler([2], 8, 2, 1).shape, [0])


# ---------------------------------------------------------------------------------- model
@pytest.mark.parametrize("family", list(PRESETS))
@pytest.mark.parametrize("hidden", [False, True])
def test_packed_logits_equal_each_example_alone(family, hidden):
    """``hidden`` computes every row of the last layer (no pruning to the K first tokens)."""
    model = tiny_model(family)
    samples = examples(model.config)
    params = model.init(jax.random.key(0), jnp.zeros((1, 8), jnp.int32))["params"]
    expected = np.asarray(model.apply({"params": params},
                                      **inputs(unpacked_batch(model, samples)))["logits"])
    forward = jax.jit(lambda p, batch: model.apply({"params": p}, **batch,   # one program
                                                   output_hidden_states=hidden))  # per shape
    got = np.zeros_like(expected)
    seen = 0
    for batch in packed_batches(model, samples):
        out = forward(params, inputs(batch))
        logits = np.asarray(out["logits"])
        assert logits.shape == (3, PER_ROW, 3)
        real = batch["weights"] > 0
        got[batch["index"][real]] = logits[real]
        seen += int(real.sum())
        if family == "roberta":     # positions from segment_ids when the batch gives none
            without = {k: v for k, v in inputs(batch).items() if k != "position_ids"}
            np.testing.assert_array_equal(np.asarray(forward(params, without)["logits"]),
                                          logits)
    assert seen == len(samples)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5 * np.abs(expected).max())


def test_packing_refuses_mean_pooling_and_missing_starts():
    model = tiny_model("modernbert")
    mean = type(model)(dataclasses.replace(model.config, classifier_pooling="mean"))
    batch = inputs(packed_batches(model, examples(model.config))[0])
    params = model.init(jax.random.key(0), jnp.zeros((1, 8), jnp.int32))["params"]
    with pytest.raises(ValueError, match="classifier_pooling='mean'"):
        mean.apply({"params": params}, **batch)
    with pytest.raises(ValueError, match="need example_starts"):
        model.apply({"params": params},
                    **{k: v for k, v in batch.items() if k != "example_starts"})


# ------------------------------------------------------------------------------- the task
@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_packed_loss_and_gradient_equal_the_unpacked_ones(family, tmp_path):
    model = tiny_model(family)
    samples = examples(model.config, n=11, seed=4)
    config = SequenceClassificationConfig(dataset="toy", save_dir=str(tmp_path), pack=True)
    task = SequenceClassificationTask(config, run=None, log=lambda _: None)
    loss_fn = task.make_loss(model)
    params = model.init(jax.random.key(1), jnp.zeros((1, 8), jnp.int32))["params"]

    def total(batches):
        def f(p):
            parts = [loss_fn(p, {k: jnp.asarray(v) for k, v in b.items()}, None)
                     for b in batches]
            return sum(loss for loss, _ in parts), parts
        # one compiled program, not hundreds of op-by-op ones
        (loss, parts), grads = jax.jit(jax.value_and_grad(f, has_aux=True))(params)
        weight = sum(float(w) for _, (w, _) in parts)
        tokens = sum(float(m["input_tokens"]) for _, (_, m) in parts)
        correct = sum(float(m["correct"]) for _, (_, m) in parts)
        return float(loss), grads, weight, tokens, correct

    packed = total(packed_batches(model, samples, rows=2))
    unpacked = total([unpacked_batch(model, samples)])
    assert packed[2] == unpacked[2] == len(samples)
    assert packed[3] == unpacked[3] == sum(len(s["input_ids"]) for s in samples)
    assert packed[4] == unpacked[4]
    assert packed[0] == pytest.approx(unpacked[0], rel=1e-5)
    for a, b in zip(jax.tree_util.tree_leaves(packed[1]), jax.tree_util.tree_leaves(unpacked[1])):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5 * max(float(np.abs(b).max()), 1e-3))


@pytest.mark.slow
def test_classify_with_pack_trains_end_to_end(tmp_path):
    sys.path.insert(0, str(ROOT / "examples" / "finetune"))
    import classify

    summary = classify.main([
        "--model", "bert_tiny", "--model-overrides", "num_layers=1,hidden_size=32,"
        "num_heads=2,intermediate_size=64", "--toy-examples", "64", "--vocab-size", "200",
        "--pack", "--max-per-row", "6", "--max-length", "32", "--batch-tokens", "128",
        "--max-steps", "4", "--eval-every", "2", "--no-progress", "--no-tensorboard",
        "--no-export", "--save-dir", str(tmp_path / "run")])
    assert summary["steps"] == 4 and np.isfinite(summary["last_loss"])
    assert summary["padding"]["num_shapes"] == 1 and summary["valid_accuracy"] >= 0
    text = "".join(p.read_text() for p in (tmp_path / "run").rglob("train.log"))
    assert "padding: packed rows" in text and "1 batch shape(s) compiled" in text
